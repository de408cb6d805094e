// A cluster with TLS on (the default) from the outside: curl with and without the head's
// authority, `cohort login --ca` writing a client config the CLI then works from alone,
// a client that trusts something else, and an agent that does not trust the head or that
// speaks plain HTTP to it.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/tls.h"
#include "harness.h"

namespace cohort::testing {
namespace {

// Runs `argv` with `env` set and `unset` removed from the test's environment.
CliResult RunWithEnv(const LocalCluster& c, const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env, const std::vector<std::string>& unset) {
  SpawnOptions o;
  o.argv = argv;
  o.env = env;
  o.unset_env = unset;
  o.stdout_path = c.dir() + "/cli.out";
  o.stderr_path = c.dir() + "/cli.err";
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.has_value());
  if (!p) return {};
  auto st = p->WaitFor(std::chrono::seconds(30));
  EXPECT_TRUE(st.has_value());
  if (!st) {
    p->Signal(SIGKILL);
    (void)p->Wait();
    return {};
  }
  return {*st, ReadFile(o.stdout_path), ReadFile(o.stderr_path)};
}

bool HaveCurl() { return system("command -v curl > /dev/null 2>&1") == 0; }

TEST(TlsCli, CurlTrustsTheHeadOnlyWithItsAuthority) {
  if (!HaveCurl()) GTEST_SKIP() << "curl is not installed (scripts/install-deps.sh installs it)";
  LocalCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_EQ(c.url().substr(0, 8), "https://");
  const std::string ca = c.dir() + "/head/tls/ca.crt";
  auto ok = RunCli(c, {"curl", "-sS", "--fail", "--cacert", ca, "-H", "Authorization: Bearer " + TestToken(),
                       c.url() + "/v1/whoami"});
  ASSERT_TRUE(ok.status.Success()) << ok.errors;
  EXPECT_NE(ok.output.find("\"role\":\"admin\""), std::string::npos) << ok.output;
  // Without the authority curl refuses the certificate (exit 60), and plain HTTP gets no
  // answer at all.
  auto untrusted = RunCli(c, {"curl", "-sS", c.url() + "/v1/health"});
  EXPECT_EQ(untrusted.status.exit_code, 60) << untrusted.errors;
  auto plain = RunCli(c, {"curl", "-sS", "--max-time", "5", "http://127.0.0.1:" + std::to_string(c.port()) + "/v1/health"});
  EXPECT_FALSE(plain.status.Success());
}

TEST(TlsCli, LoginKeepsTheAuthorityAndTheCliUsesItAlone) {
  LocalCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("n1", 1));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  const std::string ca = c.dir() + "/head/tls/ca.crt";
  const std::string xdg = c.dir() + "/xdg";
  const std::map<std::string, std::string> env = {{"XDG_CONFIG_HOME", xdg}};
  const std::vector<std::string> unset = {"COHORT_TOKEN", "COHORT_CA_FILE", "COHORT_CA", "COHORT_HEAD"};

  // Without the authority, login fails and says why; nothing is written.
  auto no_ca = RunWithEnv(c, {COHORT_BINARY, "login", "--head", c.url(), "--token", TestToken()}, env, unset);
  EXPECT_EQ(no_ca.status.exit_code, 3) << no_ca.errors;
  EXPECT_NE(no_ca.errors.find("TLS handshake failed"), std::string::npos) << no_ca.errors;
  EXPECT_FALSE(std::filesystem::exists(xdg + "/cohort/config"));
  // A file that is not a certificate is named.
  std::ofstream(c.dir() + "/junk.crt") << "not a certificate\n";
  auto junk = RunWithEnv(c, {COHORT_BINARY, "login", "--head", c.url(), "--token", TestToken(), "--ca",
                             c.dir() + "/junk.crt"}, env, unset);
  EXPECT_EQ(junk.status.exit_code, 2) << junk.errors;
  EXPECT_NE(junk.errors.find("junk.crt is not a PEM certificate"), std::string::npos) << junk.errors;

  auto login = RunWithEnv(c, {COHORT_BINARY, "login", "--head", c.url(), "--token", TestToken(), "--ca", ca}, env,
                          unset);
  ASSERT_TRUE(login.status.Success()) << login.errors;
  const std::string config = ReadFile(xdg + "/cohort/config");
  EXPECT_NE(config.find("ca: " + ca), std::string::npos) << config;
  // From the config alone (no flags, no environment), the CLI reaches the head.
  auto nodes = RunWithEnv(c, {COHORT_BINARY, "nodes"}, env, unset);
  ASSERT_TRUE(nodes.status.Success()) << nodes.errors;
  EXPECT_NE(nodes.output.find("n1"), std::string::npos) << nodes.output;
}

TEST(TlsCli, AgentsMustTrustTheHeadAndSpeakTls) {
  LocalCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  // An agent that trusts another authority never registers, and its log says why.
  auto other = tls::NewAuthority("other", 3600'000, NowUnixMs());
  ASSERT_TRUE(other.has_value());
  std::ofstream(c.dir() + "/other-ca.crt") << other->cert_pem;
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("stranger", 1, 4, {"--head-ca", c.dir() + "/other-ca.crt"}));
  // An agent given the head's URL as http:// reaches nothing either.
  std::string plain_url = "http://127.0.0.1:" + std::to_string(c.port());
  SpawnOptions o;
  o.argv = TestAgentArgv(plain_url, c.dir(), "plain", "127.0.0.1", 1, 4);
  o.stdout_path = c.dir() + "/plain.log";
  o.parent_death_signal = SIGKILL;
  auto plain = Subprocess::Spawn(o);
  ASSERT_TRUE(plain.has_value());
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("good", 1));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  ASSERT_TRUE(WaitUntil([&] {
    return ReadFile(c.dir() + "/stranger.log").find("TLS handshake failed") != std::string::npos;
  }, std::chrono::seconds(15))) << ReadFile(c.dir() + "/stranger.log");
  auto nodes = c.client().Get("/v1/nodes");
  ASSERT_TRUE(nodes.has_value());
  ASSERT_EQ((*nodes)["nodes"].size(), 1u) << nodes->dump();
  EXPECT_EQ((*nodes)["nodes"][0]["name"], "good");
  plain->Signal(SIGKILL);
  (void)plain->Wait();
}

}  // namespace
}  // namespace cohort::testing
