#include "head/agent_clients.h"

namespace cohort::head {

HttpClient AgentClients::For(const std::string& agent_url, Millis timeout) {
  HttpClient client = [&] {
    MutexLock lock(mu_);
    auto it = clients_.find(agent_url);
    if (it == clients_.end()) {
      if (clients_.size() >= 4096) clients_.clear();
      HttpClient fresh(agent_url);
      if (tls_) fresh.set_tls(*tls_);
      it = clients_.emplace(agent_url, std::move(fresh)).first;
    }
    return it->second;
  }();
  client.set_timeout(timeout);
  return client;
}

}  // namespace cohort::head
