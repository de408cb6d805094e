// AgentClients: the head's HTTP clients for its agents, one per agent URL, shared by every
// caller (the waker's senders, and through Router::AgentClient logs, exec and images).
// The copies of one agent's client share its kept connections (common/http.h), so the head
// keeps about one connection to each agent, and under TLS one client context and one
// handshake per connection rather than per call: `cohort logs -f` asks 4 times a second,
// the waker once per change, and a new client context alone costs ~90 us here.
//
// Each copy carries its own timeout (and whatever the caller sets on it, e.g. the node's
// bearer credential); the kept connections are the URL's. Agents come and go: past 4,096
// URLs the clients are forgotten (their connections close as the copies in use go).
//
// Threads: any.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/http.h"
#include "common/mutex.h"
#include "common/tls.h"

namespace cohort::head {

class AgentClients {
 public:
  // `tls`: what the head trusts and presents when it calls agents over HTTPS (none: plain
  // HTTP, or an https:// agent URL fails).
  explicit AgentClients(std::optional<tls::ClientOptions> tls = std::nullopt) : tls_(std::move(tls)) {}

  // A copy of `agent_url`'s client, with `timeout`. With `node`, over TLS the agent's
  // certificate must be that node's (tls::ClientOptions::peer_name), not only name its
  // address: a node can claim another's address, and the head's call carries the node's
  // credential and its user's exec input. The URL keeps one client: a call naming another
  // node than its client checks (or the first to name one) replaces it; a call naming none
  // (the waker) uses it as it is.
  HttpClient For(const std::string& agent_url, Millis timeout, const std::string& node = "") EXCLUDES(mu_);

 private:
  struct Entry {
    HttpClient client;
    std::string node;  // the name its certificate check asks for; "" none
  };
  const std::optional<tls::ClientOptions> tls_;
  Mutex mu_;
  std::map<std::string, Entry> clients_ GUARDED_BY(mu_);  // by agent URL
};

}  // namespace cohort::head
