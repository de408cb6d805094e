#include "head/agent_waker.h"

#include "api/routes.h"
#include "common/http.h"
#include "common/log.h"

namespace cohort::head {

AgentWaker::AgentWaker(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
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
      if (queued_.insert(url).second) queue_.push_back(std::move(url));
    }
  }
  cv_.NotifyAll();
}

void AgentWaker::Run() {
  while (true) {
    std::string url;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.Wait(mu_);
      if (stopping_) return;
      url = std::move(queue_.front());
      queue_.pop_front();
      queued_.erase(url);
    }
    HttpClient client(url, Millis(500));
    if (auto r = client.Post(api::routes::kAgentWake, json::object()); !r) {
      LOG_DEBUG("wake-up of {} failed: {}", url, r.error().message);
    }
  }
}

}  // namespace cohort::head
