#include "head/agent_clients.h"

namespace cohort::head {

HttpClient AgentClients::For(const std::string& agent_url, Millis timeout, const std::string& node) {
  HttpClient client = [&] {
    MutexLock lock(mu_);
    auto it = clients_.find(agent_url);
    // A call for a node needs a client that checks that node's certificate; one for none
    // (the waker, which sends no credential) takes the URL's client as it is, so both
    // share its connection.
    const bool fits = it != clients_.end() && (!tls_ || node.empty() || it->second.node == node);
    if (!fits) {
      if (it == clients_.end() && clients_.size() >= 4096) clients_.clear();
      HttpClient fresh(agent_url);
      if (tls_) {
        tls::ClientOptions options = *tls_;
        options.peer_name = node;
        fresh.set_tls(options);
      }
      it = clients_.insert_or_assign(agent_url, Entry{std::move(fresh), node}).first;
    }
    return it->second.client;
  }();
  client.set_timeout(timeout);
  return client;
}

}  // namespace cohort::head
