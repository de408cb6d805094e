// Planned moves and elastic gangs under a running `cohort train` job:
//  - `cohort drain NODE --now` asks the job to checkpoint, then moves it off the node, and
//    the new attempt resumes from exactly that checkpoint (not the last periodic one);
//  - a head killed (-9) just after it accepted the drain still carries the move out;
//  - the job's checkpoint_signal reaches every task of a job that does not report;
//  - an elastic job (min_nodes 1) that loses a node continues on the other one with the
//    same global batch, and grows back to two nodes at a checkpoint once the node returns.
// Each checks the loss record: nothing lost beyond the checkpoint, nothing recorded twice.
#include <signal.h>

#include <gtest/gtest.h>

#include "fault_cluster.h"

namespace cohort::testing {
namespace {

// `drain --now` of rank 1's node under a training job that checkpoints on request; with
// `kill_head`, the head is killed (-9) just after it accepted the drain and started again.
// The job must move once, from the checkpoint it was asked for, and complete.
void DrainNowMovesFromTheRequestedCheckpoint(bool kill_head) {
  FaultCluster c;
  TrainJob t;
  TrainJobSpec spec;
  // A periodic checkpoint every 100 steps, so that the requested one is told from it; the
  // drain comes after the first (a recorded step the move must not lose). Steps: the
  // request is answered within a progress report or two (the head's restart and the
  // agents' return first, with kill_head: ~2 s, ~50 steps); 300 leave attempt 0 ~200.
  spec.steps = 300;
  spec.checkpoint_every = 100;
  spec.checkpoints_before_fault = 1;
  spec.checkpoint_signal = "USR1";
  spec.checkpoints_on_request = true;
  ASSERT_NO_FATAL_FAILURE(StartTraining(c, t, spec));
  const std::string node = c.NodeOfRank(t.id, 1);
  const int64_t recorded = LastRecordedStep(t.record);

  auto drained = c.client().Post("/v1/nodes/" + node + "/drain", json{{"now", true}, {"timeout_s", 60}});
  ASSERT_TRUE(drained.has_value()) << drained.error().message;
  EXPECT_EQ(drained->value("display_state", ""), "DRAINING");
  if (kill_head) {
    c.KillHead(SIGKILL);
    ASSERT_NO_FATAL_FAILURE(c.StartHead());
    ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(3));
  }

  json moved = c.WaitForJob(t.id, RunningWithout(node), "running again without " + node, std::chrono::seconds(60));
  EXPECT_EQ(moved.value("moves", 0), 1) << moved.dump(2);
  EXPECT_EQ(moved.value("attempt", 0), 1) << "a move must not need a failed attempt first: " << moved.dump(2);
  EXPECT_FALSE(moved.contains("move")) << "the request ends with the attempt: " << moved.dump(2);
  const int64_t step = MovedAtStep(moved, 0);
  ASSERT_GT(step, recorded) << "the move did not wait for a new checkpoint: " << moved.dump(2);
  EXPECT_NE(step % spec.checkpoint_every, 0) << "expected the requested checkpoint, not a periodic one (this can "
                                                 "only fail by a 1-in-100 coincidence): "
                                              << moved.dump(2);
  json done = c.WaitForState(t.id, "SUCCEEDED", std::chrono::seconds(120));
  EXPECT_EQ(done.value("attempt", -1), 1);
  auto first = ExpectConsistentRecord(t, 2, recorded);
  ExpectResumedFromTheRequestedCheckpoint(c, t, 1, step, first);
  // The signal took the other path too: rank 1's shim delivered it and the trainer saw it.
  // (After a head kill the restarted head's reply to a progress report may ask first, and
  // the move can end attempt 0 before any agent delivers the signal.)
  if (!kill_head) {
    EXPECT_NE(c.Logs(t.id, 1, 0).find("SIGUSR1"), std::string::npos) << c.Logs(t.id, 1, 0);
  }
}

TEST(PlannedMoves, DrainNowMovesTheJobFromTheCheckpointItAskedFor) {
  DrainNowMovesFromTheRequestedCheckpoint(/*kill_head=*/false);
}

// The request is stored with the job, so the restarted head still asks for the checkpoint
// and moves the job from it.
TEST(PlannedMoves, DrainNowSurvivesAHeadRestart) { DrainNowMovesFromTheRequestedCheckpoint(/*kill_head=*/true); }

TEST(PlannedMoves, CheckpointSignalReachesEveryTaskAndTheDeadlineMovesASilentJob) {
  FaultCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  for (const char* n : {"node-a", "node-b", "node-c"}) ASSERT_NO_FATAL_FAILURE(c.StartAgent(n));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(3));
  // Writes a line per USR1 it receives, and never reports progress.
  const std::string marks = c.dir() + "/marks";
  std::filesystem::create_directories(marks);
  json job = c.Submit({{"command",
                        {"sh", "-c",
                         "trap 'echo usr1 >> " + marks + "/rank-$RANK-attempt-$COHORT_ATTEMPT' USR1; "
                         "touch " + marks + "/ready-$RANK; while true; do sleep 0.05; done"}},
                       {"nodes", 2},
                       {"gpus_per_node", 1},
                       {"checkpoint_signal", "SIGUSR1"}});
  const int64_t id = job.value("id", int64_t{0});
  ASSERT_GT(id, 0) << job.dump();
  c.WaitForState(id, "RUNNING", std::chrono::seconds(30));
  const std::string node = c.NodeOfRank(id, 0);
  // Both shells have set their trap (the signal's default action would end them).
  for (int rank = 0; rank < 2; ++rank) {
    const std::string ready = marks + "/ready-" + std::to_string(rank);
    ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(ready); }, std::chrono::seconds(30)))
        << "rank " << rank << " did not start\n" << c.HeadLog();
  }

  auto drained = c.client().Post("/v1/nodes/" + node + "/drain", json{{"now", true}, {"timeout_s", 2}});
  ASSERT_TRUE(drained.has_value()) << drained.error().message;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = marks + "/rank-" + std::to_string(rank) + "-attempt-0";
    EXPECT_TRUE(WaitUntil([&] { return std::filesystem::exists(path); }, std::chrono::seconds(10)))
        << "rank " << rank << " never got SIGUSR1\n" << c.AgentLog(c.NodeOfRank(id, rank));
  }
  json moved = c.WaitForJob(id, RunningWithout(node), "moved off " + node, std::chrono::seconds(30));
  EXPECT_EQ(moved.value("moves", 0), 1) << moved.dump(2);
  ASSERT_FALSE(moved["history"].empty());
  EXPECT_NE(moved["history"][0].value("end_reason", "").find("no new checkpoint reported within 2.0s"),
            std::string::npos)
      << moved.dump(2);
  // Once per task: still one line each.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(ReadFile(marks + "/rank-" + std::to_string(rank) + "-attempt-0"), "usr1\n");
  }
  auto cancelled = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  EXPECT_TRUE(cancelled.has_value());
}

TEST(PlannedMoves, ElasticJobShrinksOnANodeLossAndGrowsBackWhenItReturns) {
  FaultCluster c;
  TrainJob t;
  TrainJobSpec spec;
  // Steps: the node is lost after the first checkpoint (50); alone the job takes twice as
  // long a step, and it grows back at its first checkpoint after the node returns (100 or
  // 150). 250 leave the one-node attempt over 100 steps for that, and the grown one ~100.
  spec.steps = 250;
  spec.checkpoint_every = 50;
  spec.checkpoints_before_fault = 1;
  spec.min_nodes = 1;
  ASSERT_NO_FATAL_FAILURE(StartTraining(c, t, spec, /*agents=*/2));
  const std::string victim = c.NodeOfRank(t.id, 1);
  const int64_t recorded = LastRecordedStep(t.record);
  c.agent(victim).Signal(SIGKILL);
  (void)c.agent(victim).Wait();

  // It goes on alone: one node, the same global batch through twice the accumulation.
  json small = c.WaitForJob(
      t.id,
      [](const json& j) {
        return j.value("state", "") == "RUNNING" && j.value("attempt", 0) >= 1 &&
               j["allocation"]["nodes"].size() == 1;
      },
      "running on one node", std::chrono::seconds(30));
  const int small_attempt = small.value("attempt", 0);
  ASSERT_TRUE(WaitUntil([&] { return c.Logs(t.id, 0, small_attempt).find("batch: 1 ranks x 2 accumulation") !=
                                     std::string::npos; },
                        std::chrono::seconds(30)))
      << c.Logs(t.id, 0, small_attempt);

  // The node comes back: at its next checkpoint the job moves to two nodes again.
  ASSERT_NO_FATAL_FAILURE(c.StartAgent(victim));
  json grown = c.WaitForJob(
      t.id,
      [&](const json& j) {
        return (j.value("state", "") == "RUNNING" || j.value("state", "") == "SUCCEEDED") &&
               j.value("attempt", 0) > small_attempt && j["allocation"]["nodes"].size() == 2;
      },
      "running on two nodes again", std::chrono::seconds(60));
  EXPECT_GE(grown.value("moves", 0), 1) << grown.dump(2);
  const int64_t step = MovedAtStep(grown, small_attempt);
  EXPECT_GT(step, 0) << grown.dump(2);
  EXPECT_EQ(step % spec.checkpoint_every, 0) << "a grow waits for the job's own checkpoint: " << grown.dump(2);
  json done = c.WaitForState(t.id, "SUCCEEDED", std::chrono::seconds(120));
  EXPECT_EQ(done["allocation"]["nodes"].size(), 2u);
  // The one-node attempt goes on training until the stop reaches it. A stop that lands two
  // or more steps past the checkpoint at `step` (under load: the head's stop goes through
  // the agent's heartbeat, the trainer steps on meanwhile) has the trainer keep those steps
  // with a checkpoint of its own before it exits (trainer.cc, MaybeCheckpoint), and the
  // grown attempt resumes from that one: nothing lost, nothing recorded twice, but not a
  // periodic step. Any other first step is wrong.
  t.spec.checkpoints_on_request = true;
  auto first = ExpectConsistentRecord(t, 3, recorded);
  EXPECT_EQ(first[small_attempt] % spec.checkpoint_every, 1) << "the shrink resumes from a periodic checkpoint";
  const int grown_attempt = grown.value("attempt", 0);
  const int64_t resumed = first[grown_attempt] - 1;
  EXPECT_GE(resumed, step) << "the grown attempt resumed from before the checkpoint it waited for";
  ExpectResumedFrom(c, t, grown_attempt, resumed);
  if (resumed != step) {
    const std::string stopped = "stopping at step " + std::to_string(resumed) + " of " + std::to_string(spec.steps) +
                                ": SIGTERM, after its checkpoint";
    EXPECT_NE(c.Logs(t.id, 0, small_attempt).find(stopped), std::string::npos)
        << "the grown attempt resumed from step " << resumed << ", neither the checkpoint the grow waited for (" << step
        << ") nor the one written at the stop:\n"
        << c.Logs(t.id, 0, small_attempt);
  }
}

}  // namespace
}  // namespace cohort::testing
