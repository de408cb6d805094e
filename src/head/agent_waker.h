// AgentWaker: asks agents to heartbeat now (POST {agent_url}/v1/wake), so a new
// assignment or a kill reaches them in milliseconds rather than at the next heartbeat.
// Best effort: a lost wake-up only delays the change until the next regular heartbeat.
// Wake may be called from any thread; requests are deduplicated and sent by a small
// pool of sender threads so a slow agent does not hold up the others. An agent's
// wake-ups always go through the same sender (by its URL's hash), which keeps its client
// for that agent: one connection per agent, and under TLS one client context, made once
// (a TLS handshake and a context per wake-up would cost more than the wake-up).
#pragma once

#include <deque>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/tls.h"

namespace cohort::head {

class AgentWaker {
 public:
  // `tls`: what the head trusts and presents when it calls agents over HTTPS.
  explicit AgentWaker(int threads = 4, std::optional<tls::ClientOptions> tls = std::nullopt);
  ~AgentWaker();  // stops the senders; queued wake-ups are dropped

  void Wake(std::vector<std::string> agent_urls) EXCLUDES(mu_);

 private:
  void Run(size_t sender) EXCLUDES(mu_);  // each sender thread

  Mutex mu_;
  CondVar cv_;  // signalled when a queue grows and when stopping
  std::vector<std::deque<std::string>> queues_ GUARDED_BY(mu_);  // one per sender
  std::set<std::string> queued_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  const std::optional<tls::ClientOptions> tls_;
  std::vector<std::thread> threads_;
};

}  // namespace cohort::head
