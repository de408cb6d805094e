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
  std::filesystem::remove(o.stdout_path);  // the output files are appended to
  std::filesystem::remove(o.stderr_path);
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

  // `login --context NAME` makes that context and leaves the client config as it was.
  std::ofstream(xdg + "/cohort/config", std::ios::app) << "# kept\n";
  const std::string before = ReadFile(xdg + "/cohort/config");
  auto lab = RunWithEnv(c, {COHORT_BINARY, "login", "--context", "lab", "--head", c.url(), "--token", TestToken(),
                            "--ca", ca}, env, unset);
  ASSERT_TRUE(lab.status.Success()) << lab.errors;
  EXPECT_NE(lab.output.find(xdg + "/cohort/contexts/lab"), std::string::npos) << lab.output;
  EXPECT_EQ(ReadFile(xdg + "/cohort/config"), before);
  EXPECT_NE(ReadFile(xdg + "/cohort/contexts/lab").find("head: " + c.url()), std::string::npos);
  auto in_lab = RunWithEnv(c, {COHORT_BINARY, "--context", "lab", "nodes"}, env, unset);
  ASSERT_TRUE(in_lab.status.Success()) << in_lab.errors;
  auto bad = RunWithEnv(c, {COHORT_BINARY, "login", "--context", "../x", "--head", c.url(), "--token", TestToken(),
                            "--ca", ca}, env, unset);
  EXPECT_EQ(bad.status.exit_code, 2) << bad.errors;
  EXPECT_NE(bad.errors.find("context"), std::string::npos) << bad.errors;
}

// `cohort login --ca-fingerprint`: with the fingerprint the head logs at start, login
// fetches the authority itself (no file to copy), keeps it beside the config and the CLI
// works from it; a fingerprint that is not the head's authority's refuses it and writes
// nothing; a malformed one, or one given with --ca, is named.
TEST(TlsCli, LoginPinsTheAuthorityByItsFingerprint) {
  LocalCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("n1", 1));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  const std::string ca = c.dir() + "/head/tls/ca.crt";
  auto info = tls::Inspect(ReadFile(ca));
  ASSERT_TRUE(info.has_value()) << info.error().message;
  const std::string fingerprint = tls::Fingerprint(*info);
  EXPECT_NE(ReadFile(c.dir() + "/head.log").find("authority " + fingerprint), std::string::npos)
      << "the head logs the fingerprint a user pins";
  const std::string xdg = c.dir() + "/xdg";
  const std::map<std::string, std::string> env = {{"XDG_CONFIG_HOME", xdg}};
  const std::vector<std::string> unset = {"COHORT_TOKEN", "COHORT_CA_FILE", "COHORT_CA", "COHORT_HEAD"};
  auto login = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {COHORT_BINARY, "login", "--head", c.url(), "--token", TestToken()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunWithEnv(c, argv, env, unset);
  };

  std::string wrong = fingerprint;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  auto refused = login({"--ca-fingerprint", wrong});
  EXPECT_EQ(refused.status.exit_code, 4) << refused.errors;
  EXPECT_NE(refused.errors.find("not the --ca-fingerprint given"), std::string::npos) << refused.errors;
  EXPECT_FALSE(std::filesystem::exists(xdg + "/cohort/config"));
  auto malformed = login({"--ca-fingerprint", "sha256:12ab"});
  EXPECT_EQ(malformed.status.exit_code, 2) << malformed.errors;
  EXPECT_NE(malformed.errors.find("--ca-fingerprint: expected sha256: and 64 hex digits"), std::string::npos)
      << malformed.errors;
  auto both = login({"--ca-fingerprint", fingerprint, "--ca", ca});
  EXPECT_EQ(both.status.exit_code, 2) << both.errors;
  EXPECT_FALSE(std::filesystem::exists(xdg + "/cohort/config"));

  // The right authority but a token the head refuses: nothing is kept.
  const std::string kept = xdg + "/cohort/ca-127.0.0.1-" + std::to_string(c.port()) + ".crt";
  auto refused_token = RunWithEnv(
      c, {COHORT_BINARY, "login", "--head", c.url(), "--token", "not-a-token", "--ca-fingerprint", fingerprint}, env,
      unset);
  EXPECT_EQ(refused_token.status.exit_code, 4) << refused_token.errors;
  EXPECT_FALSE(std::filesystem::exists(kept));
  EXPECT_FALSE(std::filesystem::exists(xdg + "/cohort/config"));

  // Upper case with colons between the bytes, as other tools print fingerprints.
  std::string colons = "SHA256:";
  for (size_t i = 7; i < fingerprint.size(); i += 2) {
    if (i > 7) colons += ':';
    colons += static_cast<char>(std::toupper(static_cast<unsigned char>(fingerprint[i])));
    colons += static_cast<char>(std::toupper(static_cast<unsigned char>(fingerprint[i + 1])));
  }
  auto ok = login({"--ca-fingerprint", colons});
  ASSERT_TRUE(ok.status.Success()) << ok.errors;
  const std::string config = ReadFile(xdg + "/cohort/config");
  EXPECT_NE(config.find("ca: " + kept), std::string::npos) << config;
  EXPECT_EQ(ReadFile(kept), ReadFile(ca));
  auto nodes = RunWithEnv(c, {COHORT_BINARY, "nodes"}, env, unset);
  ASSERT_TRUE(nodes.status.Success()) << nodes.errors;
  EXPECT_NE(nodes.output.find("n1"), std::string::npos) << nodes.output;
}

// A user's token is who submits, whatever the shell's login name: `cohort submit` sent
// $USER as the job's user, so alice's token from a shell whose $USER is not alice was
// refused ("alice (user, token ...) may not submit a job as 'root' (only an admin may)").
// Naming another user stays refused; an admin still names whom it submits for.
TEST(TlsCli, AUserTokenSubmitsAsItsUserWhateverTheLoginName) {
  LocalCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("n1", 1));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  auto made = Cohort(c, {"token", "create", "--user", "alice", "--role", "user"});
  ASSERT_TRUE(made.status.Success()) << made.errors;
  std::string alice = made.output;
  while (!alice.empty() && alice.back() == '\n') alice.pop_back();
  const std::map<std::string, std::string> as_alice = {{"COHORT_TOKEN", alice}, {"USER", "alice-laptop"}};
  const std::vector<std::string> submit = {COHORT_BINARY, "--head", c.url(), "--json", "submit", "--", "/bin/true"};

  auto who = RunWithEnv(c, {COHORT_BINARY, "--head", c.url(), "whoami"}, as_alice, {});
  ASSERT_TRUE(who.status.Success()) << who.errors;
  EXPECT_EQ(who.output.rfind("alice (user) at " + c.url() + ", token ", 0), 0u) << who.output;
  EXPECT_EQ(who.output.find(alice.substr(20)), std::string::npos) << "never the secret: " << who.output;

  auto mine = RunWithEnv(c, submit, as_alice, {});
  ASSERT_TRUE(mine.status.Success()) << mine.errors;
  EXPECT_EQ(json::parse(mine.output)["spec"]["user"], "alice") << mine.output;
  // For an alloc too (its command holds nothing: it ends at once).
  auto alloc = RunWithEnv(c, {COHORT_BINARY, "--head", c.url(), "alloc", "--", "/bin/true"}, as_alice, {});
  EXPECT_TRUE(alloc.status.Success()) << alloc.errors;

  std::vector<std::string> as_bob = submit;
  as_bob.insert(as_bob.begin() + 5, {"--user", "bob"});
  auto refused = RunWithEnv(c, as_bob, as_alice, {});
  EXPECT_EQ(refused.status.exit_code, 4) << refused.errors;
  EXPECT_NE(refused.errors.find("may not submit a job as 'bob'"), std::string::npos) << refused.errors;
  auto for_bob = RunWithEnv(c, as_bob, {{"USER", "admin-laptop"}}, {});
  ASSERT_TRUE(for_bob.status.Success()) << for_bob.errors;
  EXPECT_EQ(json::parse(for_bob.output)["spec"]["user"], "bob") << for_bob.output;
}

// Another user's job's logs are refused like its cancel or exec: exit code 4 (credentials
// refused) and the head's reason as an error, not a per-rank "note" and exit code 1.
TEST(TlsCli, ReadingAnotherUsersLogsIsRefusedWithExitCode4) {
  LocalCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("n1", 1));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  auto made = Cohort(c, {"token", "create", "--user", "bob", "--role", "user"});
  ASSERT_TRUE(made.status.Success()) << made.errors;
  std::string bob = made.output;
  while (!bob.empty() && bob.back() == '\n') bob.pop_back();
  json job = c.Submit({{"user", "alice"}, {"command", {"/bin/echo", "alice's output"}}});
  ASSERT_TRUE(job.contains("id")) << job.dump();
  const std::string id = std::to_string(job["id"].get<int64_t>());
  c.WaitForState(job["id"].get<int64_t>(), "SUCCEEDED");
  for (const std::vector<std::string>& how : {std::vector<std::string>{}, std::vector<std::string>{"--rank", "0"}}) {
    std::vector<std::string> argv = {COHORT_BINARY, "--head", c.url(), "logs", id};
    argv.insert(argv.end(), how.begin(), how.end());
    auto logs = RunWithEnv(c, argv, {{"COHORT_TOKEN", bob}}, {});
    EXPECT_EQ(logs.status.exit_code, 4) << logs.errors;
    EXPECT_NE(logs.errors.find("cohort: error: bob (user, token"), std::string::npos) << logs.errors;
    EXPECT_NE(logs.errors.find("may not read the logs of job " + id), std::string::npos) << logs.errors;
    EXPECT_EQ(logs.output.find("alice's output"), std::string::npos) << logs.output;
  }
  auto own = Cohort(c, {"logs", id});
  ASSERT_TRUE(own.status.Success()) << own.errors;
  EXPECT_NE(own.output.find("alice's output"), std::string::npos) << own.output;
}

// `cohort node rm` takes host lists as drain and resume do: node[1-2] was sent as one name.
TEST(TlsCli, NodeRmTakesHostLists) {
  LocalCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("node1", 1));
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("node2", 1));
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("node3", 1));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(3));
  for (const char* n : {"node1", "node2"}) {
    c.agent(n).Signal(SIGKILL);
    (void)c.agent(n).Wait();
  }
  ASSERT_TRUE(WaitUntil([&] { return c.Node("node1")["state"] == "DOWN" && c.Node("node2")["state"] == "DOWN"; },
                        std::chrono::seconds(20)));
  auto rm = Cohort(c, {"node", "rm", "node[1-2]"});
  ASSERT_TRUE(rm.status.Success()) << rm.errors;
  EXPECT_EQ(rm.output, "Removed node node1\nRemoved node node2\n");
  auto nodes = c.client().Get("/v1/nodes");
  ASSERT_TRUE(nodes.has_value());
  ASSERT_EQ((*nodes)["nodes"].size(), 1u) << nodes->dump();
  EXPECT_EQ((*nodes)["nodes"][0]["name"], "node3");
  auto bad = Cohort(c, {"node", "rm", "node[2-"});
  EXPECT_EQ(bad.status.exit_code, 2) << bad.errors;
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
