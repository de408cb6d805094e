#include "head/agent_waker.h"

#include <algorithm>
#include <functional>
#include <map>

#include "api/routes.h"
#include "common/http.h"
#include "common/log.h"

namespace cohort::head {

AgentWaker::AgentWaker(int threads, std::optional<tls::ClientOptions> tls) : tls_(std::move(tls)) {
  const size_t senders = static_cast<size_t>(std::max(1, threads));
  {
    MutexLock lock(mu_);
    queues_.resize(senders);
  }
  for (size_t i = 0; i < senders; ++i) threads_.emplace_back([this, i] { Run(i); });
}

AgentWaker::~AgentWaker() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void AgentWaker::Wake(std::vector<std::string> agent_urls) {
  {
    MutexLock lock(mu_);
    for (auto& url : agent_urls) {
      if (!queued_.insert(url).second) continue;
      queues_[std::hash<std::string>{}(url) % queues_.size()].push_back(std::move(url));
    }
  }
  cv_.NotifyAll();
}

void AgentWaker::Run(size_t sender) {
  std::map<std::string, HttpClient> clients;  // by agent URL: this sender's agents
  while (true) {
    std::string url;
    {
      MutexLock lock(mu_);
      std::deque<std::string>& queue = queues_[sender];
      while (!stopping_ && queue.empty()) cv_.Wait(mu_);
      if (stopping_) return;
      url = std::move(queue.front());
      queue.pop_front();
      queued_.erase(url);
    }
    if (clients.size() > 4096) clients.clear();  // agents come and go: forget them now and then
    auto it = clients.find(url);
    if (it == clients.end()) {
      it = clients.emplace(url, HttpClient(url, Millis(500))).first;
      if (tls_) it->second.set_tls(*tls_);
    }
    if (auto r = it->second.Post(api::routes::kAgentWake, json::object()); !r) {
      LOG_DEBUG("wake-up of {} failed: {}", url, r.error().message);
    }
  }
}

}  // namespace cohort::head
