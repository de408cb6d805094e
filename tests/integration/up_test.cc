// `cohort up` as the README's first commands use it: a local cluster that the next shell's
// `cohort` commands reach, whatever the client config held before.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "common/client_config.h"
#include "common/subprocess.h"
#include "harness.h"

namespace cohort::testing {
namespace {

class UpTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (up_.valid()) {
      up_.Signal(SIGINT);
      auto st = up_.WaitFor(std::chrono::seconds(30));
      EXPECT_TRUE(st.has_value() && st->Success()) << ReadFile(out_);
      if (!st) {
        up_.Signal(SIGKILL, /*group=*/true);
        (void)up_.Wait();
      }
    }
  }

  // The user's client config, as a later shell finds it.
  std::string ConfigPath() const { return c_.dir() + "/xdg/cohort/config"; }

  // Starts `cohort up` with one agent; returns its welcome text once it says it is up.
  std::string Up() {
    SpawnOptions o;
    o.argv = {COHORT_BINARY, "up", "--agents", "1", "--gpus-per-agent", "2", "--port", "0", "--state-dir",
              c_.dir() + "/up"};
    o.env = {{"XDG_CONFIG_HOME", c_.dir() + "/xdg"}};
    o.unset_env = {"COHORT_HEAD", "COHORT_TOKEN", "COHORT_CA", "COHORT_CA_FILE", "COHORT_CONTEXT"};
    o.stdout_path = out_ = c_.dir() + "/up.out";
    o.parent_death_signal = SIGTERM;  // a crashed test leaves no cluster behind
    auto p = Subprocess::Spawn(o);
    EXPECT_TRUE(p.has_value()) << p.error().message;
    if (!p) return "";
    up_ = std::move(*p);
    EXPECT_TRUE(WaitUntil([&] { return ReadFile(out_).find("Press Ctrl-C") != std::string::npos || !Running(); },
                          std::chrono::seconds(60)));
    return ReadFile(out_);
  }
  bool Running() { return !up_.TryWait().has_value(); }

  // `cohort nodes` in a new shell with `env` set (and nothing else of Cohort's).
  std::pair<ExitStatus, std::string> Nodes(std::map<std::string, std::string> env = {}) {
    SpawnOptions o;
    o.argv = {COHORT_BINARY, "nodes"};
    o.env = std::move(env);
    o.env["XDG_CONFIG_HOME"] = c_.dir() + "/xdg";
    o.unset_env = {"COHORT_HEAD", "COHORT_TOKEN", "COHORT_CA", "COHORT_CA_FILE", "COHORT_CONTEXT"};
    for (const auto& [k, v] : o.env) std::erase(o.unset_env, k);
    o.stdout_path = c_.dir() + "/nodes.out";
    std::filesystem::remove(o.stdout_path);
    auto p = Subprocess::Spawn(o);
    if (!p) return {ExitStatus{1, 0}, p.error().message};
    auto st = p->WaitFor(std::chrono::seconds(30));
    if (!st) {
      p->Signal(SIGKILL);
      (void)p->Wait();
      return {ExitStatus{124, 0}, "timed out"};
    }
    return {*st, ReadFile(o.stdout_path)};
  }

  LocalCluster c_;  // only for its temporary directory
  Subprocess up_;
  std::string out_;
};

// An old quickstart's config (its temporary head and authority long gone) no longer keeps
// the next local cluster out of the client config.
TEST_F(UpTest, ALeftoverConfigOfAGoneLocalClusterIsTakenOver) {
  ASSERT_TRUE(WriteClientConfig(ConfigPath(), ClientConfig{"https://127.0.0.1:34511", "cohort_old_token",
                                                           c_.dir() + "/gone/head/tls/ca.crt"})
                  .has_value());
  std::string welcome = Up();
  ASSERT_TRUE(Running()) << welcome;
  EXPECT_EQ(welcome.find("export COHORT_HEAD"), std::string::npos)
      << "the client config names this head, so a shell needs nothing:\n" << welcome;
  auto [st, out] = Nodes();
  EXPECT_TRUE(st.Success()) << out;
  EXPECT_NE(out.find("node-1  UP"), std::string::npos) << out;
}

// A client config that names another head stays; `cohort up` prints what a shell needs to
// reach this one, and with exactly that a shell does.
TEST_F(UpTest, AnotherHeadsConfigStaysAndUpPrintsWhatAShellNeeds) {
  ClientConfig other{"https://10.0.0.1:8470", "cohort_remote_token", c_.dir() + "/remote-ca.crt"};
  ASSERT_TRUE(WriteClientConfig(ConfigPath(), other).has_value());
  std::string welcome = Up();
  ASSERT_TRUE(Running()) << welcome;
  auto kept = ReadClientConfig(ConfigPath());
  ASSERT_TRUE(kept.has_value() && kept->has_value());
  EXPECT_EQ((*kept)->head, other.head);
  EXPECT_EQ((*kept)->token, other.token);

  std::smatch m;
  ASSERT_TRUE(std::regex_search(welcome, m,
                                std::regex(R"(export COHORT_HEAD=(\S+) COHORT_CA_FILE=(\S+) COHORT_TOKEN=\$\(cat (\S+)\))")))
      << welcome;
  EXPECT_NE(welcome.find(ConfigPath() + " names another head (https://10.0.0.1:8470)"), std::string::npos) << welcome;
  std::string token = ReadFile(m[3]);
  while (!token.empty() && token.back() == '\n') token.pop_back();
  auto [st, out] = Nodes({{"COHORT_HEAD", m[1]}, {"COHORT_CA_FILE", m[2]}, {"COHORT_TOKEN", token}});
  EXPECT_TRUE(st.Success()) << out;
  EXPECT_NE(out.find("node-1  UP"), std::string::npos) << out;
}

}  // namespace
}  // namespace cohort::testing
