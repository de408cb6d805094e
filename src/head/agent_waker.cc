#include "head/agent_waker.h"

#include <algorithm>
#include <functional>

#include "api/routes.h"
#include "common/http.h"
#include "common/log.h"
#include "head/agent_clients.h"

namespace cohort::head {

AgentWaker::AgentWaker(AgentClients& clients, int threads) : clients_(clients) {
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
    if (auto r = clients_.For(url, Millis(500)).Post(api::routes::kAgentWake, json::object()); !r) {
      LOG_DEBUG("wake-up of {} failed: {}", url, r.error().message);
    }
  }
}

}  // namespace cohort::head
