// The head's own lag and the unhealthy zone (src/head/core/liveness.h), under running jobs:
//  - the head SIGSTOPped for longer than the failure timeout: no node is declared DOWN for
//    the head's own gap; the agents fenced their tasks (they could not reach the head), so
//    the jobs are requeued, and not counted as restarts (max_restarts 0), and continue;
//  - three of four agents SIGSTOPped at once: none is declared DOWN and no job fails while
//    they are silent (UNREACHABLE); when they come back, the fenced gang is requeued
//    without counting a restart, and the job completes.
// Both check the training job's loss record: nothing lost beyond the checkpoint, nothing
// recorded twice.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "fault_cluster.h"

namespace cohort::testing {
namespace {

// The value of an unlabelled sample in the head's /metrics, or -1.
double MetricValue(FaultCluster& c, const std::string& name) {
  auto r = c.client().GetRaw("/metrics");
  if (!r || r->status != 200) return -1;
  const std::string key = "\n" + name + " ";
  const size_t at = r->body.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(r->body.substr(at + key.size()));
}

// Restarts the job used: attempts that ended for a failure (moves do not count).
int Restarts(const json& job) { return job.value("attempt", 0) - job.value("moves", 0); }

// Steps (both tests): the gang trains on until the agents fence it (the fence timeout) or
// its lease runs out (at most the failure timeout, ~55 steps); 200 leave attempt 0 over
// 100 more, and attempt 1 shows the record continues.
TEST(HeadLagFaults, StoppedHeadDeclaresNoNodeDownAndFencedJobsGoOnWithoutARestart) {
  FaultCluster c;
  TrainJob t;
  ASSERT_NO_FATAL_FAILURE(StartTraining(c, t, TrainJobSpec{200, 10, "", /*max_restarts=*/0}));
  json sleeper = c.Submit({{"command", {"sleep", "300"}}, {"nodes", 1}, {"gpus_per_node", 1}, {"max_restarts", 0}});
  const int64_t sleeper_id = sleeper.value("id", int64_t{0});
  const std::vector<std::string> sleeper_env = {"COHORT_JOB_ID=" + std::to_string(sleeper_id), "COHORT_ATTEMPT=0",
                                                "COHORT_CHECKPOINT_DIR=" + c.CheckpointDir(sleeper_id)};
  ASSERT_TRUE(WaitUntil([&] { return !FindProcesses("sleep 300", sleeper_env).empty(); }, std::chrono::seconds(20)))
      << "the second job's task did not start; head log:\n" << c.HeadLog();
  const int64_t recorded = LastRecordedStep(t.record);

  const auto stopped_at = std::chrono::steady_clock::now();
  c.SignalHead(SIGSTOP);
  // The agents cannot reach the head: they fence (kill) their tasks within the fence timeout.
  EXPECT_TRUE(WaitUntil([&] { return TrainPids(t, 0).empty() && FindProcesses("sleep 300", sleeper_env).empty(); },
                        std::chrono::seconds(15)))
      << "the agents did not fence their tasks while the head was stopped";
  // The fault: the head stays stopped for twice the failure timeout (2 s).
  std::this_thread::sleep_until(stopped_at + std::chrono::seconds(4));
  c.SignalHead(SIGCONT);

  json back = c.WaitForJob(t.id, [](const json& j) {
    return j.value("attempt", 0) >= 1 && (j.value("state", "") == "RUNNING" || j.value("state", "") == "SUCCEEDED");
  }, "attempt 1 running", std::chrono::seconds(30));
  EXPECT_EQ(Restarts(back), 0) << "the fence the head caused counted as a restart: " << back.dump(2);
  json sleeping = c.WaitForJob(sleeper_id, [](const json& j) {
    return j.value("attempt", 0) >= 1 && j.value("state", "") == "RUNNING";
  }, "attempt 1 running", std::chrono::seconds(30));
  EXPECT_EQ(Restarts(sleeping), 0) << sleeping.dump(2);
  for (const char* n : {"node-a", "node-b", "node-c"}) EXPECT_EQ(c.NodeState(n), "UP") << n;

  json done = c.WaitForState(t.id, "SUCCEEDED", std::chrono::seconds(120));
  EXPECT_EQ(Restarts(done), 0) << done.dump(2);
  const std::string log = c.HeadLog();
  EXPECT_EQ(log.find(" is DOWN"), std::string::npos) << "a node was declared DOWN for the head's own gap:\n" << log;
  EXPECT_NE(log.find("the head did not listen for"), std::string::npos) << log;
  EXPECT_GT(MetricValue(c, "cohort_head_unheard_seconds_total"), 2.0);
  ExpectRecordResumedFromCheckpoints(c, t, 2, recorded);
}

TEST(HeadLagFaults, MostAgentsSilentAtOnceFailNoJobAndComeBack) {
  FaultCluster c;
  TrainJob t;
  ASSERT_NO_FATAL_FAILURE(StartTraining(c, t, TrainJobSpec{200, 10, "", /*max_restarts=*/0}, 4));
  const std::string v0 = c.NodeOfRank(t.id, 0), v1 = c.NodeOfRank(t.id, 1);
  ASSERT_FALSE(v0.empty() || v1.empty()) << c.Job(t.id).dump(2);
  std::string other;
  for (const char* n : {"node-a", "node-b", "node-c", "node-d"}) {
    if (n != v0 && n != v1 && other.empty()) other = n;
  }
  const std::vector<std::string> cut = {v0, v1, other};
  const int64_t recorded = LastRecordedStep(t.record);
  for (const auto& n : cut) c.agent(n).Signal(SIGSTOP);
  struct Cont {  // wakes the agents also when an assertion below fails
    FaultCluster& c;
    const std::vector<std::string>& cut;
    ~Cont() {
      for (const auto& n : cut) c.agent(n).Signal(SIGCONT);
    }
  } cont{c, cut};

  // Past the failure timeout the silent nodes are UNREACHABLE, not DOWN.
  for (const auto& n : cut) {
    EXPECT_TRUE(c.WaitForDisplayState(n, "UNREACHABLE", std::chrono::seconds(20))) << n << ":\n" << c.HeadLog();
  }
  EXPECT_EQ(MetricValue(c, "cohort_liveness_suspended"), 1);
  EXPECT_EQ(MetricValue(c, "cohort_liveness_silent_ratio"), 0.75);
  // Still so after another failure timeout: the zone holds.
  EXPECT_TRUE(WaitUntil([&] {
    auto r = c.client().Get("/v1/nodes/" + v0);
    return r && r->value("heartbeat_age_ms", int64_t{0}) > 4000;
  }, std::chrono::seconds(20)));
  for (const auto& n : cut) EXPECT_EQ(c.NodeState(n), "UP") << n;
  EXPECT_EQ(c.Job(t.id).value("state", ""), "RUNNING");
  EXPECT_EQ(c.Job(t.id).value("attempt", -1), 0);

  for (const auto& n : cut) c.agent(n).Signal(SIGCONT);
  for (const auto& n : cut) {
    EXPECT_TRUE(c.WaitForDisplayState(n, "UP", std::chrono::seconds(15))) << n << ":\n" << c.AgentLog(n);
  }
  EXPECT_TRUE(WaitUntil([&] { return MetricValue(c, "cohort_liveness_suspended") == 0; }, std::chrono::seconds(10)));
  json done = c.WaitForState(t.id, "SUCCEEDED", std::chrono::seconds(120));
  EXPECT_EQ(done.value("attempt", -1), 1) << done.dump(2);
  EXPECT_EQ(Restarts(done), 0) << "the fenced gang counted as a restart: " << done.dump(2);
  const std::string log = c.HeadLog();
  EXPECT_EQ(log.find(" is DOWN"), std::string::npos) << log;
  EXPECT_NE(log.find("3 of 4 UP nodes are silent at once"), std::string::npos) << log;
  EXPECT_NE(log.find("left the unhealthy zone"), std::string::npos) << log;
  ExpectRecordResumedFromCheckpoints(c, t, 2, recorded);
}

}  // namespace
}  // namespace cohort::testing
