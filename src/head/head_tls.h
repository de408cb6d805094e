// The head's TLS (issue 13): its certificate authority, its own certificate, and the
// certificates it issues to nodes.
//
// On the first start the head makes an authority in state_dir/tls (ca.crt, and ca.key
// readable only by the head's user), unless --tls-ca-cert/--tls-ca-key name one of the
// site's. Its own certificate (head.crt, head.key; name tls::kHeadName) names every
// address a client may dial: localhost, the host name, the listen and advertised
// addresses (every local address when it listens on all of them) and --tls-san; it is
// issued again on a start that finds it missing a name, from another authority, or in the
// last third of its life. It serves the API and is the client certificate the head
// presents when it calls an agent.
//
// An agent sends a certificate request when it registers (with a join token) and gets a
// certificate naming its node (and its address, for the head's calls to it), valid for
// node_cert_ttl; it asks for a new one with its current one before a third of the
// lifetime is left. The router accepts a node's credential only over a connection whose
// client certificate names that node.
//
// Threads: IssueNode and the accessors may be called from any thread.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "common/error.h"
#include "common/tls.h"
#include "head/config.h"

namespace cohort::head {

class HeadTls {
 public:
  // Loads or makes the authority and the head's certificate for a head that listens on
  // `config.listen_host` and is reached at `advertise_url`.
  static Result<std::unique_ptr<HeadTls>> SetUp(const HeadConfig& config, const std::string& advertise_url);

  const std::shared_ptr<tls::ServerContext>& server() const { return server_; }
  // What the head trusts and presents when it calls agents.
  const tls::ClientOptions& client() const { return client_; }
  const std::string& ca_pem() const { return ca_.cert_pem; }
  // Where the authority's certificate is (for clients: the client config's `ca`).
  const std::string& ca_path() const { return ca_path_; }

  struct Issued {
    std::string cert_pem;
    int64_t expires_ms = 0;
  };
  // A certificate for `node` (reachable at `address`, an IP address or a DNS name) for the
  // key of `csr_pem`, asked over a connection from `from` (an IP address); kInvalidArgument
  // naming "csr" for a bad request. A node certificate is a server certificate of the
  // head's authority for its address, which every client of the head trusts: so it is
  // refused (kInvalidArgument naming the field) for the name tls::kHeadName (agents take
  // it for the head's), for an address that is not a plain host name or IP address (a
  // wildcard would name the head too), and for one of the head's own names unless `from`
  // is an address of the head's machine (a local cluster's agents): a join token holder
  // elsewhere would otherwise get a certificate that passes for the head's.
  Result<Issued> IssueNode(const std::string& node, const std::string& address, const std::string& csr_pem,
                           int64_t now_ms, const std::string& from) const;

 private:
  HeadTls() = default;
  tls::Authority ca_;
  std::string ca_path_;
  int64_t node_cert_ttl_ms_ = 0;
  std::set<std::string> own_names_;  // the DNS names and IP addresses of the head's certificate
  std::shared_ptr<tls::ServerContext> server_;
  tls::ClientOptions client_;
};

}  // namespace cohort::head
