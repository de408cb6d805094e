// CPU binding (issue: the agent binds each task to its CPUs): the CPU list format, the
// allocator on fake topologies, the shim's --cpus, and real tasks under an Executor
// with a CPU pool, each reading its own mask from /proc/self/status inside the task.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/cpu_allocator.h"
#include "agent/executor.h"
#include "agent/task_shim.h"
#include "common/cpu_set.h"
#include "common/subprocess.h"
#include "test_util.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using agent_testing::ReadFile;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(CpuListTest, ParsesAndFormatsTheKernelsListFormat) {
  auto cpus = ParseCpuList("0-3,8,10-11\n");
  ASSERT_TRUE(cpus) << cpus.error().message;
  EXPECT_THAT(*cpus, ElementsAre(0, 1, 2, 3, 8, 10, 11));
  EXPECT_EQ(FormatCpuList(*cpus), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({5, 1, 2, 2, 0}), "0-2,5");
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_THAT(*ParseCpuList("3,1,1"), ElementsAre(1, 3));
  for (const char* bad : {"", "a", "1-", "-1", "3-1", "1,,2", "1 2", "8192", "0-3;x"}) {
    auto r = ParseCpuList(bad);
    EXPECT_FALSE(r) << "'" << bad << "' accepted";
  }
  EXPECT_THAT(ParseCpuList("0,x").error().message, HasSubstr("'x' is not a CPU number"));
}

TEST(CpuBindFlagTest, AcceptsCoresAndNoneAndNamesTheFlagOtherwise) {
  EXPECT_EQ(*ParseCpuBind("cores"), CpuBind::kCores);
  EXPECT_EQ(*ParseCpuBind("none"), CpuBind::kNone);
  for (const char* bad : {"", "core", "NONE", "sockets", "0-3"}) {
    auto r = ParseCpuBind(bad);
    ASSERT_FALSE(r) << "'" << bad << "' accepted";
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message, HasSubstr("--cpu-bind must be 'cores'"));
    EXPECT_THAT(r.error().message, HasSubstr("got '" + std::string(bad) + "'"));
  }
}

// An agent that advertises more CPUs than it may run on binds nothing: it is one of
// several simulated nodes sharing a machine (`cohort up`: 2 agents offering 16 CPUs each
// on this 2-CPU VM), and each would bind its first task to the same first CPU.
TEST(CpuPoolTest, AnAgentAdvertisingFewerCpusBindsToTheFirstOnesAndMoreToNone) {
  EXPECT_THAT(CpuPoolOf({2, 3, 6, 7}, 2), ElementsAre(2, 3));
  EXPECT_THAT(CpuPoolOf({2, 3, 6, 7}, 4), ElementsAre(2, 3, 6, 7));
  EXPECT_THAT(CpuPoolOf({0, 1}, 16), IsEmpty());
}

// Places of CPUs 0..n-1: `threads` hyper-threads per core, `cores` cores per package and
// NUMA node, numbered as Linux numbers a two-socket machine (siblings n/2 apart).
std::vector<CpuPlace> TwoSockets(int cores_per_socket) {
  std::vector<CpuPlace> out;
  const int n = 2 * cores_per_socket * 2;
  for (int cpu = 0; cpu < n; ++cpu) {
    const int physical = cpu % (n / 2);  // the core, counted over both sockets
    const int socket = physical / cores_per_socket;
    out.push_back({cpu, physical, socket, socket});
  }
  return out;
}

TEST(CpuAllocatorTest, RunningTasksGetDisjointCpusAndAFinishedTasksCpusAreReused) {
  CpuAllocator a(TwoSockets(2));  // 8 CPUs
  auto x = a.Allocate(2);
  auto y = a.Allocate(3);
  auto z = a.Allocate(3);
  EXPECT_EQ(x.size(), 2u);
  EXPECT_EQ(y.size(), 3u);
  EXPECT_EQ(z.size(), 3u);
  std::set<int> all(x.begin(), x.end());
  all.insert(y.begin(), y.end());
  all.insert(z.begin(), z.end());
  EXPECT_EQ(all.size(), 8u) << "overlapping CPUs";
  EXPECT_EQ(a.idle(), 0);
  a.Release(y);
  EXPECT_EQ(a.idle(), 3);
  EXPECT_EQ(a.Allocate(3), y);
  EXPECT_TRUE(a.Allocate(0).empty());
}

TEST(CpuAllocatorTest, PrefersOneCoreThenOneSocket) {
  // Socket 0 holds cores 0 (CPUs 0 and 4) and 1 (1 and 5); socket 1 cores 2 (2, 6) and 3
  // (3, 7).
  CpuAllocator a(TwoSockets(2));
  // Two CPUs: both threads of one core.
  EXPECT_THAT(a.Allocate(2), ElementsAre(0, 4));
  // One CPU: on the socket with the fewest CPUs left that has one (best fit), leaving
  // socket 1 whole.
  EXPECT_THAT(a.Allocate(1), ElementsAre(1));
  // Four CPUs: socket 0 has one left, socket 1 all four.
  EXPECT_THAT(a.Allocate(4), ElementsAre(2, 3, 6, 7));
  // The last one: CPU 5, the sibling of 1.
  EXPECT_THAT(a.Allocate(1), ElementsAre(5));
}

TEST(CpuAllocatorTest, OverSubscriptionSharesTheLeastUsedCpusAndNeverFails) {
  CpuAllocator a({{0, 0, 0, 0}, {1, 1, 0, 0}});  // an agent advertising 16 on 2 CPUs
  EXPECT_THAT(a.Allocate(1), ElementsAre(0));
  EXPECT_THAT(a.Allocate(1), ElementsAre(1));
  EXPECT_THAT(a.Allocate(1), ElementsAre(0));  // round-robin over the pool
  EXPECT_THAT(a.Allocate(8), ElementsAre(0, 1)) << "min(cpus, pool) distinct CPUs";
  EXPECT_THAT(a.Allocate(1), ElementsAre(1));  // 1 was used twice, 0 three times
}

TEST(CpuTopologyTest, ReadsCoresPackagesAndNodesFromSysfs) {
  TempDir tmp;
  auto cpu_dir = [&](int cpu) { return tmp.Sub("cpu" + std::to_string(cpu)); };
  // CPUs 0 and 2 are one core's threads on package 1, node 1; CPU 1 another core on
  // package 0, node 0; CPU 3 has no topology files at all.
  const int core_id[] = {5, 5, 5};
  const int package[] = {1, 0, 1};
  for (int cpu = 0; cpu < 3; ++cpu) {
    std::filesystem::create_directories(cpu_dir(cpu) + "/topology");
    std::ofstream(cpu_dir(cpu) + "/topology/core_id") << core_id[cpu] << "\n";
    std::ofstream(cpu_dir(cpu) + "/topology/physical_package_id") << package[cpu] << "\n";
    std::filesystem::create_directories(cpu_dir(cpu) + "/node" + std::to_string(package[cpu]));
  }
  std::filesystem::create_directories(cpu_dir(3));
  auto places = ReadCpuTopology({0, 1, 2, 3}, tmp.path());
  ASSERT_EQ(places.size(), 4u);
  EXPECT_EQ(places[0].core, places[2].core) << "same package and core_id: one core";
  EXPECT_NE(places[0].core, places[1].core) << "same core_id on another package: another core";
  EXPECT_NE(places[3].core, places[0].core);
  EXPECT_NE(places[3].core, places[1].core);
  EXPECT_EQ(places[0].package, 1);
  EXPECT_EQ(places[0].node, 1);
  EXPECT_EQ(places[1].node, 0);
  EXPECT_EQ(places[3].package, 0);
  EXPECT_EQ(places[3].node, 0);
}

// The CPUs this test may use; binding tests need two.
std::vector<int> OwnCpus() {
  auto cpus = AffinityCpus();
  return cpus ? *cpus : std::vector<int>{};
}

TEST(ShimCpusTest, TheTaskRunsBoundAndAMaskTheKernelRefusesLeavesItUnbound) {
  const auto own = OwnCpus();
  ASSERT_FALSE(own.empty());
  TempDir tmp;
  auto run = [&](const std::string& list) {
    SpawnOptions so;
    so.argv = {COHORT_TEST_SHIM, kTaskShimCommand, "--log", tmp.Sub("log"), "--status", tmp.Sub("status"),
               "--grace-ms", "1000", "--cpus", list, "--", "grep", "Cpus_allowed_list", "/proc/self/status"};
    so.stdout_path = tmp.Sub("log");
    so.new_process_group = false;
    std::filesystem::remove(tmp.Sub("log"));
    auto shim = Subprocess::Spawn(so);
    EXPECT_TRUE(shim);
    if (!shim) return -1;
    auto st = shim->Wait();
    return st ? st->exit_code : -1;
  };
  const std::string last = std::to_string(own.back());
  EXPECT_EQ(run(last), 0);
  EXPECT_THAT(ReadFile(tmp.Sub("log")), HasSubstr("Cpus_allowed_list:\t" + last + "\n"));
  // CPU 8191 exists nowhere here: the task still runs, on the shim's own CPUs.
  EXPECT_EQ(run("8191"), 0);
  const std::string log = ReadFile(tmp.Sub("log"));
  EXPECT_THAT(log, HasSubstr("cohort: cannot bind the task to CPUs 8191: Invalid argument; it runs unbound"));
  EXPECT_THAT(log, HasSubstr("Cpus_allowed_list:\t" + FormatCpuList(own) + "\n"));
}

// Real tasks under an Executor with (or without) a CPU pool of this machine's CPUs.
class ExecutorCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    own_ = OwnCpus();
    if (own_.size() < 2) GTEST_SKIP() << "needs 2 CPUs in this process's mask, has " << own_.size();
    pool_ = {own_[0], own_[1]};
  }

  std::unique_ptr<Executor> MakeExecutor(bool bind) {
    Executor::Options o;
    o.work_dir = tmp_.Sub("work");
    o.shim_path = COHORT_TEST_SHIM;
    o.kill_grace = 2s;
    if (bind) o.cpu_pool = ReadCpuTopology(pool_);
    return std::make_unique<Executor>(o);
  }

  // A task that writes its mask and CPU variables to its log, then waits for `go`.
  TaskSpec Reporter(int64_t job, int cpus, bool wait = true) {
    TaskSpec s;
    s.key = {job, 0, 0};
    s.cpus = cpus;
    s.command = {"sh", "-c",
                 "grep Cpus_allowed_list /proc/self/status; echo \"bind=$COHORT_CPU_BIND\"; "
                 "echo \"per_task=$COHORT_CPUS_PER_TASK\"; echo \"omp=$OMP_NUM_THREADS\"; echo reported; " +
                     (wait ? "while [ ! -e " + tmp_.Sub("go") + " ]; do sleep 0.01; done" : std::string("true"))};
    return s;
  }

  // The task's log once it has reported.
  std::string Report(Executor& ex, int64_t job) {
    const std::string path = ex.LogPath({job, 0, 0});
    EXPECT_TRUE(WaitFor([&] { return ReadFile(path).find("reported\n") != std::string::npos; }))
        << "job " << job << " never reported: " << ReadFile(path);
    return ReadFile(path);
  }

  static std::string Allowed(const std::string& log) {
    std::smatch m;
    static const std::regex re("Cpus_allowed_list:\\s*(\\S+)");
    return std::regex_search(log, m, re) ? m[1].str() : "(none)";
  }

  TaskStatus Status(Executor& ex, int64_t job) {
    for (const auto& s : ex.Snapshot()) {
      if (s.key.job_id == job) return s;
    }
    ADD_FAILURE() << "no job " << job;
    return {};
  }

  void WaitFinished(Executor& ex, int64_t job) {
    EXPECT_TRUE(WaitFor([&] { return !Status(ex, job).running; })) << "job " << job << " did not finish";
  }

  TempDir tmp_;
  std::vector<int> own_;
  std::vector<int> pool_;
};

TEST_F(ExecutorCpuTest, TwoTasksGetDisjointMasksOfTheirSizeAndTheirVariables) {
  auto ex = MakeExecutor(true);
  ASSERT_TRUE(ex->Launch(Reporter(1, 1)));
  ASSERT_TRUE(ex->Launch(Reporter(2, 1)));
  const std::string a = Report(*ex, 1);
  const std::string b = Report(*ex, 2);
  const std::string mask_a = Allowed(a);
  const std::string mask_b = Allowed(b);
  EXPECT_EQ(mask_a, std::to_string(pool_[0]));
  EXPECT_EQ(mask_b, std::to_string(pool_[1]));
  EXPECT_NE(mask_a, mask_b);
  EXPECT_THAT(a, HasSubstr("bind=" + mask_a + "\n"));
  EXPECT_THAT(a, HasSubstr("per_task=1\n"));
  EXPECT_THAT(a, HasSubstr("omp=1\n"));
  EXPECT_THAT(Status(*ex, 1).cpu_list, ElementsAre(pool_[0]));
  EXPECT_THAT(Status(*ex, 2).cpu_list, ElementsAre(pool_[1]));
  std::ofstream(tmp_.Sub("go")) << "";
  WaitFinished(*ex, 1);
  WaitFinished(*ex, 2);
  EXPECT_THAT(Status(*ex, 1).cpu_list, ElementsAre(pool_[0])) << "a finished task still shows what it had";
}

TEST_F(ExecutorCpuTest, AFinishedTasksCpusGoToTheNextTask) {
  auto ex = MakeExecutor(true);
  ASSERT_TRUE(ex->Launch(Reporter(1, 1)));               // holds pool_[0] until `go`
  ASSERT_TRUE(ex->Launch(Reporter(2, 1, /*wait=*/false)));  // pool_[1], and ends
  WaitFinished(*ex, 2);
  ASSERT_TRUE(ex->Launch(Reporter(3, 1)));
  const std::string c = Report(*ex, 3);
  EXPECT_EQ(Allowed(c), std::to_string(pool_[1])) << "not the CPU the running task holds";
  EXPECT_NE(Allowed(c), Allowed(Report(*ex, 1)));
  std::ofstream(tmp_.Sub("go")) << "";
}

TEST_F(ExecutorCpuTest, MoreCpusThanThePoolBindsToAllOfItAndTheJobsOwnThreadCountWins) {
  auto ex = MakeExecutor(true);
  TaskSpec big = Reporter(1, 16, false);
  ASSERT_TRUE(ex->Launch(big));
  TaskSpec chosen = Reporter(2, 1, false);
  chosen.env["OMP_NUM_THREADS"] = "7";
  ASSERT_TRUE(ex->Launch(chosen));
  const std::string a = Report(*ex, 1);
  EXPECT_EQ(Allowed(a), FormatCpuList(pool_));
  EXPECT_THAT(a, HasSubstr("per_task=16\n"));
  EXPECT_THAT(a, HasSubstr("omp=2\n")) << "the CPUs it has, not the 16 asked for";
  EXPECT_THAT(Report(*ex, 2), HasSubstr("omp=7\n"));
  WaitFinished(*ex, 1);
  EXPECT_EQ(Status(*ex, 1).exit_code, 0);
}

TEST_F(ExecutorCpuTest, NoPoolOrNoCpusLeavesTheMaskAlone) {
  const std::string own = FormatCpuList(own_);
  auto unbound = MakeExecutor(false);  // --cpu-bind none
  ASSERT_TRUE(unbound->Launch(Reporter(1, 1, false)));
  const std::string a = Report(*unbound, 1);
  EXPECT_EQ(Allowed(a), own);
  EXPECT_THAT(a, HasSubstr("bind=\n"));
  EXPECT_THAT(a, HasSubstr("per_task=1\n"));
  EXPECT_THAT(a, HasSubstr("omp=\n")) << "an unbound task's thread count stays the job's";
  WaitFinished(*unbound, 1);
  EXPECT_TRUE(Status(*unbound, 1).cpu_list.empty());
  unbound.reset();

  auto bound = MakeExecutor(true);
  ASSERT_TRUE(bound->Launch(Reporter(2, 0, false)));  // cpus_per_task 0
  const std::string b = Report(*bound, 2);
  EXPECT_EQ(Allowed(b), own);
  EXPECT_THAT(b, HasSubstr("bind=\n"));
  EXPECT_THAT(b, HasSubstr("per_task=\n"));
  EXPECT_THAT(b, Not(HasSubstr("omp=0")));
  WaitFinished(*bound, 2);
  EXPECT_TRUE(Status(*bound, 2).cpu_list.empty());
}

}  // namespace
}  // namespace cohort::agent
