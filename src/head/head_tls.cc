#include "head/head_tls.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "common/clock.h"
#include "common/file_modes.h"
#include "common/http.h"
#include "common/log.h"

namespace cohort::head {

namespace {

constexpr int64_t kDayMs = 24LL * 3600 * 1000;
constexpr int64_t kCaLifetimeMs = 10 * 365 * kDayMs;
constexpr int64_t kHeadCertLifetimeMs = 365 * kDayMs;

bool ListensEverywhere(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

// Every address of this machine's interfaces that are up.
std::vector<std::string> LocalAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || !(a->ifa_flags & IFF_UP)) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;  // needs a scope no URL carries
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    } else {
      continue;
    }
    out.emplace_back(text);
  }
  freeifaddrs(list);
  return out;
}

// The names the head's certificate must carry: every way a client may dial it.
tls::LeafProfile HeadProfile(const HeadConfig& config, const std::string& advertise_url) {
  std::set<std::string> dns = {"localhost"}, ips = {"127.0.0.1", "::1"};
  auto add = [&](const std::string& name) {
    if (name.empty()) return;
    (tls::IsIpAddress(name) ? ips : dns).insert(name);
  };
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) add(host);
  if (ListensEverywhere(config.listen_host)) {
    for (const auto& a : LocalAddresses()) add(a);
  } else {
    add(config.listen_host);
  }
  if (auto u = ParseHttpUrl(advertise_url)) add(u->host);
  for (const auto& san : config.tls_san) add(san);
  tls::LeafProfile p;
  p.common_name = tls::kHeadName;
  p.dns_names.assign(dns.begin(), dns.end());
  p.ip_addresses.assign(ips.begin(), ips.end());
  p.lifetime_ms = kHeadCertLifetimeMs;
  return p;
}

// A DNS name without wildcards: labels of letters, digits, '-' and '_' (which some sites'
// host names have), joined by '.'.
bool IsHostName(const std::string& s) {
  if (s.empty() || s.size() > 253 || s.front() == '.' || s.back() == '.' || s.find("..") != std::string::npos) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

// Whether `ip` (a connection's peer) is an address of this machine: loopback or one of its
// interfaces'.
bool IsLocalAddress(const std::string& ip) {
  if (ip.starts_with("127.") || ip == "::1" || ip.starts_with("::ffff:127.")) return true;
  const auto local = LocalAddresses();
  return std::find(local.begin(), local.end(), ip) != local.end();
}

bool Covers(const std::vector<std::string>& have, const std::vector<std::string>& want) {
  std::set<std::string> h(have.begin(), have.end());
  return std::all_of(want.begin(), want.end(), [&](const std::string& w) { return h.count(w) > 0; });
}

// The authority: the site's (--tls-ca-cert/--tls-ca-key), else state_dir/tls's, made on
// the first start.
Result<tls::Authority> LoadOrMakeAuthority(const HeadConfig& config, const std::string& dir, std::string& ca_path) {
  if (!config.tls_ca_cert.empty() || !config.tls_ca_key.empty()) {
    if (config.tls_ca_cert.empty() || config.tls_ca_key.empty()) {
      return MakeError(ErrorCode::kInvalidArgument, "--tls-ca-cert and --tls-ca-key go together", "tls_ca_cert");
    }
    tls::Authority ca{COHORT_TRY(tls::ReadPemFile(config.tls_ca_cert)), COHORT_TRY(tls::ReadPemFile(config.tls_ca_key))};
    COHORT_TRY_VOID(tls::CheckAuthority(ca, fmt::format("--tls-ca-cert {} / --tls-ca-key {}", config.tls_ca_cert,
                                                        config.tls_ca_key)));
    ca_path = std::filesystem::absolute(config.tls_ca_cert).string();
    return ca;
  }
  ca_path = dir + "/ca.crt";
  const std::string key_path = dir + "/ca.key";
  std::error_code ec;
  const bool have_cert = std::filesystem::exists(ca_path, ec), have_key = std::filesystem::exists(key_path, ec);
  if (have_cert && have_key) {
    tls::Authority ca{COHORT_TRY(tls::ReadPemFile(ca_path)), COHORT_TRY(tls::ReadPemFile(key_path))};
    COHORT_TRY_VOID(tls::CheckAuthority(ca, dir));
    return ca;
  }
  if (have_cert || have_key) {
    // Never replace half of an authority: nodes' certificates hang on it.
    return Errorf(ErrorCode::kFailedPrecondition,
                  "{} holds {} but not {}: restore the missing file, or remove both to make a new authority (every "
                  "agent then joins again with a join token)",
                  dir, have_cert ? "ca.crt" : "ca.key", have_cert ? "ca.key" : "ca.crt");
  }
  auto ca = COHORT_TRY(tls::NewAuthority("cohort-ca", kCaLifetimeMs, NowUnixMs()));
  COHORT_TRY_VOID(WritePrivateFileAtomically(key_path, ca.key_pem));
  COHORT_TRY_VOID(WritePrivateFileAtomically(ca_path, ca.cert_pem));
  chmod(ca_path.c_str(), 0644);  // a certificate is public; the directory above is not
  auto info = COHORT_TRY(tls::Inspect(ca.cert_pem));
  LOG_INFO("made a certificate authority in {} ({})", dir, tls::Fingerprint(info));
  return ca;
}

// The head's own certificate: the one in `dir` while it still fits, else a new one.
Result<std::shared_ptr<const tls::Identity>> LoadOrIssueHeadCert(const tls::Authority& ca, const std::string& dir,
                                                                 const tls::LeafProfile& profile) {
  const std::string cert_path = dir + "/head.crt", key_path = dir + "/head.key";
  const int64_t now = NowUnixMs();
  auto cert = tls::ReadPemFile(cert_path);
  auto key = tls::ReadPemFile(key_path);
  if (cert && key) {
    auto id = tls::Identity::Parse(*cert, *key);
    std::string why;
    if (!id) {
      why = id.error().message;
    } else if (!tls::VerifyIssuedBy(ca.cert_pem, *cert, now)) {
      why = "it is not from the current authority";
    } else if (const auto& i = (*id)->info(); now > i.not_after_ms - (i.not_after_ms - i.not_before_ms) / 3) {
      why = "it expires " + FormatTimestamp(i.not_after_ms);
    } else if (!Covers(i.dns_names, profile.dns_names) || !Covers(i.ip_addresses, profile.ip_addresses)) {
      why = "the head is reached at names it does not carry";
    } else {
      return *id;
    }
    LOG_INFO("issuing a new certificate for the head: {}", why);
  }
  std::string key_pem = COHORT_TRY(tls::NewPrivateKeyPem());
  std::string cert_pem = COHORT_TRY(tls::IssueForKey(ca, key_pem, profile, now));
  COHORT_TRY_VOID(WritePrivateFileAtomically(key_path, key_pem));
  COHORT_TRY_VOID(WritePrivateFileAtomically(cert_path, cert_pem));
  return tls::Identity::Parse(cert_pem, key_pem);
}

}  // namespace

Result<std::unique_ptr<HeadTls>> HeadTls::SetUp(const HeadConfig& config, const std::string& advertise_url) {
  std::unique_ptr<HeadTls> t(new HeadTls());
  const std::string dir = config.state_dir + "/tls";
  if (auto r = MakePrivateDir(dir); !r) return Errorf(ErrorCode::kInvalidArgument, "TLS directory: {}", r.error().message);
  t->ca_ = COHORT_TRY(LoadOrMakeAuthority(config, dir, t->ca_path_));
  const tls::LeafProfile profile = HeadProfile(config, advertise_url);
  auto identity = COHORT_TRY(LoadOrIssueHeadCert(t->ca_, dir, profile));
  t->server_ = COHORT_TRY(tls::ServerContext::Create(t->ca_.cert_pem));
  t->server_->SetIdentity(identity);
  auto slot = std::make_shared<tls::IdentitySlot>();
  slot->Set(identity);
  t->client_ = tls::ClientOptions{t->ca_.cert_pem, slot};
  t->node_cert_ttl_ms_ = config.node_cert_ttl_ms;
  const auto& info = identity->info();
  t->own_names_.insert(info.dns_names.begin(), info.dns_names.end());
  t->own_names_.insert(info.ip_addresses.begin(), info.ip_addresses.end());
  const tls::CertInfo ca_info = COHORT_TRY(tls::Inspect(t->ca_.cert_pem));
  // The authority's fingerprint is what `cohort login --ca-fingerprint` pins.
  LOG_INFO("TLS: certificate {} for {} and {} (until {}), authority {} ({})", tls::Fingerprint(info),
           fmt::join(info.dns_names, ", "), fmt::join(info.ip_addresses, ", "), FormatTimestamp(info.not_after_ms),
           tls::Fingerprint(ca_info), t->ca_path_);
  return t;
}

Result<HeadTls::Issued> HeadTls::IssueNode(const std::string& node, const std::string& address,
                                           const std::string& csr_pem, int64_t now_ms, const std::string& from) const {
  if (node == tls::kHeadName) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("name: '{}' is the name of the head's certificate, which agents accept as the "
                                 "head's; name the node otherwise",
                                 node),
                     "name");
  }
  if (!tls::IsIpAddress(address) && !IsHostName(address)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("address: '{}' is neither an IP address nor a host name (letters, digits, '-', "
                                 "'_' and '.'); the node's certificate names it",
                                 address.substr(0, 255)),
                     "address");
  }
  if (own_names_.contains(address) && !IsLocalAddress(from)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("address: '{}' is the head's own address, and node {} registers from {}, another "
                                 "machine: its certificate would pass for the head's; give the node's own address "
                                 "(cohort agent --address)",
                                 address, node, from.substr(0, 64)),
                     "address");
  }
  tls::LeafProfile p;
  p.common_name = node;
  (tls::IsIpAddress(address) ? p.ip_addresses : p.dns_names).push_back(address);
  p.lifetime_ms = node_cert_ttl_ms_;
  Issued out;
  out.cert_pem = COHORT_TRY(tls::IssueFromCsr(ca_, csr_pem, p, now_ms));
  out.expires_ms = COHORT_TRY(tls::Inspect(out.cert_pem)).not_after_ms;
  return out;
}

}  // namespace cohort::head
