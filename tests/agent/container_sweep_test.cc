// Containers left behind (agent/container_sweep.h): which names are this agent's, and a
// sweep against a fake runtime (a script that keeps one file per container) that removes
// this agent's containers no task runs, and nothing else.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "agent/container.h"
#include "agent/container_sweep.h"
#include "agent/runtime_call.h"
#include "test_util.h"

namespace cohort::agent {
namespace {

namespace fs = std::filesystem;

TEST(ContainerSweepTest, OnlyThisAgentsTaskNamesAreLeftovers) {
  const std::string mine = ContainerNamePrefix("/var/lib/cohort/agent-a");
  const std::string other = ContainerNamePrefix("/var/lib/cohort/agent-b");
  ASSERT_NE(mine, other);
  EXPECT_EQ(ContainerName("/var/lib/cohort/agent-a", 12, 3, 4), mine + "j12-a3-r4");
  EXPECT_TRUE(mine.starts_with("cohort-") && mine.ends_with("-")) << mine;
  const std::string listing = mine + "j1-a0-r0\n" + mine + "j1-a0-r1\n" + other + "j1-a0-r0\n" + mine +
                              "j1-a0-r0-debug\n" + mine + "jx-a0-r0\n" + mine + "j1-a0\n" + mine + "j2-a1-r3\r\n" +
                              "web\n\n" + mine + "\n";
  const std::vector<std::string> want = {mine + "j1-a0-r0", mine + "j2-a1-r3"};
  EXPECT_EQ(LeftoverContainers(listing, mine, {mine + "j1-a0-r1"}), want);
  EXPECT_TRUE(LeftoverContainers("", mine, {}).empty());
  EXPECT_EQ(ContainerListArgv("docker"), (std::vector<std::string>{"docker", "ps", "--all", "--format", "{{.Names}}"}));
}

class ContainerSweeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-sweep-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_directories(dir_ + "/containers");
    runtime_ = dir_ + "/docker";
    // `ps` lists the files of containers/; `rm --force NAME...` removes them (and logs);
    // with a file `broken`, every call fails.
    std::ofstream(runtime_) << "#!/bin/sh\nD=" << dir_ << "\n"
                            << R"([ -e $D/broken ] && { echo "Cannot connect to the daemon" >&2; exit 1; }
case "$1" in
ps) ls $D/containers ;;
rm) shift 2; for n in "$@"; do rm -f $D/containers/$n; echo "$n" >> $D/removed; done ;;
esac
)";
    chmod(runtime_.c_str(), 0755);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Create(const std::string& name) { std::ofstream(dir_ + "/containers/" + name) << "x"; }
  bool Exists(const std::string& name) const { return fs::exists(dir_ + "/containers/" + name); }

  std::string dir_, runtime_;
};

TEST_F(ContainerSweeperTest, RemovesThisAgentsContainersNoTaskRunsAndNothingElse) {
  const std::string work = dir_ + "/agent";
  const std::string left = ContainerName(work, 7, 0, 0), running = ContainerName(work, 8, 0, 0);
  const std::string others = ContainerName(dir_ + "/another-agent", 7, 0, 0);
  for (const auto& n : {left, running, others, std::string("postgres")}) Create(n);
  int asked = 0;
  ContainerSweeper::Options o;
  o.runtimes = {{"docker", runtime_}, {"podman", dir_ + "/no-such-podman"}};
  o.work_dir = work;
  o.running = [&] {
    ++asked;
    return std::set<std::string>{running};
  };
  ContainerSweeper sweeper(o);
  auto swept = sweeper.Sweep();
  EXPECT_EQ(swept.removed, std::vector<std::string>{"docker " + left});
  EXPECT_TRUE(swept.problems.empty()) << "a runtime that is not installed is no problem: " << swept.problems.front();
  EXPECT_EQ(asked, 1);
  EXPECT_FALSE(Exists(left));
  EXPECT_TRUE(Exists(running)) << "a running task's container was removed";
  EXPECT_TRUE(Exists(others)) << "another agent's container was removed";
  EXPECT_TRUE(Exists("postgres"));
  EXPECT_TRUE(sweeper.Sweep().removed.empty()) << "nothing left to remove";

  // A runtime that fails is reported once, then again only after it has answered.
  std::ofstream(dir_ + "/broken") << "x";
  Create(left);
  auto failed = sweeper.Sweep();
  ASSERT_EQ(failed.problems.size(), 1u);
  EXPECT_NE(failed.problems[0].find("docker: "), std::string::npos) << failed.problems[0];
  EXPECT_NE(failed.problems[0].find("Cannot connect to the daemon"), std::string::npos) << failed.problems[0];
  EXPECT_TRUE(sweeper.Sweep().problems.empty());
  fs::remove(dir_ + "/broken");
  EXPECT_EQ(sweeper.Sweep().removed, std::vector<std::string>{"docker " + left});
  EXPECT_FALSE(fs::exists(work + "/sweep") && !fs::is_empty(work + "/sweep")) << "the runtime's output is left";
}

// A runtime call that never answers (a hung daemon) ends when its RuntimeCalls is
// cancelled, long before its timeout (an hour here: the test would hang without the
// kill); a call after the cancel is refused without starting the runtime.
TEST_F(ContainerSweeperTest, CancellingTheCallsKillsAHungRuntimeAndRefusesNewCalls) {
  const std::string fifo = dir_ + "/never", pid_file = dir_ + "/hung.pid", hung = dir_ + "/hung";
  ASSERT_TRUE(agent_testing::WriteHungRuntime(hung, fifo, pid_file));
  RuntimeCalls calls;
  auto call = std::async(std::launch::async, [&] {
    return RunRuntimeCommand({hung, "ps"}, dir_ + "/scratch", Millis(3'600'000), &calls);
  });
  int pid = 0;
  while (pid == 0 && call.wait_for(std::chrono::milliseconds(5)) == std::future_status::timeout) {
    std::ifstream(pid_file) >> pid;
  }
  ASSERT_GT(pid, 0) << "the runtime never started";
  calls.CancelAll();
  auto r = call.get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message.find("cancelled: the agent is stopping"), std::string::npos) << r.error().message;
  EXPECT_TRUE(kill(pid, 0) != 0 && errno == ESRCH) << "the hung runtime " << pid << " still runs";

  fs::remove(pid_file);
  auto refused = RunRuntimeCommand({hung, "ps"}, dir_ + "/scratch", Millis(3'600'000), &calls);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("cancelled"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(fs::exists(pid_file)) << "a call after the cancel started the runtime";

  // The sweep over a cancelled set reports nothing and removes nothing.
  Create(ContainerName(dir_ + "/agent", 7, 0, 0));
  ContainerSweeper::Options o;
  o.runtimes = {{"docker", runtime_}};
  o.work_dir = dir_ + "/agent";
  o.calls = &calls;
  auto swept = ContainerSweeper(o).Sweep();
  EXPECT_TRUE(swept.removed.empty());
  EXPECT_TRUE(swept.problems.empty()) << swept.problems.front();
}

}  // namespace
}  // namespace cohort::agent
