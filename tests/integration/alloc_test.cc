// `cohort alloc` and steps (issue 19 item 3) on a local cluster: an allocation holds its
// nodes and GPUs, its command runs here with COHORT_JOB_ID, `cohort run` inside it runs
// steps on the allocation's tasks (listed by `cohort show` with their exit codes), and the
// allocation is released when the command exits (its GPUs free again), at its time limit,
// and on a signal to alloc; and the errors: an allocation no node can hold, a step asking
// more than the allocation holds, COHORT_JOB_ID naming no running allocation.
#include <sys/wait.h>

#include "harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

bool GpusFree(LocalCluster& c, const std::vector<std::string>& nodes) {
  for (const auto& n : nodes) {
    if (c.Node(n)["gpus_allocated"] != 0) return false;
  }
  return true;
}

// The allocation's id from alloc's "granted allocation N" (or "pending allocation N").
int64_t AllocationId(const std::string& err) {
  for (const char* word : {"granted allocation ", "pending allocation "}) {
    if (auto at = err.find(word); at != std::string::npos) return std::stoll(err.substr(at + std::strlen(word)));
  }
  return 0;
}

TEST(Alloc, StepsLandInTheAllocationWhichIsReleasedAtExit) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.StartAgent("node-b", 2);
  c.WaitForNodes(2);
  const std::string cohort = std::string(COHORT_BINARY);
  // A step on both nodes, one on one node asking too much, an exec beside rank 1, and the
  // environment alloc gives its command.
  const std::string script =
      cohort + " run -- sh -c 'echo step:$COHORT_NODE:$RANK:$CUDA_VISIBLE_DEVICES; exit $RANK'; echo step_rc=$?; " +
      cohort + " run -N 3 -- true 2>" + c.dir() + "/too-many.err; echo too_many_rc=$?; " + cohort +
      " run -G 2 -- true 2>" + c.dir() + "/too-many-gpus.err; echo gpus_rc=$?; " + cohort +
      " run -N 1 -- sh -c 'echo one:$COHORT_NODE'; " + cohort +
      " exec $COHORT_JOB_ID --rank 1 -- sh -c 'echo exec:$COHORT_NODE'; "
      "echo id=$COHORT_JOB_ID; echo slurm=$SLURM_JOB_ID; echo nodes=$COHORT_NODELIST; echo count=$SLURM_NNODES";
  auto r = Cohort(c, {"alloc", "-N", "2", "-G", "1", "--", "sh", "-c", script});
  EXPECT_EQ(r.status.Code(), 0) << r.output << r.errors;
  auto seen = ParseEnvLines(r.output);
  const std::string id = seen["id"];
  ASSERT_FALSE(id.empty()) << r.output << r.errors;
  EXPECT_EQ(seen["slurm"], id);
  EXPECT_EQ(seen["count"], "2");
  EXPECT_EQ(seen["nodes"], "node-a,node-b") << r.output;
  EXPECT_NE(r.errors.find("granted allocation " + id), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("released allocation " + id), std::string::npos) << r.errors;
  // The step ran once on each task of the allocation, with the task's GPU; its exit code
  // is the highest of its tasks'.
  EXPECT_NE(r.output.find("step:node-a:0:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step:node-b:1:"), std::string::npos) << r.output;
  EXPECT_EQ(seen["step_rc"], "1") << r.output;
  EXPECT_NE(r.errors.find("rank 1 on node-b exited 1"), std::string::npos) << r.errors;
  EXPECT_NE(r.output.find("one:node-a\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("one:node-b"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exec:node-b\n"), std::string::npos) << r.output;
  // Asking more than the allocation holds.
  EXPECT_EQ(seen["too_many_rc"], "2") << r.output;
  EXPECT_NE(ReadFile(c.dir() + "/too-many.err").find("the step asks 3 nodes; allocation " + id + " holds 2"),
            std::string::npos)
      << ReadFile(c.dir() + "/too-many.err");
  EXPECT_EQ(seen["gpus_rc"], "2") << r.output;
  EXPECT_NE(ReadFile(c.dir() + "/too-many-gpus.err").find("allocation " + id + " holds 1 per node"),
            std::string::npos)
      << ReadFile(c.dir() + "/too-many-gpus.err");

  // Released: SUCCEEDED (the command exited 0), its GPUs free again.
  json job = c.WaitForState(std::stoll(id), "SUCCEEDED");
  EXPECT_EQ(job["spec"]["kind"], "allocation");
  EXPECT_TRUE(WaitUntil([&] { return GpusFree(c, {"node-a", "node-b"}); }, 10s));
  // Its steps, with their tasks' exit codes: the run on both nodes, the one on one node,
  // and the exec.
  ASSERT_EQ(job["steps"].size(), 3u) << job.dump(2);
  EXPECT_EQ(job["steps"][0]["tasks"][0]["exit_code"], 0);
  EXPECT_EQ(job["steps"][0]["tasks"][1]["exit_code"], 1);
  EXPECT_EQ(job["steps"][2]["tasks"][0]["node"], "node-b");
  r = Cohort(c, {"show", id});
  EXPECT_NE(r.output.find("allocation (cohort alloc)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("steps:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0:0 1:1"), std::string::npos) << r.output;
  r = Cohort(c, {"queue", "--all"});
  EXPECT_NE(r.output.find("allocation"), std::string::npos) << r.output;

  // A command that fails: the allocation FAILED with its exit code, which alloc returns.
  r = Cohort(c, {"alloc", "--", "sh", "-c", "exit 4"});
  EXPECT_EQ(r.status.Code(), 4) << r.errors;
  json failed = c.WaitForState(AllocationId(r.errors), "FAILED");
  EXPECT_EQ(failed["exit_code"], 4);

  // Without a command: $SHELL, here reading its commands from alloc's stdin.
  r = RunCli(c, {"sh", "-c", "echo 'echo shell-in=$COHORT_JOB_ID; exit 3' | SHELL=/bin/sh " + cohort + " --head " +
                                 c.url() + " alloc"});
  EXPECT_EQ(r.status.Code(), 3) << r.errors;
  EXPECT_EQ(r.output, "shell-in=" + std::to_string(AllocationId(r.errors)) + "\n") << r.errors;

  // Errors: an allocation no node can hold; COHORT_JOB_ID naming a batch job, and no job.
  r = Cohort(c, {"alloc", "-N", "3", "--", "true"});
  EXPECT_EQ(r.status.Code(), 1) << r.errors;
  EXPECT_NE(r.errors.find("requesting the allocation"), std::string::npos) << r.errors;
  const int64_t batch = c.Submit({{"command", {"sleep", "30"}}})["id"];
  c.WaitForState(batch, "RUNNING");
  r = RunCli(c, {"sh", "-c", "COHORT_JOB_ID=" + std::to_string(batch) + " " + cohort + " --head " + c.url() +
                                 " run -- true"});
  EXPECT_EQ(r.status.Code(), 1) << r.errors;
  EXPECT_NE(r.errors.find("job " + std::to_string(batch) + " is not an allocation"), std::string::npos) << r.errors;
  r = RunCli(c, {"sh", "-c", "COHORT_JOB_ID=987654 " + cohort + " --head " + c.url() + " run -- true"});
  EXPECT_EQ(r.status.Code(), 1) << r.errors;
  EXPECT_NE(r.errors.find("987654"), std::string::npos) << r.errors;
  EXPECT_TRUE(Cohort(c, {"cancel", std::to_string(batch)}).status.Success());
}

// cohort batch (sbatch) on a TLS head with tokens: the script as submitted (an edit while
// it waits changes nothing) runs once, on the first node, as no rank, with the job's token;
// its `cohort run` is a step on every task; its output lands in slurm-<id>.out; its exit
// code ends the job, and the GPUs its holding tasks kept are free again.
TEST(Batch, AScriptRunsOnceOnTheFirstNodeAndItsStepsOnEveryTask) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.StartAgent("node-b", 2);
  c.WaitForNodes(2);
  const std::string cohort = std::string(COHORT_BINARY);
  const std::string path = c.dir() + "/job.sh";
  const std::string text = "#!/bin/sh\n"
                           "#SBATCH -N 2 -G 1\n"
                           "#SBATCH -J batchy\n"
                           "echo script:$COHORT_NODE:${RANK-none}:$SLURM_JOB_ID:$SLURM_NNODES:$1\n" +
                           cohort + " run -- sh -c 'echo step:$COHORT_NODE:$RANK:$CUDA_VISIBLE_DEVICES'\n"
                           "echo step_rc=$?\n"
                           "exit 3\n";
  std::ofstream(path) << text;
  auto r = Cohort(c, {"batch", "--parsable", "-H", "-D", c.dir(), path, "first-arg"});
  ASSERT_EQ(r.status.Code(), 0) << r.errors;
  const int64_t id = std::stoll(r.output);
  std::ofstream(path) << "#!/bin/sh\necho edited\n";  // after submitting: not what runs
  ASSERT_TRUE(Cohort(c, {"release", std::to_string(id)}).status.Success());
  json job = c.WaitForState(id, "FAILED");
  EXPECT_EQ(job["exit_code"], 3);
  EXPECT_EQ(job["reason"], "the batch script on " + job["allocation"]["nodes"][0]["node"].get<std::string>() +
                               " exited with code 3");
  EXPECT_EQ(job["spec"]["name"], "batchy");
  const std::string out = ReadFile(fmt::format("{}/slurm-{}.out", c.dir(), id));
  const std::string first = job["allocation"]["nodes"][0]["node"];
  EXPECT_NE(out.find(fmt::format("script:{}:none:{}:2:first-arg\n", first, id)), std::string::npos) << out;
  EXPECT_EQ(out.find("script:", out.find("script:") + 1), std::string::npos) << "the script ran once: " << out;
  EXPECT_EQ(out.find("edited"), std::string::npos) << out;
  EXPECT_NE(out.find("step:node-a:"), std::string::npos) << out;
  EXPECT_NE(out.find("step:node-b:"), std::string::npos) << out;
  EXPECT_NE(out.find("step_rc=0\n"), std::string::npos) << out;
  ASSERT_EQ(job["steps"].size(), 1u) << job.dump(2);
  EXPECT_EQ(job["steps"][0]["tasks"].size(), 2u);
  r = Cohort(c, {"show", "--script", std::to_string(id)});
  EXPECT_EQ(r.output, text) << r.errors;
  EXPECT_TRUE(WaitUntil([&] { return GpusFree(c, {"node-a", "node-b"}); }, 10s));
}

TEST(Alloc, EndsAtItsTimeLimit) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  auto r = Cohort(c, {"alloc", "-G", "1", "-t", "2s", "--", "sh", "-c", "echo in; exec sleep 25"});
  EXPECT_NE(r.status.Code(), 0) << r.errors;
  EXPECT_NE(r.errors.find("TIMEOUT"), std::string::npos) << r.errors;
  const int64_t id = AllocationId(r.errors);
  ASSERT_GT(id, 0) << r.errors;
  EXPECT_EQ(c.Job(id)["state"], "TIMEOUT");
  EXPECT_TRUE(WaitUntil([&] { return GpusFree(c, {"node-a"}); }, 10s));
}

TEST(Alloc, WaitsForResourcesAndASignalReleasesIt) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const int64_t blocker = c.Submit({{"command", {"sleep", "30"}}, {"gpus_per_node", 1}})["id"];
  c.WaitForState(blocker, "RUNNING");

  SpawnOptions o;
  o.argv = {COHORT_BINARY, "--head", c.url(), "alloc", "-G", "1", "--", "sh", "-c", "echo holding; exec sleep 25"};
  o.stdout_path = c.dir() + "/alloc.out";
  o.stderr_path = c.dir() + "/alloc.err";
  auto alloc = Subprocess::Spawn(o);
  ASSERT_TRUE(alloc.has_value());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(o.stderr_path).find("waiting for resources: ") != std::string::npos; },
                        10s))
      << ReadFile(o.stderr_path);
  const int64_t id = AllocationId(ReadFile(o.stderr_path));
  ASSERT_GT(id, 0);
  EXPECT_EQ(c.Job(id)["state"], "PENDING");
  ASSERT_TRUE(Cohort(c, {"cancel", std::to_string(blocker)}).status.Success());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(o.stdout_path).find("holding") != std::string::npos; }, 15s))
      << ReadFile(o.stderr_path);
  EXPECT_EQ(c.Job(id)["state"], "RUNNING");

  alloc->Signal(SIGTERM);
  auto st = alloc->WaitFor(15s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->Code(), 128 + SIGTERM) << ReadFile(o.stderr_path);
  json job = c.WaitForState(id, "CANCELLED");
  EXPECT_NE(job["reason"].get<std::string>().find("SIGTERM"), std::string::npos) << job.dump();
  EXPECT_TRUE(WaitUntil([&] { return GpusFree(c, {"node-a"}); }, 10s));
}

TEST(Alloc, AnInteractiveShellOnATerminalKeepsItUntilItExits) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  int master = -1;
  const pid_t pid = SpawnOnTerminal({COHORT_BINARY, "--head", c.url(), "alloc", "-G", "1"},
                                    {{"SHELL", "/bin/sh"}, {"PS1", "alloc$ "}}, nullptr, master);
  ASSERT_GE(pid, 0);
  std::string seen;
  ReadUntil(master, "alloc$ ", 20s, seen);
  ASSERT_NE(seen.find("granted allocation"), std::string::npos) << seen;
  const int64_t id = AllocationId(seen);
  // A step from the shell, then Ctrl-C at the prompt: the shell's, not a release.
  const std::string step = std::string(COHORT_BINARY) + " run -- sh -c 'echo step-on-$COHORT_NODE'\r";
  ASSERT_EQ(write(master, step.data(), step.size()), static_cast<ssize_t>(step.size()));
  ReadUntil(master, "step-on-node-a", 20s, seen);
  EXPECT_NE(seen.find("step-on-node-a"), std::string::npos) << seen;
  ASSERT_EQ(write(master, "\x03", 1), 1);
  const std::string after = "echo still-$COHORT_JOB_ID\r";
  ASSERT_EQ(write(master, after.data(), after.size()), static_cast<ssize_t>(after.size()));
  ReadUntil(master, "still-" + std::to_string(id) + "\r\n", 20s, seen);
  EXPECT_NE(seen.find("still-" + std::to_string(id) + "\r\n"), std::string::npos) << seen;
  EXPECT_EQ(c.Job(id)["state"], "RUNNING") << seen;
  // Leaving the shell releases it, with the shell's exit code.
  const std::optional<int> ended = TypeAndWaitForExit(master, pid, "exit 0\r", 20s);
  ASSERT_TRUE(ended.has_value()) << seen;
  const int st = *ended;
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << seen;
  close(master);
  c.WaitForState(id, "SUCCEEDED");
}

}  // namespace
}  // namespace cohort::testing
