// CPU binding through the real binaries: a head and one agent started with --cpu-bind
// cores (or none), jobs of one task with cpus_per_task 1, each task reading its own mask
// (/proc/self/status's Cpus_allowed_list) and thread count. Bound tasks get disjoint
// single CPUs of the agent's pool, OMP_NUM_THREADS=1 and COHORT_CPU_BIND naming the CPU;
// `cohort show` lists each under CPUS; a finished task's CPU goes to the next task. Unbound
// (--cpu-bind none), a task's mask is the agent's, and an agent that itself runs with
// COHORT_CPU_BIND (a bound task's) does not pass it on. The unit tests of the pieces are
// agent_exec_test's Cpu* and ExecutorCpuTest.
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/cpu_set.h"
#include "harness.h"

namespace cohort::testing {
namespace {

// One task that prints what it was given (ALLOWED: its Cpus_allowed_list; OMP, BIND,
// PER_TASK: "unset" when absent), then holds its CPU until `gate` exists (at most 30 s;
// "" ends at once).
json Reporter(const std::string& gate) {
  std::string script =
      "echo ALLOWED=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status); "
      "echo OMP=${OMP_NUM_THREADS-unset}; echo BIND=${COHORT_CPU_BIND-unset}; "
      "echo PER_TASK=${COHORT_CPUS_PER_TASK-unset}; echo REPORTED=1";
  if (!gate.empty()) {
    script += "; i=0; while [ ! -e '" + gate + "' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done";
  }
  return json{{"command", {"sh", "-c", script}}, {"cpus_per_task", 1}};
}

// What rank 0 of job `id` reported (waits for it).
std::map<std::string, std::string> Report(LocalCluster& c, int64_t id) {
  std::string logs;
  EXPECT_TRUE(WaitUntil([&] {
    logs = c.Logs(id, 0);
    return logs.find("REPORTED=1") != std::string::npos;
  }, std::chrono::seconds(15))) << "job " << id << " reported nothing; logs:\n" << logs << "\njob: " << c.Job(id).dump(2);
  return ParseEnvLines(logs);
}

// The CPUS column of rank 0's row in `cohort show ID`'s running tasks ("" when not listed).
std::string ShownCpus(LocalCluster& c, int64_t id) {
  auto r = Cohort(c, {"show", std::to_string(id)});
  const size_t at = r.output.find("tasks (running):");
  if (r.status.Code() != 0 || at == std::string::npos) return "";
  std::istringstream lines(r.output.substr(at));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream cols(line);
    std::string rank, node, cpus;
    if (cols >> rank >> node >> cpus && rank == "0" && node == "node-a") return cpus;
  }
  return "";
}

// The test process's CPUs, which the agents it starts inherit.
std::vector<int> OwnCpus() {
  auto cpus = AffinityCpus();
  EXPECT_TRUE(cpus.has_value()) << cpus.error().message;
  return cpus ? *cpus : std::vector<int>{};
}

TEST(CpuBind, BoundTasksGetDisjointCpusListedByShowAndAFinishedTasksCpuGoesToTheNext) {
  const std::vector<int> own = OwnCpus();
  if (own.size() < 2) GTEST_SKIP() << "this process may run on " << own.size() << " CPU(s): two tasks cannot get disjoint ones";
  LocalCluster c;
  c.StartHead();
  // --cpus 2 within the mask: the agent binds, from its mask's first two CPUs.
  c.StartAgent("node-a", 0, 2, {"--cpu-bind", "cores"});
  c.WaitForNodes(1);
  const std::set<std::string> pool = {std::to_string(own[0]), std::to_string(own[1])};

  const std::string gate1 = c.dir() + "/gate1";
  const std::string gate2 = c.dir() + "/gate2";
  const int64_t id1 = c.Submit(Reporter(gate1))["id"];
  const int64_t id2 = c.Submit(Reporter(gate2))["id"];
  auto r1 = Report(c, id1);
  auto r2 = Report(c, id2);
  for (auto* r : {&r1, &r2}) {
    EXPECT_TRUE(pool.contains((*r)["ALLOWED"])) << "one CPU of the agent's first two: " << (*r)["ALLOWED"];
    EXPECT_EQ((*r)["OMP"], "1");
    EXPECT_EQ((*r)["BIND"], (*r)["ALLOWED"]);
    EXPECT_EQ((*r)["PER_TASK"], "1");
  }
  EXPECT_NE(r1["ALLOWED"], r2["ALLOWED"]) << "two running tasks share a CPU";

  // cohort show lists each running task's CPU (reported by the next heartbeats).
  std::string shown1, shown2;
  EXPECT_TRUE(WaitUntil([&] {
    shown1 = ShownCpus(c, id1);
    shown2 = ShownCpus(c, id2);
    return shown1 == r1["ALLOWED"] && shown2 == r2["ALLOWED"];
  }, std::chrono::seconds(10))) << "cohort show listed CPUS '" << shown1 << "' and '" << shown2 << "'";

  // Job 2 ends (the later one: its CPU is not the allocator's first pick, so a CPU that
  // was never given back would show): the node has room for one task again, and it gets
  // job 2's CPU, while job 1 still holds the other.
  std::ofstream(gate2).close();
  c.WaitForState(id2, "SUCCEEDED");
  const int64_t id3 = c.Submit(Reporter(""))["id"];
  auto r3 = Report(c, id3);
  EXPECT_EQ(r3["ALLOWED"], r2["ALLOWED"]) << "the finished task's CPU went to the next one";
  EXPECT_EQ(r3["OMP"], "1");
  c.WaitForState(id3, "SUCCEEDED");
  std::ofstream(gate1).close();
  c.WaitForState(id1, "SUCCEEDED");
}

TEST(CpuBind, UnboundTasksRunOnTheAgentsMask) {
  LocalCluster c;
  c.StartHead();
  // The agent runs as if it were itself a bound task: its own CPU variables must not reach
  // its unbound tasks, which would take the agent's mask for their share.
  c.StartAgent("node-a", 0, 2, {"--cpu-bind", "none"}, {{"COHORT_CPU_BIND", "0"}, {"COHORT_CPUS_PER_TASK", "7"}});
  c.WaitForNodes(1);
  const int64_t id = c.Submit(Reporter(""))["id"];
  auto r = Report(c, id);
  const std::string status = ReadFile("/proc/" + std::to_string(c.agent("node-a").pid()) + "/status");
  const size_t at = status.find("Cpus_allowed_list:\t");
  ASSERT_NE(at, std::string::npos) << status;
  const size_t from = at + std::string_view("Cpus_allowed_list:\t").size();
  auto agent_mask = ParseCpuList(status.substr(from, status.find('\n', from) - from));
  ASSERT_TRUE(agent_mask.has_value()) << agent_mask.error().message;
  EXPECT_EQ(r["ALLOWED"], FormatCpuList(*agent_mask));
  // Only a bound task gets OMP_NUM_THREADS from the agent; this one keeps what the agent
  // inherited from the test.
  const char* inherited_omp = std::getenv("OMP_NUM_THREADS");
  EXPECT_EQ(r["OMP"], inherited_omp ? inherited_omp : "unset");
  EXPECT_EQ(r["BIND"], "unset") << "the agent's own COHORT_CPU_BIND reached its task";
  EXPECT_EQ(r["PER_TASK"], "1") << "this task's cpus_per_task";
  c.WaitForState(id, "SUCCEEDED");
}

}  // namespace
}  // namespace cohort::testing
