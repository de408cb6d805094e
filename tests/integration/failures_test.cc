// Node and head failures: detection, requeue, fencing, restart reconciliation.
#include <set>

#include "harness.h"

namespace cohort::testing {
namespace {

// Every task writes "<attempt> <rank> <node> <pid>" to a shared file, then sleeps.
json RecordingJob(const std::string& file, int nodes, int max_restarts, const std::string& tail = "exec sleep 300") {
  return {{"command", {"sh", "-c", "echo \"$COHORT_ATTEMPT $RANK $COHORT_NODE $$\" >> " + file + "; " + tail}},
          {"nodes", nodes}, {"gpus_per_node", 1}, {"max_restarts", max_restarts}};
}

struct Record {
  int attempt, rank, pid;
  std::string node;
};

std::vector<Record> ReadRecords(const std::string& file) {
  std::vector<Record> out;
  std::ifstream in(file);
  Record r;
  while (in >> r.attempt >> r.rank >> r.node >> r.pid) out.push_back(r);
  return out;
}

TEST(Failures, KilledAgentMakesNodeDownAndGangIsRequeuedElsewhere) {
  LocalCluster c(LivenessTiming());  // failure timeout 1 s
  c.StartHead();
  for (const char* n : {"node-a", "node-b", "node-c"}) c.StartAgent(n, 1);
  c.WaitForNodes(3);
  std::string file = c.dir() + "/records";
  json job = c.Submit(RecordingJob(file, 2, 1));
  int64_t id = job["id"];
  json running = c.WaitForState(id, "RUNNING");
  ASSERT_TRUE(WaitUntil([&] { return ReadRecords(file).size() == 2; }, std::chrono::seconds(10)));
  std::string victim = running["allocation"]["nodes"][1]["node"];
  int victim_task_pid = 0;
  for (const auto& r : ReadRecords(file)) {
    if (r.node == victim) victim_task_pid = r.pid;
  }
  ASSERT_GT(victim_task_pid, 0);

  c.agent(victim).Signal(SIGKILL);
  (void)c.agent(victim).Wait();
  // The task dies with its agent (the shim's parent-death signal), long before any requeue.
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(victim_task_pid); }, std::chrono::seconds(2)));

  ASSERT_TRUE(WaitUntil([&] { return c.Node(victim)["state"] == "DOWN"; }, std::chrono::seconds(5)));
  // DOWN for the right reason, and never before the failure timeout (1 s) of silence as
  // the head measured it. How soon after it is bench_failover's figure, not a test's.
  const std::string reason = c.Node(victim)["reason"].get<std::string>();
  ASSERT_EQ(reason.rfind("no heartbeat for ", 0), 0u) << reason;
  auto silent_ms = ParseDurationMs(reason.substr(std::string("no heartbeat for ").size()), "reason");
  ASSERT_TRUE(silent_ms.has_value()) << reason;
  EXPECT_GE(*silent_ms, 1000) << reason;

  json again = c.WaitForState(id, "RUNNING", std::chrono::seconds(10));
  ASSERT_TRUE(WaitUntil([&] { again = c.Job(id); return again["attempt"] == 1 && again["state"] == "RUNNING"; },
                        std::chrono::seconds(10))) << again.dump(2);
  std::set<std::string> nodes;
  for (const auto& na : again["allocation"]["nodes"]) nodes.insert(na["node"]);
  EXPECT_EQ(nodes.size(), 2u);
  EXPECT_FALSE(nodes.contains(victim)) << "requeued onto the dead node";
  ASSERT_TRUE(WaitUntil([&] { return ReadRecords(file).size() == 4; }, std::chrono::seconds(10)));
  for (const auto& r : ReadRecords(file)) {
    if (r.attempt == 1) {
      EXPECT_NE(r.node, victim);
    }
  }
  // The old attempt's surviving rank was stopped: only attempt-1 tasks still run.
  for (const auto& r : ReadRecords(file)) {
    if (r.attempt == 0) {
      EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(r.pid); }, std::chrono::seconds(5))) << r.pid;
    }
  }
  EXPECT_EQ(again["history"].size(), 2u);
  EXPECT_NE(again["history"][0]["end_reason"].get<std::string>().find(victim), std::string::npos);
}

TEST(Failures, GangFailsWhenNoRestartsAreLeft) {
  LocalCluster c(LivenessTiming());
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.StartAgent("node-b", 1);
  c.WaitForNodes(2);
  std::string file = c.dir() + "/records";
  json job = c.Submit(RecordingJob(file, 2, 0));
  json running = c.WaitForState(job["id"], "RUNNING");
  std::string victim = running["allocation"]["nodes"][0]["node"];
  c.agent(victim).Signal(SIGKILL);
  json failed = c.WaitForState(job["id"], "FAILED", std::chrono::seconds(10));
  EXPECT_NE(failed["reason"].get<std::string>().find("went down"), std::string::npos) << failed["reason"];
}

TEST(Failures, HeadKilledAndRestartedLosesNoJobAndReconcilesRunningOnes) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  std::string gate = c.dir() + "/gate";
  std::string file = c.dir() + "/records";
  // Running across the restart; finishes only when the gate opens.
  json running = c.Submit(RecordingJob(file, 1, 0, "while [ ! -e " + gate + " ]; do sleep 0.05; done"));
  c.WaitForState(running["id"], "RUNNING");
  // Pending across the restart: needs both GPUs while one is taken.
  json pending = c.Submit({{"command", {"true"}}, {"gpus_per_node", 2}});
  // Accepted just before the kill.
  std::vector<int64_t> accepted;
  for (int i = 0; i < 20; ++i) accepted.push_back(c.Submit({{"command", {"true"}}, {"cpus_per_task", 1}})["id"]);

  c.KillHead(SIGKILL);
  c.StartHead(c.port());  // same port: the agents keep their URL
  for (int64_t id : accepted) EXPECT_TRUE(c.Job(id).is_object()) << "job " << id << " lost";
  EXPECT_EQ(c.Job(running["id"])["state"], "RUNNING");

  // The running job was not restarted: still attempt 0, one record, same task alive.
  std::ofstream(gate) << "go";
  json done = c.WaitForState(running["id"], "SUCCEEDED");
  EXPECT_EQ(done["attempt"], 0);
  EXPECT_EQ(ReadRecords(file).size(), 1u);
  c.WaitForState(pending["id"], "SUCCEEDED");
  for (int64_t id : accepted) c.WaitForState(id, "SUCCEEDED");
}

TEST(Failures, AgentCutOffFromTheHeadFencesItsTasks) {
  LocalCluster c(LivenessTiming());  // fence timeout 600 ms
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  std::string file = c.dir() + "/records";
  json job = c.Submit(RecordingJob(file, 1, 0));
  c.WaitForState(job["id"], "RUNNING");
  ASSERT_TRUE(WaitUntil([&] { return ReadRecords(file).size() == 1; }, std::chrono::seconds(10)));
  int pid = ReadRecords(file)[0].pid;
  // A stopped head accepts connections (the kernel does) but never answers: to the agent
  // that is a partition, not a head that is down, so it must fence.
  c.head().Signal(SIGSTOP);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(pid); }, std::chrono::seconds(5)))
      << "the agent did not kill its task while cut off";
  c.head().Signal(SIGCONT);
  // The fence was the head's doing (it was stopped): the node is not DOWN, and the job is
  // requeued without counting a restart (max_restarts 0) and runs again (core/liveness.h).
  ASSERT_TRUE(WaitUntil([&] { return ReadRecords(file).size() == 2; }, std::chrono::seconds(10)))
      << "the job did not run again; head log:\n" << ReadFile(c.dir() + "/head.log");
  EXPECT_EQ(ReadRecords(file)[1].attempt, 1);
  json again = c.Job(job["id"]);
  EXPECT_EQ(again.value("state", ""), "RUNNING") << again.dump(2);
  EXPECT_EQ(again.value("moves", -1), 1) << again.dump(2);
  EXPECT_EQ(c.Node("node-a").value("state", ""), "UP");
  EXPECT_EQ(ReadFile(c.dir() + "/head.log").find(" is DOWN"), std::string::npos);
}

TEST(Failures, AgentRegisteringTwiceUnderOneNameIsRejected) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  json reg = {{"name", "node-a"}, {"address", "127.0.0.1"}, {"incarnation", "someoneelse"}, {"cpus", 4},
              {"agent_url", "https://127.0.0.1:1"}, {"csr", NodeKey().csr}};
  auto r = c.client().Post("/v1/agents/register", reg);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kAlreadyExists);
  EXPECT_NE(r.error().message.find("already registered"), std::string::npos) << r.error().message;
  // The live agent keeps its node.
  EXPECT_EQ(c.Node("node-a")["state"], "UP");
  EXPECT_NE(c.Node("node-a")["incarnation"], "someoneelse");
}

TEST(Failures, SecondHeadOnTheSameStateDirectoryIsRefused) {
  LocalCluster c;
  c.StartHead();
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "head", "--port", "0", "--state-dir", c.dir() + "/head"};
  o.stdout_path = c.dir() + "/second-head.log";
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.has_value());
  auto st = p->WaitFor(std::chrono::seconds(10));
  ASSERT_TRUE(st.has_value()) << "the second head kept running";
  EXPECT_EQ(st->exit_code, 1);
  EXPECT_NE(ReadFile(c.dir() + "/second-head.log").find("another head"), std::string::npos)
      << ReadFile(c.dir() + "/second-head.log");
  // The first head still serves.
  EXPECT_TRUE(c.client().Get("/v1/health").has_value());
}

}  // namespace
}  // namespace cohort::testing
