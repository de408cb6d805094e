// AgentWaker: asks agents to heartbeat now (POST {agent_url}/v1/wake), so a new
// assignment or a kill reaches them in milliseconds rather than at the next heartbeat.
// Best effort: a lost wake-up only delays the change until the next regular heartbeat.
// Wake may be called from any thread; requests are deduplicated and sent by a small
// pool of sender threads so a slow agent does not hold up the others. An agent's
// wake-ups always go through the same sender (by its URL's hash), so at most one is in
// flight per agent, over the agent's kept client (AgentClients: one connection per agent,
// shared with the head's other calls to it).
#pragma once

#include <deque>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace cohort::head {

class AgentClients;

class AgentWaker {
 public:
  // `clients` must outlive the waker.
  explicit AgentWaker(AgentClients& clients, int threads = 4);
  ~AgentWaker();  // stops the senders; queued wake-ups are dropped

  void Wake(std::vector<std::string> agent_urls) EXCLUDES(mu_);

 private:
  void Run(size_t sender) EXCLUDES(mu_);  // each sender thread

  Mutex mu_;
  CondVar cv_;  // signalled when a queue grows and when stopping
  std::vector<std::deque<std::string>> queues_ GUARDED_BY(mu_);  // one per sender
  std::set<std::string> queued_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  AgentClients& clients_;
  std::vector<std::thread> threads_;
};

}  // namespace cohort::head
