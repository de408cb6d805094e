#include "head/agent_clients.h"

namespace cohort::head {

HttpClient AgentClients::For(const std::string& agent_url, Millis timeout, const std::string& node) {
  HttpClient client = [&] {
    MutexLock lock(mu_);
    auto key = std::make_pair(agent_url, node);
    auto it = clients_.find(key);
    if (it == clients_.end()) {
      if (clients_.size() >= 4096) clients_.clear();
      HttpClient fresh(agent_url);
      if (tls_) {
        tls::ClientOptions options = *tls_;
        options.peer_name = node;
        fresh.set_tls(options);
      }
      it = clients_.emplace(std::move(key), std::move(fresh)).first;
    }
    return it->second;
  }();
  client.set_timeout(timeout);
  return client;
}

}  // namespace cohort::head
