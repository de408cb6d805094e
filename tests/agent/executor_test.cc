#include "agent/executor.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/lease.h"
#include "agent/task_shim.h"
#include "common/subprocess.h"
#include "test_util.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using agent_testing::IsAlive;
using agent_testing::ReadFile;
using agent_testing::ReadPidFile;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using agent_testing::WaitForFile;
using ::testing::HasSubstr;

class ExecutorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Set before any Executor exists: the task env starts from this process's env.
    setenv("COHORT_EXEC_TEST_INHERITED", "from-agent", 1);
  }

  void SetUp() override { executor_ = MakeExecutor(10s); }
  void TearDown() override { executor_.reset(); }

  std::unique_ptr<Executor> MakeExecutor(std::chrono::milliseconds grace,
                                         std::string shim = COHORT_TEST_SHIM) {
    Executor::Options o;
    o.work_dir = tmp_.Sub("work");
    o.shim_path = std::move(shim);
    o.kill_grace = grace;
    o.on_task_exit = [this] { exits_++; };
    return std::make_unique<Executor>(o);
  }

  static TaskSpec Shell(TaskKey key, std::string script) {
    TaskSpec s;
    s.key = key;
    s.command = {"sh", "-c", std::move(script)};
    return s;
  }

  // The task's status once it has finished; fails the test after `timeout`.
  static TaskStatus WaitFinished(Executor& ex, const TaskKey& key,
                                 std::chrono::milliseconds timeout = 20s) {
    TaskStatus out;
    bool ok = WaitFor(
        [&] {
          for (const auto& s : ex.Snapshot()) {
            if (s.key == key && !s.running) {
              out = s;
              return true;
            }
          }
          return false;
        },
        timeout);
    EXPECT_TRUE(ok) << "task job " << key.job_id << " rank " << key.rank << " did not finish";
    return out;
  }

  TempDir tmp_;
  std::atomic<int> exits_{0};
  std::unique_ptr<Executor> executor_;
};

TEST_F(ExecutorTest, EnvCwdAndOutputReachTheTask) {
  std::string wd = tmp_.Sub("wd");
  std::filesystem::create_directories(wd);
  TaskSpec spec = Shell({7, 1, 2},
                        "echo \"var=$COHORT_TEST_VAR\"; echo \"inherited=$COHORT_EXEC_TEST_INHERITED\";"
                        "echo \"cvd=$CUDA_VISIBLE_DEVICES\"; echo \"order=$CUDA_DEVICE_ORDER\";"
                        " echo \"pwd=$(pwd)\"; echo to-stderr >&2");
  spec.env = {{"COHORT_TEST_VAR", "hello world"}};
  spec.workdir = wd;
  spec.gpus = {1, 3};
  spec.cpus = 4;
  ASSERT_TRUE(executor_->Launch(spec));

  TaskStatus st = WaitFinished(*executor_, spec.key);
  EXPECT_FALSE(st.running);
  EXPECT_EQ(st.exit_code, 0);
  EXPECT_EQ(st.signal, 0);
  EXPECT_EQ(st.error, "");
  EXPECT_GT(st.pid, 0);
  EXPECT_GT(st.started_ms, 0);
  EXPECT_GE(st.finished_ms, st.started_ms);
  EXPECT_EQ(st.gpus, (std::vector<int>{1, 3}));
  EXPECT_EQ(st.cpus, 4);
  EXPECT_EQ(st.log_path, tmp_.Sub("work") + "/jobs/7/attempt-1/rank-2.log");
  EXPECT_EQ(st.log_path, executor_->LogPath(spec.key));

  std::string log = ReadFile(st.log_path);
  EXPECT_THAT(log, HasSubstr("var=hello world\n"));
  EXPECT_THAT(log, HasSubstr("inherited=from-agent\n"));
  EXPECT_THAT(log, HasSubstr("cvd=1,3\n"));
  EXPECT_THAT(log, HasSubstr("order=PCI_BUS_ID\n"));
  EXPECT_THAT(log, HasSubstr("pwd=" + wd + "\n"));
  EXPECT_THAT(log, HasSubstr("to-stderr\n"));
  EXPECT_TRUE(WaitFor([&] { return exits_.load() == 1; }));  // called just after the flip

  // The status file the shim left behind.
  EXPECT_EQ(ReadFile(executor_->StatusPath(spec.key)),
            "{\"error\":\"\",\"exit_code\":0,\"signal\":0}\n");
}

TEST_F(ExecutorTest, ExitCodeAndSignalAreReported) {
  ASSERT_TRUE(executor_->Launch(Shell({1, 0, 0}, "exit 3")));
  ASSERT_TRUE(executor_->Launch(Shell({1, 0, 1}, "kill -KILL $$")));
  TaskStatus three = WaitFinished(*executor_, {1, 0, 0});
  EXPECT_EQ(three.exit_code, 3);
  EXPECT_EQ(three.signal, 0);
  TaskStatus killed = WaitFinished(*executor_, {1, 0, 1});
  EXPECT_EQ(killed.signal, SIGKILL);
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL);
  EXPECT_EQ(killed.error, "");
}

TEST_F(ExecutorTest, GracefulStopKillsTheWholeGroup) {
  std::string p1 = tmp_.Sub("p1"), p2 = tmp_.Sub("p2");
  TaskSpec spec = Shell({2, 0, 0},
                        "sleep 100 & echo $! > \"$P1.tmp\"; mv \"$P1.tmp\" \"$P1\";"
                        "sleep 100 & echo $! > \"$P2.tmp\"; mv \"$P2.tmp\" \"$P2\"; wait");
  spec.env = {{"P1", p1}, {"P2", p2}};
  ASSERT_TRUE(executor_->Launch(spec));
  int pid1 = ReadPidFile(p1), pid2 = ReadPidFile(p2);
  ASSERT_GT(pid1, 0);
  ASSERT_GT(pid2, 0);
  ASSERT_TRUE(IsAlive(pid1));
  ASSERT_TRUE(IsAlive(pid2));

  executor_->Stop(spec.key, /*immediate=*/false);
  TaskStatus st = WaitFinished(*executor_, spec.key);
  EXPECT_EQ(st.signal, SIGTERM);
  EXPECT_EQ(st.exit_code, 128 + SIGTERM);
  // The shim reaps every process of the task before it reports.
  EXPECT_FALSE(IsAlive(pid1));
  EXPECT_FALSE(IsAlive(pid2));
}

TEST_F(ExecutorTest, TaskIgnoringSigtermIsKilledAfterTheGrace) {
  constexpr auto kGrace = 300ms;
  auto ex = MakeExecutor(kGrace);
  std::string ready = tmp_.Sub("ready");
  TaskSpec spec = Shell({3, 0, 0}, "trap '' TERM; touch \"$READY\"; exec sleep 100");
  spec.env = {{"READY", ready}};
  ASSERT_TRUE(ex->Launch(spec));
  ASSERT_TRUE(WaitForFile(ready));

  auto t0 = std::chrono::steady_clock::now();
  ex->Stop(spec.key, /*immediate=*/false);
  TaskStatus st = WaitFinished(*ex, spec.key);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, kGrace);
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_THAT(ReadFile(st.log_path), HasSubstr("did not exit within 300 ms of SIGTERM"));
}

TEST_F(ExecutorTest, ImmediateStopDoesNotWaitForTheGrace) {
  // The fixture's grace is 10 s; an immediate stop must finish well inside it.
  std::string ready = tmp_.Sub("ready");
  TaskSpec spec = Shell({4, 0, 0}, "trap '' TERM; touch \"$READY\"; exec sleep 100");
  spec.env = {{"READY", ready}};
  ASSERT_TRUE(executor_->Launch(spec));
  ASSERT_TRUE(WaitForFile(ready));
  executor_->Stop(spec.key, /*immediate=*/true);
  TaskStatus st = WaitFinished(*executor_, spec.key, 8s);
  EXPECT_EQ(st.signal, SIGKILL);
}

TEST_F(ExecutorTest, StopReasonLeadsTheError) {
  // The agent stops a task over its GPU memory share with the reason, which the head shows.
  std::string ready = tmp_.Sub("ready");
  TaskSpec spec = Shell({4, 0, 1}, "touch \"$READY\"; exec sleep 100");
  spec.env = {{"READY", ready}};
  ASSERT_TRUE(executor_->Launch(spec));
  ASSERT_TRUE(WaitForFile(ready));
  executor_->Stop(spec.key, /*immediate=*/true, "task 1 used 30 GiB of GPU 0, over its share of 20 GiB");
  executor_->Stop(spec.key, /*immediate=*/true, "a later reason");  // the first one stays
  TaskStatus st = WaitFinished(*executor_, spec.key, 8s);
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_EQ(st.error, "task 1 used 30 GiB of GPU 0, over its share of 20 GiB");
}

TEST_F(ExecutorTest, LeaderExitLeavesNoStragglers) {
  std::string p = tmp_.Sub("p"), q = tmp_.Sub("q");
  // One straggler stays in the task's group; the other escapes it with setsid.
  TaskSpec spec = Shell({5, 0, 0},
                        "sleep 100 & echo $! > \"$P.tmp\"; mv \"$P.tmp\" \"$P\";"
                        "setsid sleep 100 & echo $! > \"$Q.tmp\"; mv \"$Q.tmp\" \"$Q\"; exit 0");
  spec.env = {{"P", p}, {"Q", q}};
  ASSERT_TRUE(executor_->Launch(spec));
  TaskStatus st = WaitFinished(*executor_, spec.key);
  EXPECT_EQ(st.exit_code, 0);
  int in_group = std::atoi(ReadFile(p).c_str());
  int escaped = std::atoi(ReadFile(q).c_str());
  ASSERT_GT(in_group, 0);
  ASSERT_GT(escaped, 0);
  EXPECT_FALSE(IsAlive(in_group));
  EXPECT_FALSE(IsAlive(escaped));
}

TEST_F(ExecutorTest, ExecFailureIsReportedAsExit127) {
  TaskSpec missing;
  missing.key = {6, 0, 0};
  missing.command = {"cohort-no-such-command", "arg"};
  TaskSpec bad_path;
  bad_path.key = {6, 0, 1};
  bad_path.command = {"/nonexistent/dir/tool"};
  TaskSpec bad_cwd = Shell({6, 0, 2}, "true");
  bad_cwd.workdir = tmp_.Sub("no-such-dir");
  for (const auto& spec : {missing, bad_path, bad_cwd}) ASSERT_TRUE(executor_->Launch(spec));

  TaskStatus a = WaitFinished(*executor_, missing.key);
  EXPECT_EQ(a.exit_code, 127);
  EXPECT_EQ(a.signal, 0);
  EXPECT_EQ(a.error, "cannot execute 'cohort-no-such-command': No such file or directory");
  EXPECT_THAT(ReadFile(a.log_path),
              HasSubstr("cohort: cannot execute 'cohort-no-such-command': No such file or "
                        "directory\n"));

  TaskStatus b = WaitFinished(*executor_, bad_path.key);
  EXPECT_EQ(b.exit_code, 127);
  EXPECT_EQ(b.error, "cannot execute '/nonexistent/dir/tool': No such file or directory");

  TaskStatus c = WaitFinished(*executor_, bad_cwd.key);
  EXPECT_EQ(c.exit_code, 127);
  EXPECT_THAT(c.error, HasSubstr("cannot enter working directory"));
  EXPECT_THAT(ReadFile(c.log_path), HasSubstr("cohort: cannot enter working directory"));
}

TEST_F(ExecutorTest, UnstartableShimOrEmptyCommandIsRecordedAsFinished) {
  auto ex = MakeExecutor(1s, tmp_.Sub("no-such-shim"));
  TaskSpec spec = Shell({8, 0, 0}, "true");
  ASSERT_TRUE(ex->Launch(spec));  // success: the failure is in the status
  TaskStatus failed = WaitFinished(*ex, spec.key);  // Launch returns before the shim starts
  ASSERT_EQ(ex->Snapshot().size(), 1u);
  EXPECT_EQ(failed.exit_code, 127);
  EXPECT_THAT(failed.error, HasSubstr("cannot start the task shim"));
  EXPECT_THAT(ReadFile(failed.log_path), HasSubstr("cohort: cannot start the task shim"));

  TaskSpec empty;
  empty.key = {8, 0, 1};
  ASSERT_TRUE(executor_->Launch(empty));
  TaskStatus st = WaitFinished(*executor_, empty.key);
  EXPECT_EQ(st.exit_code, 127);
  EXPECT_EQ(st.error, "empty command");
  EXPECT_TRUE(WaitFor([&] { return exits_.load() == 2; }));
}

TEST_F(ExecutorTest, AgentDeathKillsTheTask) {
  std::string pid_file = tmp_.Sub("sleep.pid");
  std::string work = tmp_.Sub("helper-work");
  SpawnOptions so;
  so.argv = {COHORT_TEST_SHIM, "executor-helper", work, pid_file};
  so.stdout_path = tmp_.Sub("helper.out");
  auto helper = Subprocess::Spawn(so);
  ASSERT_TRUE(helper) << helper.error().ToString();
  int sleep_pid = ReadPidFile(pid_file);
  // Whatever happens below, leave no helper or sleep behind.
  struct Reaper {
    Subprocess* helper;
    int* sleep_pid;
    ~Reaper() {
      if (helper->valid()) {
        helper->Signal(SIGKILL);
        (void)helper->Wait();
      }
      if (IsAlive(*sleep_pid)) kill(*sleep_pid, SIGKILL);
    }
  } reaper{&*helper, &sleep_pid};
  ASSERT_GT(sleep_pid, 0) << ReadFile(tmp_.Sub("helper.out"));
  ASSERT_TRUE(IsAlive(sleep_pid));

  helper->Signal(SIGKILL);
  auto hs = helper->Wait();
  ASSERT_TRUE(hs);
  EXPECT_EQ(hs->signal, SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return !IsAlive(sleep_pid); }, 10s));
  // The orphaned shim still reports what happened.
  auto status = WaitForFile(work + "/jobs/1/attempt-0/rank-0.status.json", 10s);
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, "{\"error\":\"\",\"exit_code\":137,\"signal\":9}\n");
}

TEST_F(ExecutorTest, LaunchTwiceAndForget) {
  TaskKey key{9, 0, 0};
  std::string ready = tmp_.Sub("ready");
  TaskSpec spec = Shell(key, "touch \"$READY\"; exec sleep 100");
  spec.env = {{"READY", ready}};
  ASSERT_TRUE(executor_->Launch(spec));
  auto again = executor_->Launch(spec);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);

  ASSERT_TRUE(WaitForFile(ready));
  executor_->Forget(key);  // running: no-op
  ASSERT_EQ(executor_->Snapshot().size(), 1u);
  EXPECT_TRUE(executor_->Snapshot()[0].running);

  executor_->Stop(key, /*immediate=*/true);
  WaitFinished(*executor_, key);
  again = executor_->Launch(spec);  // finished but not forgotten
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);

  executor_->Forget(key);
  EXPECT_TRUE(executor_->Snapshot().empty());
  executor_->Forget(key);  // unknown: no-op
  executor_->Forget({123, 0, 0});

  // A forgotten key may be launched again; its log starts afresh.
  TaskSpec echo = Shell(key, "echo second");
  ASSERT_TRUE(executor_->Launch(echo));
  TaskStatus st = WaitFinished(*executor_, key);
  EXPECT_EQ(st.exit_code, 0);
  EXPECT_EQ(ReadFile(st.log_path), "second\n");
}

TEST_F(ExecutorTest, ReadLogOffsets) {
  TaskKey key{10, 2, 1};
  ASSERT_TRUE(executor_->Launch(Shell(key, "printf 0123456789")));
  WaitFinished(*executor_, key);

  auto c = executor_->ReadLog(key, 0, 4);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->data, "0123");
  EXPECT_EQ(c->offset, 0);
  EXPECT_EQ(c->next_offset, 4);
  EXPECT_EQ(c->size, 10);
  EXPECT_FALSE(c->done);

  c = executor_->ReadLog(key, c->next_offset, 100);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->data, "456789");
  EXPECT_EQ(c->offset, 4);
  EXPECT_EQ(c->next_offset, 10);
  EXPECT_TRUE(c->done);

  c = executor_->ReadLog(key, -3, 100);  // the tail
  ASSERT_TRUE(c);
  EXPECT_EQ(c->data, "789");
  EXPECT_EQ(c->offset, 7);

  c = executor_->ReadLog(key, 50, 100);  // past the end
  ASSERT_TRUE(c);
  EXPECT_EQ(c->data, "");
  EXPECT_EQ(c->offset, 10);
  EXPECT_EQ(c->next_offset, 10);
  EXPECT_TRUE(c->done);

  auto bad = executor_->ReadLog(key, 0, 0);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  auto unknown = executor_->ReadLog({999, 0, 0}, 0, 100);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);

  executor_->Forget(key);  // the log outlives the record
  c = executor_->ReadLog(key, 0, 100);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->data, "0123456789");
  EXPECT_TRUE(c->done);
}

TEST_F(ExecutorTest, ReadLogOfARunningTaskIsNotDone) {
  TaskKey key{11, 0, 0};
  std::string ready = tmp_.Sub("ready");
  TaskSpec spec = Shell(key, "printf abc; touch \"$READY\"; exec sleep 100");
  spec.env = {{"READY", ready}};
  ASSERT_TRUE(executor_->Launch(spec));
  ASSERT_TRUE(WaitForFile(ready));
  auto c = executor_->ReadLog(key, 0, 100);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->data, "abc");
  EXPECT_EQ(c->next_offset, 3);
  EXPECT_FALSE(c->done);
  executor_->Stop(key, /*immediate=*/true);
  WaitFinished(*executor_, key);
  c = executor_->ReadLog(key, 3, 100);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->done);
}

TEST_F(ExecutorTest, StopAllAndWaitAllExited) {
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(executor_->Launch(Shell({12, 0, r}, "exec sleep 100")));
  }
  EXPECT_FALSE(executor_->WaitAllExited(1ms));
  executor_->StopAll(/*immediate=*/false);
  EXPECT_TRUE(executor_->WaitAllExited(20s));
  for (const auto& s : executor_->Snapshot()) {
    EXPECT_FALSE(s.running);
    EXPECT_EQ(s.signal, SIGTERM);
  }
  executor_->Stop({12, 0, 0}, true);  // finished: no-op
}

TEST_F(ExecutorTest, DestructorKillsRunningTasks) {
  std::string p = tmp_.Sub("p");
  TaskSpec spec = Shell({13, 0, 0}, "echo $$ > \"$P.tmp\"; mv \"$P.tmp\" \"$P\"; exec sleep 100");
  spec.env = {{"P", p}};
  ASSERT_TRUE(executor_->Launch(spec));
  int pid = ReadPidFile(p);
  ASSERT_GT(pid, 0);
  auto t0 = std::chrono::steady_clock::now();
  executor_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 8s);  // immediate, not the 10 s grace
  EXPECT_FALSE(IsAlive(pid));
}

TEST_F(ExecutorTest, ConcurrentLaunchesFromManyThreads) {
  constexpr int kThreads = 4, kPerThread = 8;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        TaskSpec spec = Shell({14, t, i}, "exit $RANK_CODE");
        spec.env = {{"RANK_CODE", std::to_string(i)}};
        EXPECT_TRUE(executor_->Launch(spec));
        executor_->Snapshot();
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(executor_->WaitAllExited(30s));
  auto snap = executor_->Snapshot();
  ASSERT_EQ(snap.size(), static_cast<size_t>(kThreads * kPerThread));
  for (const auto& s : snap) EXPECT_EQ(s.exit_code, s.key.rank) << s.error;
  EXPECT_TRUE(WaitFor([&] { return exits_.load() == kThreads * kPerThread; }));
}

TEST_F(ExecutorTest, OnTaskExitMayLaunch) {
  // The callback runs on the executor thread; a Launch from there must not deadlock.
  std::atomic<bool> launched{false};
  Executor::Options o;
  o.work_dir = tmp_.Sub("work2");
  o.shim_path = COHORT_TEST_SHIM;
  Executor* self = nullptr;
  o.on_task_exit = [&] {
    if (!launched.exchange(true)) {
      EXPECT_TRUE(self->Launch(Shell({15, 1, 0}, "exit 4")));
    }
  };
  Executor ex(o);
  self = &ex;
  ASSERT_TRUE(ex.Launch(Shell({15, 0, 0}, "true")));
  TaskStatus st = WaitFinished(ex, {15, 1, 0});
  EXPECT_EQ(st.exit_code, 4);
}

}  // namespace
}  // namespace cohort::agent

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using agent_testing::ReadFile;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

// Runs one task to its end under `o` and returns its status.
TaskStatus RunOne(Executor::Options o, std::vector<std::string> command) {
  Executor ex(std::move(o));
  TaskSpec spec;
  spec.key = {1, 0, 0};
  spec.command = std::move(command);
  EXPECT_TRUE(ex.Launch(spec));
  TaskStatus out;
  EXPECT_TRUE(WaitFor([&] {
    auto s = ex.Snapshot();
    if (s.empty() || s[0].running) return false;
    out = s[0];
    return true;
  }));
  return out;
}

TEST(ExecutorLease, TasksRunUnderTheOwnersLeaseFile) {
  TempDir tmp;
  SteadyTime expires = SteadyClock::now() + 300ms;
  ASSERT_TRUE(WriteLeaseFile(tmp.Sub("tasks.lease"), Lease{expires, expires, 300ms}));
  Executor::Options o;
  o.work_dir = tmp.Sub("work");
  o.shim_path = COHORT_TEST_SHIM;
  o.lease_path = tmp.Sub("tasks.lease");
  TaskStatus st = RunOne(o, {"sleep", "100"});  // nobody renews
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_THAT(st.error, HasSubstr("did not renew the task's lease"));
}

TEST(ExecutorShim, TheLeanShimProgramRunsTasks) {
  TempDir tmp;
  Executor::Options o;
  o.work_dir = tmp.Sub("work");
  o.shim_path = COHORT_TASK_SHIM;
  TaskStatus st = RunOne(o, {"sh", "-c", "echo from-the-task; exit 3"});
  EXPECT_EQ(st.exit_code, 3);
  EXPECT_EQ(st.error, "");
  EXPECT_EQ(ReadFile(st.log_path), "from-the-task\n");
}

TEST(ExecutorShim, FindTaskShimPrefersTheLeanProgramNextToTheBinary) {
  TempDir tmp;
  const std::string self = tmp.Sub("cohort");
  const std::string lean = tmp.Sub(kTaskShimProgram);
  std::ofstream(self) << "#!/bin/sh\n";
  ShimCommand none = FindTaskShim(self);
  EXPECT_EQ(none.path, self);
  EXPECT_TRUE(none.subcommand) << "the cohort binary needs the task-shim word";

  std::ofstream(lean) << "#!/bin/sh\n";
  EXPECT_EQ(FindTaskShim(self).path, self) << "a shim that cannot be executed is not used";

  std::filesystem::permissions(lean, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  ShimCommand found = FindTaskShim(self);
  EXPECT_EQ(found.path, lean);
  EXPECT_FALSE(found.subcommand);
}

}  // namespace
}  // namespace cohort::agent
