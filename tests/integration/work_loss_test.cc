// Failures that must not lose work or run it twice: a hung task (no progress for the
// job's progress_timeout_s) fails its gang, and a stopped agent's tasks are killed by their
// own shims (lease expiry) before the gang runs elsewhere.
#include <set>

#include "harness.h"

namespace cohort::testing {
namespace {

struct Record {
  int attempt = 0;
  std::string node;
  int pid = 0;
};

std::vector<Record> ReadRecords(const std::string& file) {
  std::vector<Record> out;
  std::ifstream in(file);
  Record r;
  while (in >> r.attempt >> r.node >> r.pid) out.push_back(r);
  return out;
}

// Each task appends "<attempt> <node> <pid>" to `file`, then runs `tail`.
std::string RecordThen(const std::string& file, const std::string& tail) {
  return "echo \"$COHORT_ATTEMPT $COHORT_NODE $$\" >> " + file + "; " + tail;
}

TEST(WorkLoss, HungTaskFailsTheGangAfterProgressTimeout) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  std::string file = c.dir() + "/records";
  // Reports one step, then hangs without ever exiting.
  std::string report = std::string(kTaskCaFile) +
      "curl -s --cacert \"$ca\" -o /dev/null -X POST -H 'Content-Type: application/json' -d '{\"step\": 7}' \"$COHORT_REPORT\"";
  json job = c.Submit({{"command", {"sh", "-c", RecordThen(file, report + "; rm -f \"$ca\"; exec sleep 1000")}},
                       {"progress_timeout_s", 2},
                       {"max_restarts", 1}});
  int64_t id = job["id"];
  EXPECT_EQ(job["spec"]["progress_timeout_s"], 2);

  json failed = c.WaitForState(id, "FAILED", std::chrono::seconds(40));
  EXPECT_EQ(failed["attempt"], 1);
  ASSERT_EQ(failed["history"].size(), 2u) << failed.dump(2);
  for (const auto& h : failed["history"]) {
    EXPECT_NE(h["end_reason"].get<std::string>().find("no progress reported for 2s (progress_timeout_s)"),
              std::string::npos)
        << h.dump();
  }
  std::string reason = failed["reason"];
  EXPECT_NE(reason.find("no progress reported for 2s (progress_timeout_s); last step 7 at "), std::string::npos)
      << reason;
  EXPECT_NE(reason.find("no restarts left of 1"), std::string::npos) << reason;

  // Both attempts ran, and their hung tasks were stopped.
  auto records = ReadRecords(file);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].attempt, 0);
  EXPECT_EQ(records[1].attempt, 1);
  for (const auto& r : records) {
    EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(r.pid); }, std::chrono::seconds(10))) << r.pid;
  }

  // `cohort show` gives the reason.
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "show", "--head", c.url(), std::to_string(id)};
  o.stdout_path = c.dir() + "/show.out";
  auto show = Subprocess::Spawn(o);
  ASSERT_TRUE(show.has_value());
  auto st = show->WaitFor(std::chrono::seconds(10));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0);
  std::string out = ReadFile(c.dir() + "/show.out");
  EXPECT_NE(out.find("no progress reported for 2s (progress_timeout_s)"), std::string::npos) << out;
  EXPECT_NE(out.find("progress timeout"), std::string::npos) << out;
}

TEST(WorkLoss, StoppedAgentsTasksAreKilledByTheirShimsAndTheGangRunsOnce) {
  LocalCluster c(LivenessTiming());  // fence 600 ms, failure 1 s, kill grace 2 s
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.StartAgent("node-b", 1);
  c.WaitForNodes(2);
  std::string file = c.dir() + "/records";
  std::string gate = c.dir() + "/gate";
  json job = c.Submit({{"command", {"sh", "-c", RecordThen(file, "while [ ! -e " + gate + " ]; do sleep 0.05; done")}},
                       {"gpus_per_node", 1},
                       {"max_restarts", 1}});
  int64_t id = job["id"];
  c.WaitForState(id, "RUNNING");
  ASSERT_TRUE(WaitUntil([&] { return ReadRecords(file).size() == 1; }, std::chrono::seconds(10)));
  Record stale = ReadRecords(file)[0];
  ASSERT_EQ(stale.attempt, 0);
  ASSERT_TRUE(ProcessAlive(stale.pid));
  std::string victim = stale.node;
  std::string other = victim == "node-a" ? "node-b" : "node-a";

  c.agent(victim).Signal(SIGSTOP);
  // The agent cannot act, yet its task goes: the shim's lease (fence timeout) runs out and
  // the shim stops the task (SIGTERM, SIGKILL after the kill grace).
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(stale.pid); }, std::chrono::seconds(20)))
      << "the stopped agent's task kept running";
  std::string status_file = c.dir() + "/" + victim + "/jobs/" + std::to_string(id) + "/attempt-0/rank-0.status.json";
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(status_file); }, std::chrono::seconds(10)));
  EXPECT_NE(ReadFile(status_file).find("lease"), std::string::npos) << ReadFile(status_file);

  // The gang runs again on the other node while the victim is still stopped.
  ASSERT_TRUE(WaitUntil([&] { return ReadRecords(file).size() == 2; }, std::chrono::seconds(20)))
      << "head log:\n" << ReadFile(c.dir() + "/head.log");
  Record rerun = ReadRecords(file)[1];
  EXPECT_EQ(rerun.attempt, 1);
  EXPECT_EQ(rerun.node, other);
  EXPECT_TRUE(ProcessAlive(rerun.pid));
  EXPECT_FALSE(ProcessAlive(stale.pid));

  // Back from the stop: the agent rejoins and does not restart the stale task.
  c.agent(victim).Signal(SIGCONT);
  ASSERT_TRUE(WaitUntil([&] { return c.Node(victim)["state"] == "UP"; }, std::chrono::seconds(15)));
  // A few heartbeats of the resumed agent.
  int64_t beats_seen = 0;
  ASSERT_TRUE(WaitUntil([&] {
    json n = c.Node(victim);
    int64_t age = n.value("heartbeat_age_ms", int64_t{-1});
    if (age >= 0 && age < 300) ++beats_seen;
    return beats_seen >= 5;
  }, std::chrono::seconds(15)));
  EXPECT_EQ(ReadRecords(file).size(), 2u) << "a task started again after the agent resumed";

  std::ofstream(gate) << "go";
  json done = c.WaitForState(id, "SUCCEEDED");
  EXPECT_EQ(done["attempt"], 1);
  auto records = ReadRecords(file);
  ASSERT_EQ(records.size(), 2u);
  int on_victim = 0;
  for (const auto& r : records) on_victim += r.node == victim;
  EXPECT_EQ(on_victim, 1);
}

}  // namespace
}  // namespace cohort::testing
