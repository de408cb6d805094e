#include "common/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>

#include "common/log.h"

namespace cohort::tls {

namespace {

template <typename T, void (*F)(T*)>
struct Free {
  void operator()(T* p) const { F(p); }
};
using BioPtr = std::unique_ptr<BIO, Free<BIO, BIO_free_all>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY, EVP_PKEY_free>>;
using CertPtr = std::unique_ptr<X509, Free<X509, X509_free>>;
using ReqPtr = std::unique_ptr<X509_REQ, Free<X509_REQ, X509_REQ_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Free<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Free<X509_STORE_CTX, X509_STORE_CTX_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Free<GENERAL_NAMES, GENERAL_NAMES_free>>;

// OpenSSL's error queue as text (and cleared), for a message.
std::string SslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no detail" : out;
}

std::unexpected<Error> SslError(ErrorCode code, std::string_view what) {
  return Errorf(code, "{}: {}", what, SslErrors());
}

BioPtr MemBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

Result<KeyPtr> ReadKey(const std::string& pem) {
  auto bio = MemBio(pem);
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return SslError(ErrorCode::kInvalidArgument, "not a PEM private key");
  return key;
}

Result<CertPtr> ReadCert(const std::string& pem) {
  auto bio = MemBio(pem);
  CertPtr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return SslError(ErrorCode::kInvalidArgument, "not a PEM certificate");
  return cert;
}

Result<std::string> CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509(bio.get(), cert)) return SslError(ErrorCode::kInternal, "cannot encode a certificate");
  return BioText(bio.get());
}

int64_t AsnTimeMs(const ASN1_TIME* t) {
  tm parts{};
  if (!t || ASN1_TIME_to_tm(t, &parts) != 1) return 0;
  return static_cast<int64_t>(timegm(&parts)) * 1000;
}

std::string Hex(const unsigned char* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

Result<void> AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const std::string& value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str());
  if (!ext) return SslError(ErrorCode::kInvalidArgument, fmt::format("certificate extension '{}'", value));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (!ok) return SslError(ErrorCode::kInternal, "cannot add a certificate extension");
  return {};
}

Result<void> SetName(X509_NAME* name, const std::string& common_name) {
  if (common_name.empty() || common_name.size() > 64) {
    return Errorf(ErrorCode::kInvalidArgument, "certificate name '{}' must have 1 to 64 characters", common_name);
  }
  if (!X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0)) {
    return SslError(ErrorCode::kInvalidArgument, "certificate name");
  }
  return {};
}

// A certificate for `key` with a random serial, valid from `from_ms` to `to_ms`, its
// issuer `issuer` (nullptr: itself), not yet signed.
Result<CertPtr> NewCert(EVP_PKEY* key, const std::string& common_name, X509* issuer, int64_t from_ms,
                        int64_t to_ms) {
  CertPtr cert(X509_new());
  if (!cert || !X509_set_version(cert.get(), 2)) return SslError(ErrorCode::kInternal, "X509_new");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return SslError(ErrorCode::kInternal, "RAND_bytes");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  ASN1_INTEGER* asn_serial = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  if (!asn_serial) return SslError(ErrorCode::kInternal, "certificate serial");
  if (!ASN1_TIME_set(X509_getm_notBefore(cert.get()), static_cast<time_t>(from_ms / 1000)) ||
      !ASN1_TIME_set(X509_getm_notAfter(cert.get()), static_cast<time_t>(to_ms / 1000))) {
    return SslError(ErrorCode::kInternal, "certificate validity");
  }
  COHORT_TRY_VOID(SetName(X509_get_subject_name(cert.get()), common_name));
  if (!X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : X509_get_subject_name(cert.get())) ||
      !X509_set_pubkey(cert.get(), key)) {
    return SslError(ErrorCode::kInternal, "certificate issuer or key");
  }
  return cert;
}

Result<std::string> IssueForPublicKey(const Authority& ca, EVP_PKEY* key, const LeafProfile& profile, int64_t now_ms) {
  if (profile.lifetime_ms <= 0) return MakeError(ErrorCode::kInvalidArgument, "certificate lifetime must be positive");
  auto ca_cert = COHORT_TRY(ReadCert(ca.cert_pem));
  auto ca_key = COHORT_TRY(ReadKey(ca.key_pem));
  // Never past the authority's own expiry: a chain is only as valid as its root.
  const int64_t ca_end = AsnTimeMs(X509_get0_notAfter(ca_cert.get()));
  const int64_t end = std::min(now_ms + profile.lifetime_ms, ca_end);
  auto cert = COHORT_TRY(NewCert(key, profile.common_name, ca_cert.get(), now_ms - kClockSkewMs, end));
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, ca_cert.get(), cert.get(), nullptr, nullptr, 0);
  COHORT_TRY_VOID(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE"));
  COHORT_TRY_VOID(AddExtension(cert.get(), &ctx, NID_key_usage, "critical,digitalSignature,keyAgreement"));
  std::string eku;
  if (profile.server) eku += "serverAuth";
  if (profile.client) eku += std::string(eku.empty() ? "" : ",") + "clientAuth";
  if (!eku.empty()) COHORT_TRY_VOID(AddExtension(cert.get(), &ctx, NID_ext_key_usage, eku));
  COHORT_TRY_VOID(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  COHORT_TRY_VOID(AddExtension(cert.get(), &ctx, NID_authority_key_identifier, "keyid:always"));
  std::string san;
  for (const auto& d : profile.dns_names) {
    if (d.empty() || d.find_first_of(",: \t\r\n") != std::string::npos) {
      return Errorf(ErrorCode::kInvalidArgument, "'{}' is not a DNS name for a certificate", d);
    }
    san += (san.empty() ? "DNS:" : ",DNS:") + d;
  }
  for (const auto& ip : profile.ip_addresses) {
    if (!IsIpAddress(ip)) return Errorf(ErrorCode::kInvalidArgument, "'{}' is not an IP address", ip);
    san += (san.empty() ? "IP:" : ",IP:") + ip;
  }
  if (!san.empty()) COHORT_TRY_VOID(AddExtension(cert.get(), &ctx, NID_subject_alt_name, san));
  if (!X509_sign(cert.get(), ca_key.get(), EVP_sha256())) return SslError(ErrorCode::kInternal, "cannot sign");
  return CertPem(cert.get());
}

std::vector<std::string> SubjectAltNames(X509* cert, int type) {
  std::vector<std::string> out;
  NamesPtr names(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  if (!names) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    if (n->type != type) continue;
    if (type == GEN_DNS) {
      const ASN1_STRING* s = n->d.dNSName;
      out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s));
    } else if (type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = n->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = {};
      const int len = ASN1_STRING_length(s);
      if (len == 4 || len == 16) {
        inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), text, sizeof text);
        out.emplace_back(text);
      }
    }
  }
  return out;
}

std::string CommonName(X509* cert) {
  char buf[256] = {};
  int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

CertInfo InfoOf(X509* cert) {
  CertInfo info;
  info.common_name = CommonName(cert);
  info.dns_names = SubjectAltNames(cert, GEN_DNS);
  info.ip_addresses = SubjectAltNames(cert, GEN_IPADD);
  info.not_before_ms = AsnTimeMs(X509_get0_notBefore(cert));
  info.not_after_ms = AsnTimeMs(X509_get0_notAfter(cert));
  if (BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr)) {
    char* hex = BN_bn2hex(bn);
    info.serial_hex = hex ? hex : "";
    OPENSSL_free(hex);
    BN_free(bn);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert, EVP_sha256(), md, &len)) info.sha256 = Hex(md, len);
  return info;
}

Result<StorePtr> StoreOf(const std::string& ca_pem) {
  auto ca = COHORT_TRY(ReadCert(ca_pem));
  StorePtr store(X509_STORE_new());
  if (!store || !X509_STORE_add_cert(store.get(), ca.get())) return SslError(ErrorCode::kInternal, "trust store");
  return store;
}

}  // namespace

Result<std::string> NewPrivateKeyPem() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return SslError(ErrorCode::kInternal, "cannot make a key");
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr)) {
    return SslError(ErrorCode::kInternal, "cannot encode a key");
  }
  return BioText(bio.get());
}

Result<std::string> MakeCsrPem(const std::string& key_pem, const std::string& common_name) {
  auto key = COHORT_TRY(ReadKey(key_pem));
  ReqPtr req(X509_REQ_new());
  if (!req || !X509_REQ_set_version(req.get(), 0)) return SslError(ErrorCode::kInternal, "X509_REQ_new");
  COHORT_TRY_VOID(SetName(X509_REQ_get_subject_name(req.get()), common_name));
  if (!X509_REQ_set_pubkey(req.get(), key.get()) || !X509_REQ_sign(req.get(), key.get(), EVP_sha256())) {
    return SslError(ErrorCode::kInternal, "cannot sign a certificate request");
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509_REQ(bio.get(), req.get())) return SslError(ErrorCode::kInternal, "cannot encode a request");
  return BioText(bio.get());
}

Result<Authority> NewAuthority(const std::string& name, int64_t lifetime_ms, int64_t now_ms) {
  Authority ca;
  ca.key_pem = COHORT_TRY(NewPrivateKeyPem());
  auto key = COHORT_TRY(ReadKey(ca.key_pem));
  auto cert = COHORT_TRY(NewCert(key.get(), name, nullptr, now_ms - kClockSkewMs, now_ms + lifetime_ms));
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  COHORT_TRY_VOID(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  COHORT_TRY_VOID(AddExtension(cert.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
  COHORT_TRY_VOID(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  if (!X509_sign(cert.get(), key.get(), EVP_sha256())) return SslError(ErrorCode::kInternal, "cannot sign");
  ca.cert_pem = COHORT_TRY(CertPem(cert.get()));
  return ca;
}

Result<void> CheckAuthority(const Authority& ca, std::string_view what) {
  auto cert = ReadCert(ca.cert_pem);
  if (!cert) return Errorf(ErrorCode::kInvalidArgument, "{}: certificate: {}", what, cert.error().message);
  auto key = ReadKey(ca.key_pem);
  if (!key) return Errorf(ErrorCode::kInvalidArgument, "{}: key: {}", what, key.error().message);
  if (X509_check_ca(cert->get()) == 0) {
    return Errorf(ErrorCode::kInvalidArgument, "{}: the certificate is not a certificate authority's", what);
  }
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return Errorf(ErrorCode::kInvalidArgument, "{}: the key is not the certificate's", what);
  }
  return {};
}

Result<std::string> IssueFromCsr(const Authority& ca, const std::string& csr_pem, const LeafProfile& profile,
                                 int64_t now_ms) {
  auto bio = MemBio(csr_pem);
  ReqPtr req(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (!req) {
    ERR_clear_error();
    return MakeError(ErrorCode::kInvalidArgument, "csr: not a PEM certificate request", "csr");
  }
  EVP_PKEY* key = X509_REQ_get0_pubkey(req.get());
  if (!key || X509_REQ_verify(req.get(), key) != 1) {
    ERR_clear_error();
    return MakeError(ErrorCode::kInvalidArgument, "csr: the request's signature does not verify", "csr");
  }
  return IssueForPublicKey(ca, key, profile, now_ms);
}

Result<std::string> IssueForKey(const Authority& ca, const std::string& key_pem, const LeafProfile& profile,
                                int64_t now_ms) {
  auto key = COHORT_TRY(ReadKey(key_pem));
  return IssueForPublicKey(ca, key.get(), profile, now_ms);
}

Result<CertInfo> Inspect(const std::string& cert_pem) {
  auto cert = COHORT_TRY(ReadCert(cert_pem));
  return InfoOf(cert.get());
}

Result<void> VerifyIssuedBy(const std::string& ca_pem, const std::string& cert_pem, int64_t now_ms) {
  auto store = COHORT_TRY(StoreOf(ca_pem));
  auto cert = COHORT_TRY(ReadCert(cert_pem));
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!ctx || !X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr)) {
    return SslError(ErrorCode::kInternal, "X509_STORE_CTX_init");
  }
  X509_STORE_CTX_set_time(ctx.get(), 0, static_cast<time_t>(now_ms / 1000));
  if (X509_verify_cert(ctx.get()) == 1) return {};
  const int err = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  return Errorf(ErrorCode::kUnauthenticated, "certificate does not verify: {}", X509_verify_cert_error_string(err));
}

Result<std::shared_ptr<const Identity>> Identity::Parse(const std::string& cert_pem, const std::string& key_pem) {
  auto cert = COHORT_TRY(ReadCert(cert_pem));
  auto key = COHORT_TRY(ReadKey(key_pem));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return MakeError(ErrorCode::kInvalidArgument, "the private key is not the certificate's");
  }
  std::shared_ptr<Identity> id(new Identity());
  id->info_ = InfoOf(cert.get());
  id->cert_ = cert.release();
  id->key_ = key.release();
  id->cert_pem_ = cert_pem;
  return std::shared_ptr<const Identity>(std::move(id));
}

Identity::~Identity() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

void IdentitySlot::Set(std::shared_ptr<const Identity> id) {
  MutexLock lock(mu_);
  current_ = std::move(id);
}

std::shared_ptr<const Identity> IdentitySlot::Get() const {
  MutexLock lock(mu_);
  return current_;
}

Result<std::string> ReadPemFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Errorf(ErrorCode::kInvalidArgument, "cannot read {}: {}", path, std::strerror(errno));
  std::string text(1 << 20, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (!in.eof()) return Errorf(ErrorCode::kInvalidArgument, "{} is larger than 1 MiB: not a PEM file", path);
  return text;
}

Result<std::string> ReadCaFile(const std::string& path) {
  std::string pem = COHORT_TRY(ReadPemFile(path));
  if (auto c = ReadCert(pem); !c) {
    return Errorf(ErrorCode::kInvalidArgument, "{} is not a PEM certificate", path);
  }
  return pem;
}

Result<std::optional<ClientOptions>> ClientOptionsFromEnv() {
  if (const char* pem = std::getenv("COHORT_CA"); pem && *pem) {
    if (auto c = ReadCert(pem); !c) return MakeError(ErrorCode::kInvalidArgument, "$COHORT_CA is not a PEM certificate");
    return std::optional<ClientOptions>(ClientOptions{pem, nullptr});
  }
  if (const char* path = std::getenv("COHORT_CA_FILE"); path && *path) {
    auto pem = ReadCaFile(path);
    if (!pem) return Errorf(ErrorCode::kInvalidArgument, "$COHORT_CA_FILE: {}", pem.error().message);
    return std::optional<ClientOptions>(ClientOptions{*pem, nullptr});
  }
  return std::optional<ClientOptions>();
}

namespace {

// The trust stores of the authorities clients were configured with, parsed once each:
// OpenSSL 3 takes ~0.1 ms to parse one and build its store (a C loop here), and the head
// makes a client context for every agent it calls (a store is shared by reference;
// verification only reads it). A process trusts one or two authorities; the cache forgets
// them all past a few dozen.
Result<X509_STORE*> SharedStoreOf(const std::string& ca_pem) {
  static Mutex mu;
  static std::map<std::string, X509_STORE*>* stores = new std::map<std::string, X509_STORE*>();  // never freed
  MutexLock lock(mu);
  if (auto it = stores->find(ca_pem); it != stores->end()) return it->second;
  auto store = COHORT_TRY(StoreOf(ca_pem));
  if (stores->size() >= 32) {
    for (auto& [pem, s] : *stores) X509_STORE_free(s);  // contexts keep their own references
    stores->clear();
  }
  return stores->emplace(ca_pem, store.release()).first->second;
}

// The identity slot a client context presents from (SSL_CTX ex-data, freed with the context).
void FreeSlotRef(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::shared_ptr<IdentitySlot>*>(ptr);
}
int SlotIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, &FreeSlotRef);
  return index;
}
// The common name a client context wants of its server (SSL_CTX ex-data, freed with it).
void FreePeerName(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<std::string*>(ptr); }
int PeerNameWantedIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, &FreePeerName);
  return index;
}
// Verification callback: the chain and host checks as OpenSSL made them, and the server's
// certificate (depth 0) must have the context's wanted common name.
int VerifyPeerName(int ok, X509_STORE_CTX* store) {
  if (ok != 1 || X509_STORE_CTX_get_error_depth(store) != 0) return ok;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  const auto* wanted =
      ssl ? static_cast<const std::string*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), PeerNameWantedIndex())) : nullptr;
  X509* cert = X509_STORE_CTX_get_current_cert(store);
  if (wanted == nullptr || (cert != nullptr && CommonName(cert) == *wanted)) return 1;
  X509_STORE_CTX_set_error(store, X509_V_ERR_HOSTNAME_MISMATCH);
  return 0;
}
// At each handshake the server asks for a certificate: the slot's identity now, so a
// client that reconnects after a renewal presents the new certificate. OpenSSL takes the
// two references it is handed.
int PresentIdentity(SSL* ssl, X509** cert, EVP_PKEY** key) {
  auto* slot = static_cast<std::shared_ptr<IdentitySlot>*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), SlotIndex()));
  if (slot == nullptr || !*slot) return 0;
  std::shared_ptr<const Identity> id = (*slot)->Get();
  if (!id) return 0;
  X509_up_ref(id->cert());
  EVP_PKEY_up_ref(id->key());
  *cert = id->cert();
  *key = id->key();
  return 1;
}

}  // namespace

Result<void> ConfigureClientContext(SSL_CTX* ctx, const ClientOptions& options, const std::string& host) {
  X509_STORE* store = COHORT_TRY(SharedStoreOf(options.ca_pem));
  SSL_CTX_set1_cert_store(ctx, store);  // the context takes a reference
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx);
  const int ok = IsIpAddress(host) ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                                   : X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  if (ok != 1) return SslError(ErrorCode::kInvalidArgument, fmt::format("host '{}'", host));
  if (!options.peer_name.empty()) {
    delete static_cast<std::string*>(SSL_CTX_get_ex_data(ctx, PeerNameWantedIndex()));
    auto* wanted = new std::string(options.peer_name);
    if (SSL_CTX_set_ex_data(ctx, PeerNameWantedIndex(), wanted) != 1) {
      delete wanted;
      return SslError(ErrorCode::kInternal, "peer name");
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, &VerifyPeerName);
  }
  if (options.identity) {
    delete static_cast<std::shared_ptr<IdentitySlot>*>(SSL_CTX_get_ex_data(ctx, SlotIndex()));
    auto* ref = new std::shared_ptr<IdentitySlot>(options.identity);
    if (SSL_CTX_set_ex_data(ctx, SlotIndex(), ref) != 1) {
      delete ref;
      return SslError(ErrorCode::kInternal, "client certificate");
    }
    SSL_CTX_set_client_cert_cb(ctx, &PresentIdentity);
  }
  return {};
}

Result<std::shared_ptr<ServerContext>> ServerContext::Create(const std::string& client_ca_pem) {
  std::shared_ptr<ServerContext> s(new ServerContext());
  s->ctx_ = SSL_CTX_new(TLS_server_method());
  if (!s->ctx_) return SslError(ErrorCode::kInternal, "SSL_CTX_new");
  SSL_CTX_set_min_proto_version(s->ctx_, TLS1_2_VERSION);
  // Released buffers: an idle kept-alive connection (an agent's between heartbeats) holds
  // no 34 KB of record buffers.
  SSL_CTX_set_mode(s->ctx_,
                   SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_RELEASE_BUFFERS);
  // No TLS 1.2 renegotiation: a connection's certificate is the one of its handshake
  // (PeerName keeps it for the connection's life).
  SSL_CTX_set_options(s->ctx_, SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_cert_cb(s->ctx_, &ServerContext::CertCallback, s.get());
  // No TLS 1.3 session tickets: no Cohort client resumes a session (each connection is
  // kept instead), so the two tickets OpenSSL sends after every handshake were work for
  // the server and, with cpp-httplib's client, two 1 ms sleeps before the first reply.
  SSL_CTX_set_num_tickets(s->ctx_, 0);
  // Read ahead: one read(2) takes whatever arrived (a request's header and body records
  // together) instead of two per record. Bytes it holds wake no epoll, so the server
  // checks SSL_has_pending, not SSL_pending, before it waits.
  SSL_CTX_set_read_ahead(s->ctx_, 1);
  static const unsigned char kSessionContext[] = "cohort";
  SSL_CTX_set_session_id_context(s->ctx_, kSessionContext, sizeof kSessionContext - 1);
  if (!client_ca_pem.empty()) {
    auto store = COHORT_TRY(StoreOf(client_ca_pem));
    SSL_CTX_set_cert_store(s->ctx_, store.release());
    // A client certificate is asked for, not required (users' CLIs and browsers have
    // none); one that is presented must verify, or the handshake fails.
    SSL_CTX_set_verify(s->ctx_, SSL_VERIFY_PEER, nullptr);
    auto ca = COHORT_TRY(ReadCert(client_ca_pem));
    STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
    sk_X509_NAME_push(names, X509_NAME_dup(X509_get_subject_name(ca.get())));
    SSL_CTX_set_client_CA_list(s->ctx_, names);
  }
  return s;
}

ServerContext::~ServerContext() { SSL_CTX_free(ctx_); }

int ServerContext::CertCallback(SSL* ssl, void* arg) {
  const auto* self = static_cast<ServerContext*>(arg);
  auto id = self->choose_ ? self->choose_(ssl) : self->identity_.Get();
  if (!id) return 0;  // no certificate yet: the handshake fails
  return SSL_use_certificate(ssl, id->cert()) == 1 && SSL_use_PrivateKey(ssl, id->key()) == 1 ? 1 : 0;
}

SSL* ServerContext::NewConnection(int fd) const {
  SSL* ssl = SSL_new(ctx_);
  if (!ssl) return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  SSL_set_accept_state(ssl);
  return ssl;
}

namespace {

// A connection's peer name, worked out at its first request and kept with its SSL
// (ex_data), since every request asks (the router's who-is-calling, the agent's "is it
// the head"). The certificate cannot change under it: TLS 1.3 has no renegotiation and
// Cohort's servers refuse TLS 1.2's (SSL_OP_NO_RENEGOTIATION).
struct CachedPeerName {
  std::optional<std::string> name;
};

void FreeCachedPeerName(void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/, long /*argl*/,
                        void* /*argp*/) {
  delete static_cast<CachedPeerName*>(ptr);
}

int PeerNameIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, &FreeCachedPeerName);
  return index;
}

}  // namespace

// SSL_get_error asks ERR_peek_error too: a queue this finds empty is one it finds empty.
void ClearErrors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

std::optional<std::string> PeerName(const SSL* ssl) {
  if (!ssl) return std::nullopt;
  const int index = PeerNameIndex();
  if (index >= 0) {
    if (auto* cached = static_cast<CachedPeerName*>(SSL_get_ex_data(ssl, index))) return cached->name;
  }
  X509* peer = SSL_get0_peer_certificate(ssl);
  std::optional<std::string> name;
  if (peer && SSL_get_verify_result(ssl) == X509_V_OK) name = CommonName(peer);
  // Only once the handshake is done is the answer final.
  if (index >= 0 && SSL_is_init_finished(ssl) == 1) {
    // One thread serves a connection's request at a time: nobody else fills this slot now.
    SSL_set_ex_data(const_cast<SSL*>(ssl), index, new CachedPeerName{name});
  }
  return name;
}

bool IsIpAddress(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

std::string Fingerprint(const CertInfo& info) { return "sha256:" + info.sha256; }

Result<std::string> SpkiSha256Base64(const std::string& cert_pem) {
  auto cert = COHORT_TRY(ReadCert(cert_pem));
  unsigned char* der = nullptr;
  const int len = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert.get()), &der);
  if (len <= 0) return SslError(ErrorCode::kInternal, "cannot encode a public key");
  unsigned char md[32];
  SHA256(der, static_cast<size_t>(len), md);
  OPENSSL_free(der);
  unsigned char b64[64] = {};
  const int n = EVP_EncodeBlock(b64, md, sizeof md);
  return std::string(reinterpret_cast<char*>(b64), static_cast<size_t>(n));
}

}  // namespace cohort::tls
