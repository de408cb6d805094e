// The executor and the shim running tasks as their jobs' users: the task's credentials and
// environment, the ownership and modes of its log, status file and owned directories, and
// the start failures (no such account, a directory of a third account). The switches need
// root (CI runs as root); those tests skip elsewhere.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/executor.h"
#include "agent/task_user.h"
#include "test_util.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using agent_testing::ReadFile;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

class ExecutorUserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The tasks of other users must reach their owned directories under the temp dir.
    ASSERT_EQ(chmod(tmp_.path().c_str(), 0711), 0);
  }

  std::unique_ptr<Executor> MakeExecutor(UserLookup lookup = nullptr) {
    Executor::Options o;
    o.work_dir = tmp_.Sub("work");
    o.shim_path = COHORT_TEST_SHIM;
    o.kill_grace = 5s;
    o.node_name = "node-under-test";
    o.lookup_user = std::move(lookup);
    return std::make_unique<Executor>(o);
  }

  static TaskStatus WaitFinished(Executor& ex, const TaskKey& key) {
    TaskStatus out;
    EXPECT_TRUE(WaitFor([&] {
      for (const auto& s : ex.Snapshot()) {
        if (s.key == key && !s.running) {
          out = s;
          return true;
        }
      }
      return false;
    })) << "task did not finish";
    return out;
  }

  // `nobody`'s account, or a skip reason.
  static std::optional<TaskAccount> Nobody() {
    auto a = LookupSystemUser("nobody");
    if (!a || !*a) return std::nullopt;
    return **a;
  }

  TempDir tmp_;
};

struct stat Stat(const std::string& path) {
  struct stat st{};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st;
}

TEST_F(ExecutorUserTest, LogAndStatusAreOnlyTheOwnersToRead) {
  auto ex = MakeExecutor();
  TaskSpec spec;
  spec.key = {3, 0, 0};
  spec.command = {"sh", "-c", "echo hi"};
  ASSERT_TRUE(ex->Launch(spec));
  TaskStatus st = WaitFinished(*ex, spec.key);
  EXPECT_EQ(st.exit_code, 0) << st.error;
  EXPECT_EQ(Stat(st.log_path).st_mode & 07777, 0600u);
  EXPECT_EQ(Stat(ex->StatusPath(spec.key)).st_mode & 07777, 0600u);
  EXPECT_EQ(Stat(std::filesystem::path(st.log_path).parent_path()).st_mode & 07777, 0700u);
}

TEST_F(ExecutorUserTest, RootRunsTheTaskAsItsJobsAccountAndKeepsTheShim) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: only a root agent starts tasks as other users";
  auto nobody = Nobody();
  if (!nobody) GTEST_SKIP() << "this system has no 'nobody' account";
  const uid_t uid = nobody->identity.uid;
  const gid_t gid = nobody->identity.gid;
  auto ex = MakeExecutor();
  const std::string ckpt = tmp_.Sub("ckpt/job-5");
  TaskSpec spec;
  spec.key = {5, 0, 0};
  spec.user = "nobody";
  spec.owned_dirs = {ckpt};
  spec.env = {{"CKPT", ckpt}};
  // The task reports its ids, its account's variables and its shim's uid, tries to signal
  // the shim, and writes into its checkpoint directory.
  spec.command = {"sh", "-c",
                  "echo \"ids=$(id -u):$(id -g):$(id -G | tr ' ' ,)\"; echo \"user=$USER logname=$LOGNAME "
                  "home=$HOME\"; echo \"shim-uid=$(awk '/^Uid:/ {print $2}' /proc/$PPID/status)\";"
                  "if kill -0 $PPID 2>/dev/null; then echo shim=signalled; else echo shim=protected; fi;"
                  "echo state > \"$CKPT/step-1\""};
  ASSERT_TRUE(ex->Launch(spec));
  TaskStatus st = WaitFinished(*ex, spec.key);
  const std::string log = ReadFile(st.log_path);
  EXPECT_EQ(st.exit_code, 0) << st.error << "\n" << log;

  std::string groups;
  for (gid_t g : nobody->identity.groups) groups += (groups.empty() ? "" : ",") + std::to_string(g);
  EXPECT_THAT(log, HasSubstr(fmt::format("ids={}:{}:{}\n", uid, gid, groups)));
  EXPECT_THAT(log, HasSubstr("user=nobody logname=nobody home=" + nobody->home + "\n"));
  EXPECT_THAT(log, HasSubstr("shim-uid=0\n"));
  EXPECT_THAT(log, HasSubstr("shim=protected\n"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("ids=0:")));

  // The log is the account's, 0600; the attempt directory and status file stay the agent's.
  struct stat log_st = Stat(st.log_path);
  EXPECT_EQ(log_st.st_uid, uid);
  EXPECT_EQ(log_st.st_gid, gid);
  EXPECT_EQ(log_st.st_mode & 07777, 0600u);
  struct stat dir_st = Stat(std::filesystem::path(st.log_path).parent_path());
  EXPECT_EQ(dir_st.st_uid, 0u);
  EXPECT_EQ(dir_st.st_mode & 07777, 0700u);
  EXPECT_EQ(Stat(ex->StatusPath(spec.key)).st_uid, 0u);
  // The checkpoint directory was created for the account, and the task wrote into it.
  struct stat ck_st = Stat(ckpt);
  EXPECT_EQ(ck_st.st_uid, uid);
  EXPECT_EQ(ck_st.st_mode & 07777, 0700u);
  EXPECT_EQ(Stat(ckpt + "/step-1").st_uid, uid);
}

TEST_F(ExecutorUserTest, AUserWithNoAccountFailsTheStartNamingUserAndNode) {
  auto ex = MakeExecutor([](const std::string&) -> Result<std::optional<TaskAccount>> { return std::nullopt; });
  TaskSpec spec;
  spec.key = {6, 0, 0};
  spec.user = "ghost";
  spec.command = {"sh", "-c", "echo ran"};
  ASSERT_TRUE(ex->Launch(spec));
  TaskStatus st = WaitFinished(*ex, spec.key);
  EXPECT_EQ(st.exit_code, 127);
  EXPECT_THAT(st.error, HasSubstr("'ghost'"));
  EXPECT_THAT(st.error, HasSubstr("'node-under-test'"));
  const std::string log = ReadFile(st.log_path);
  EXPECT_THAT(log, HasSubstr("cohort: " + st.error));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("ran")));
}

TEST_F(ExecutorUserTest, AnOwnedDirectoryOfAThirdAccountFailsTheStart) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to hand a directory to another account";
  auto nobody = Nobody();
  if (!nobody) GTEST_SKIP() << "this system has no 'nobody' account";
  const std::string theirs = tmp_.Sub("ckpt/job-9");
  std::filesystem::create_directories(theirs);
  ASSERT_EQ(chown(theirs.c_str(), nobody->identity.uid, nobody->identity.gid), 0);
  auto ex = MakeExecutor();
  TaskSpec spec;
  spec.key = {9, 0, 0};  // no user: runs as root, which does not own it either
  spec.owned_dirs = {theirs};
  spec.command = {"sh", "-c", "echo ran"};
  ASSERT_TRUE(ex->Launch(spec));
  TaskStatus st = WaitFinished(*ex, spec.key);
  EXPECT_EQ(st.exit_code, 127);
  EXPECT_THAT(st.error, HasSubstr(theirs + " belongs to uid " + std::to_string(nobody->identity.uid)));
  EXPECT_EQ(Stat(theirs).st_uid, nobody->identity.uid);  // left as it was
}

}  // namespace
}  // namespace cohort::agent
