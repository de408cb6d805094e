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
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void AgentWaker::Wake(std::vector<std::string> agent_urls) {
  {
    std::lock_guard lock(mu_);
    for (auto& url : agent_urls) {
      if (queued_.insert(url).second) queue_.push_back(std::move(url));
    }
  }
  cv_.notify_all();
}

void AgentWaker::Run() {
  while (true) {
    std::string url;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
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
