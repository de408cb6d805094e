// TLS for the head's API and the agent protocol (issue 13): a certificate authority the
// head makes for itself, the certificates it issues (its own, and each node's from the
// agent's certificate request), and the contexts HttpServer and HttpClient use.
//
// Keys are ECDSA P-256; certificates are X.509 v3, signed with SHA-256. A leaf
// certificate's validity starts kClockSkew before it is issued, so that a machine whose
// clock is a little behind the head's accepts it at once.
//
// Identities change at run time (an agent gets its certificate when it registers and
// renews it before it expires), so a server context and a client identity hold the
// current certificate behind a lock and every new connection takes the current one;
// connections already open keep theirs.
//
// Threads: every function and method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;
typedef struct x509_st X509;
typedef struct evp_pkey_st EVP_PKEY;

namespace cohort::tls {

// How far back a leaf certificate's validity starts.
inline constexpr int64_t kClockSkewMs = 5 * 60 * 1000;
// The name in the head's certificate: agents accept calls only from it.
inline constexpr char kHeadName[] = "cohort-head";

// A new ECDSA P-256 private key, PEM (PKCS#8).
Result<std::string> NewPrivateKeyPem();

// A certificate request for `key_pem`, naming `common_name`, PEM. The head ignores the
// name and issues the certificate for the node the join token registered.
Result<std::string> MakeCsrPem(const std::string& key_pem, const std::string& common_name);

struct Authority {
  std::string cert_pem;
  std::string key_pem;
};
// A self-signed certificate authority valid for `lifetime_ms`.
Result<Authority> NewAuthority(const std::string& name, int64_t lifetime_ms, int64_t now_ms);
// Checks that `key_pem` is the private key of `cert_pem`, a CA certificate; the error says
// which part is wrong (`what` names the files in it).
Result<void> CheckAuthority(const Authority& ca, std::string_view what);

// What a certificate the authority issues says.
struct LeafProfile {
  std::string common_name;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;  // IPv4 or IPv6 text
  bool server = true;                     // extendedKeyUsage serverAuth
  bool client = true;                     // extendedKeyUsage clientAuth
  int64_t lifetime_ms = 0;                // from now
};
// Issues a certificate for the public key of `csr_pem` (after checking the request's
// signature); kInvalidArgument naming "csr" for a request that does not parse or verify.
Result<std::string> IssueFromCsr(const Authority& ca, const std::string& csr_pem, const LeafProfile& profile,
                                 int64_t now_ms);
// Issues a certificate for the public key of `key_pem`.
Result<std::string> IssueForKey(const Authority& ca, const std::string& key_pem, const LeafProfile& profile,
                                int64_t now_ms);

struct CertInfo {
  std::string common_name;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  int64_t not_before_ms = 0;
  int64_t not_after_ms = 0;
  std::string serial_hex;
  std::string sha256;  // the fingerprint of the DER encoding, hex
};
Result<CertInfo> Inspect(const std::string& cert_pem);
// OK if `cert_pem` was issued by `ca_pem` and is valid at `now_ms`; kUnauthenticated
// saying why not.
Result<void> VerifyIssuedBy(const std::string& ca_pem, const std::string& cert_pem, int64_t now_ms);

// A certificate and its private key, parsed once (both kept until the last user drops it).
class Identity {
 public:
  static Result<std::shared_ptr<const Identity>> Parse(const std::string& cert_pem, const std::string& key_pem);
  ~Identity();
  X509* cert() const { return cert_; }
  EVP_PKEY* key() const { return key_; }
  const std::string& cert_pem() const { return cert_pem_; }
  const CertInfo& info() const { return info_; }

 private:
  Identity() = default;
  X509* cert_ = nullptr;
  EVP_PKEY* key_ = nullptr;
  std::string cert_pem_;
  CertInfo info_;
};

// The identity a process presents, replaced when it is renewed.
class IdentitySlot {
 public:
  void Set(std::shared_ptr<const Identity> id) EXCLUDES(mu_);
  std::shared_ptr<const Identity> Get() const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::shared_ptr<const Identity> current_ GUARDED_BY(mu_);
};

// What a client trusts and presents.
struct ClientOptions {
  std::string ca_pem;                    // the only authority it trusts
  std::shared_ptr<IdentitySlot> identity;  // optional: a client certificate
  // Optional: the common name the server's certificate must carry besides `host` (the
  // head calling a node's agent asks for the node's name: another node's certificate for
  // the same address is not that agent's).
  std::string peer_name = {};  // (a default: brace-initialized options may leave it out)
};
// The options from the environment: $COHORT_CA (the PEM itself, as the head gives it to
// tasks) or $COHORT_CA_FILE (a path); nullopt when neither is set; an error naming the
// variable when it does not hold a certificate.
Result<std::optional<ClientOptions>> ClientOptionsFromEnv();
// Reads a PEM file (at most 1 MiB); kInvalidArgument naming the file when it cannot.
Result<std::string> ReadPemFile(const std::string& path);
// Reads a CA certificate file; the error names the file.
Result<std::string> ReadCaFile(const std::string& path);

// Prepares `ctx` (a client's, before its first connection) to trust only `options.ca_pem`,
// to check that the server's certificate names `host` (a DNS name or an IP address) and,
// when set, has `options.peer_name` as its common name, and
// to present `options.identity`'s certificate: the one it holds at each handshake, so a
// context kept for reconnections presents a renewed certificate on its next connection.
// The parsed trust store is shared between the contexts that trust the same authority.
Result<void> ConfigureClientContext(SSL_CTX* ctx, const ClientOptions& options, const std::string& host);

// A server's TLS: its identity (none yet: handshakes fail until one is set), and the
// authority whose client certificates it accepts (clients without one are served too;
// PeerName tells a handler who presented what).
class ServerContext {
 public:
  static Result<std::shared_ptr<ServerContext>> Create(const std::string& client_ca_pem);
  ~ServerContext();
  void SetIdentity(std::shared_ptr<const Identity> id) { identity_.Set(std::move(id)); }
  std::shared_ptr<const Identity> identity() const { return identity_.Get(); }
  // A server reached at several addresses that is a different party at each (a test or
  // benchmark standing in for many nodes on one socket) picks the certificate of each
  // handshake from its SSL (e.g. the local address of SSL_get_fd); null from the chooser
  // fails the handshake. Set before serving; replaces SetIdentity's certificate.
  using IdentityChooser = std::function<std::shared_ptr<const Identity>(SSL* ssl)>;
  void SetIdentityChooser(IdentityChooser choose) { choose_ = std::move(choose); }
  // A server-side SSL for the accepted socket `fd` (non-blocking); nullptr on failure.
  SSL* NewConnection(int fd) const;

 private:
  ServerContext() = default;
  static int CertCallback(SSL* ssl, void* arg);
  SSL_CTX* ctx_ = nullptr;
  IdentitySlot identity_;
  IdentityChooser choose_;
};

// The common name of the verified certificate the peer of `ssl` presented; nullopt when
// it presented none (or `ssl` is null: a plain connection).
std::optional<std::string> PeerName(const SSL* ssl);

// Empties this thread's OpenSSL error queue, as every SSL_read / SSL_write / handshake
// call must find it (SSL_get_error reads it). Looks before it clears: a clear walks the
// queue's 16 slots (~90 ns here) where the look costs ~13 ns, and on the request path the
// queue is almost always empty already.
void ClearErrors();

// "sha256:<hex>" of a certificate, for logs and `cohort login`.
std::string Fingerprint(const CertInfo& info);

// True when `s` is an IPv4 or IPv6 address (a certificate names it as an IP SAN).
bool IsIpAddress(const std::string& s);
// The base64 SHA-256 of a certificate's public key (its SubjectPublicKeyInfo): what
// browsers pin (Chromium's --ignore-certificate-errors-spki-list, HPKP).
Result<std::string> SpkiSha256Base64(const std::string& cert_pem);

}  // namespace cohort::tls
