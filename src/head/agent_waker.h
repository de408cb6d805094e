// AgentWaker: asks agents to heartbeat now (POST {agent_url}/v1/wake), so a new
// assignment or a kill reaches them in milliseconds rather than at the next heartbeat.
// Best effort: a lost wake-up only delays the change until the next regular heartbeat.
// Wake may be called from any thread; requests are deduplicated and sent by a small
// pool of sender threads so a slow agent does not hold up the others.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cohort::head {

class AgentWaker {
 public:
  explicit AgentWaker(int threads = 4);
  ~AgentWaker();  // stops the senders; queued wake-ups are dropped

  void Wake(std::vector<std::string> agent_urls);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;         // signalled with mu_
  std::deque<std::string> queue_;      // guarded by mu_
  std::set<std::string> queued_;       // guarded by mu_
  bool stopping_ = false;              // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace cohort::head
