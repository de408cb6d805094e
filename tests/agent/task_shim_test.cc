// The shim on its own, run as a program the way the executor runs it.
#include "agent/task_shim.h"

#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/json.h"
#include "common/subprocess.h"
#include "test_util.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using agent_testing::ReadFile;
using agent_testing::TempDir;
using agent_testing::WaitForFile;
using ::testing::HasSubstr;

class TaskShimTest : public ::testing::Test {
 protected:
  Result<Subprocess> StartShim(std::vector<std::string> command, int grace_ms = 5000,
                               bool with_subcommand = true) {
    SpawnOptions so;
    so.argv = {COHORT_TEST_SHIM};
    if (with_subcommand) so.argv.push_back(kTaskShimCommand);
    for (std::string a : {"--log", log_.c_str(), "--status", status_.c_str(), "--grace-ms"}) {
      so.argv.push_back(a);
    }
    so.argv.push_back(std::to_string(grace_ms));
    so.argv.push_back("--");
    so.argv.insert(so.argv.end(), command.begin(), command.end());
    so.stdout_path = log_;
    so.new_process_group = false;
    return Subprocess::Spawn(so);
  }

  json Status() {
    auto j = ParseJson(ReadFile(status_), "status");
    EXPECT_TRUE(j) << ReadFile(status_);
    return j ? *j : json();
  }

  TempDir tmp_;
  std::string log_ = tmp_.Sub("task.log");
  std::string status_ = tmp_.Sub("task.status.json");
};

TEST_F(TaskShimTest, ExitsWithTheTaskCodeAndWritesStatus) {
  auto shim = StartShim({"sh", "-c", "echo out; exit 5"});
  ASSERT_TRUE(shim) << shim.error().ToString();
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 5);
  json j = Status();
  EXPECT_EQ(j["exit_code"], 5);
  EXPECT_EQ(j["signal"], 0);
  EXPECT_EQ(j["error"], "");
  EXPECT_EQ(ReadFile(log_), "out\n");
  EXPECT_FALSE(std::filesystem::exists(status_ + ".tmp"));
}

TEST_F(TaskShimTest, WorksWithoutTheSubcommandWord) {
  auto shim = StartShim({"true"}, 5000, /*with_subcommand=*/false);
  ASSERT_TRUE(shim);
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->Success());
  EXPECT_EQ(Status()["exit_code"], 0);
}

TEST_F(TaskShimTest, SigtermStopsTheTaskGroup) {
  std::string ready = tmp_.Sub("ready");
  auto shim = StartShim({"sh", "-c", "touch " + ready + "; sleep 100 & wait"});
  ASSERT_TRUE(shim);
  ASSERT_TRUE(WaitForFile(ready));
  shim->Signal(SIGTERM);
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 128 + SIGTERM);  // the shim itself exits normally
  json j = Status();
  EXPECT_EQ(j["signal"], SIGTERM);
  EXPECT_EQ(j["exit_code"], 128 + SIGTERM);
}

TEST_F(TaskShimTest, Sigusr1KillsAtOnce) {
  std::string ready = tmp_.Sub("ready");
  auto shim = StartShim({"sh", "-c", "trap '' TERM; touch " + ready + "; exec sleep 100"},
                        /*grace_ms=*/60000);
  ASSERT_TRUE(shim);
  ASSERT_TRUE(WaitForFile(ready));
  shim->Signal(SIGUSR1);
  auto st = shim->WaitFor(20s);
  ASSERT_TRUE(st);
  EXPECT_EQ(Status()["signal"], SIGKILL);
}

TEST_F(TaskShimTest, SignalsForTheShimAloneAreIgnored) {
  // SIGINT/SIGHUP/SIGPIPE to the shim must not end it (nor the task).
  std::string ready = tmp_.Sub("ready"), go = tmp_.Sub("go");
  auto shim = StartShim({"sh", "-c",
                         "touch " + ready + "; while [ ! -e " + go + " ]; do sleep 0.01; done; exit 6"});
  ASSERT_TRUE(shim);
  ASSERT_TRUE(WaitForFile(ready));
  shim->Signal(SIGINT);
  shim->Signal(SIGHUP);
  shim->Signal(SIGPIPE);
  std::ofstream(go) << "go";
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 6);
  EXPECT_EQ(Status()["exit_code"], 6);
}

TEST_F(TaskShimTest, BadCommandLineExits2) {
  SpawnOptions so;
  so.argv = {COHORT_TEST_SHIM, kTaskShimCommand, "--log", log_, "--bogus", "x", "--", "true"};
  so.stdout_path = log_;
  auto shim = Subprocess::Spawn(so);
  ASSERT_TRUE(shim);
  auto st = shim->Wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->exit_code, 2);
  EXPECT_THAT(ReadFile(log_), HasSubstr("unknown flag '--bogus'"));
  EXPECT_FALSE(std::filesystem::exists(status_));
}

}  // namespace
}  // namespace cohort::agent
