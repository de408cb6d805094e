// Test certificates: an authority and leaf certificates it issues (common/tls.h), for the
// TLS tests of common/ and head/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/tls.h"

namespace cohort::tls::test_certs {

inline constexpr int64_t kDay = 24LL * 3600 * 1000;

inline Authority MakeCa(const std::string& name = "test-ca") {
  auto ca = NewAuthority(name, 30 * kDay, NowUnixMs());
  EXPECT_TRUE(ca.has_value()) << (ca ? "" : ca.error().message);
  return ca.value_or(Authority{});
}

struct Leaf {
  std::string cert_pem;
  std::string key_pem;
  std::shared_ptr<const Identity> identity() const { return Identity::Parse(cert_pem, key_pem).value(); }
};

inline Leaf MakeLeaf(const Authority& ca, const std::string& name, std::vector<std::string> ips = {"127.0.0.1"},
                     std::vector<std::string> dns = {}, int64_t lifetime = kDay) {
  Leaf l;
  l.key_pem = NewPrivateKeyPem().value();
  LeafProfile p;
  p.common_name = name;
  p.ip_addresses = std::move(ips);
  p.dns_names = std::move(dns);
  p.lifetime_ms = lifetime;
  auto cert = IssueForKey(ca, l.key_pem, p, NowUnixMs());
  EXPECT_TRUE(cert.has_value()) << (cert ? "" : cert.error().message);
  l.cert_pem = cert.value_or("");
  return l;
}

}  // namespace cohort::tls::test_certs
