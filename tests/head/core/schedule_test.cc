// Scheduling passes: what the scheduler sees (busy and stopping resources, unhealthy
// GPUs) and what its decision changes.
#include "core_test_util.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

TEST_F(CoreTest, NoPassRunsWithAnEmptyQueue) {
  Register(Reg("n1"));
  PassResult r = core::Schedule(state_, ctx_, now_);
  EXPECT_FALSE(r.ran);
  EXPECT_TRUE(r.effects.log.empty());
}

TEST_F(CoreTest, APassStartsWhatFitsAndRecordsWhyTheRestWaits) {
  Register(Reg("n1", 2));
  const api::JobId a = Submit(Spec(1, 2));
  const api::JobId b = Submit(Spec(1, 1));
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(a).state, JobState::kRunning);
  EXPECT_EQ(Job(a).history.size(), 1u);
  EXPECT_EQ(fx_.queue_wait_seconds.size(), 1u);
  EXPECT_TRUE(fx_.jobs_to_store.contains(a));
  EXPECT_EQ(Job(b).state, JobState::kPending);
  const std::string why =
      "needs 1 node with 1 free GPU; 0 available; reserved on n1, start unknown (waiting on jobs without a time limit)";
  EXPECT_EQ(state_.pending_reasons.at(b), why);
  EXPECT_EQ(GetJob(state_, b)->reason, why);
  EXPECT_EQ(Job(b).reason, "waiting for the scheduler") << "the record keeps the submit-time text";
}

TEST_F(CoreTest, TheNextAttemptWaitsUntilTheAgentConfirmsThePreviousOneGone) {
  Register(Reg("n1", 1));
  Register(Reg("n2", 1));
  const api::JobId id = Submit(Spec(2, 1, /*max_restarts=*/1));
  ASSERT_EQ(Pass(), 1);
  Beat("n2", {Running(id, 0, 1, {0})});
  Beat("n1", {Exited(id, 0, 0, 1)});  // rank 0 fails while rank 1 still runs on n2
  ASSERT_EQ(Job(id).state, JobState::kPending);
  ASSERT_EQ(Job(id).attempt, 1);
  EXPECT_TRUE(state_.runtime.at("n1").stopping.empty()) << "every task there has exited";
  ASSERT_EQ(state_.runtime.at("n2").stopping.size(), 1u);
  EXPECT_EQ(Pass(), 0);
  EXPECT_EQ(state_.pending_reasons.at(id), "waiting for attempt 0 on n2 to stop");
  // n2 has not applied the version that dropped attempt 0 yet: still fenced.
  api::Heartbeat hb;
  hb.incarnation = "inc1";
  hb.applied_version = state_.runtime.at("n2").desired_version - 1;
  ASSERT_TRUE(core::Heartbeat(state_, ctx_, "n2", hb, now_).has_value());
  EXPECT_EQ(state_.runtime.at("n2").stopping.size(), 1u);
  Beat("n2", {});  // applied, nothing running: confirmed
  EXPECT_TRUE(state_.runtime.at("n2").stopping.empty());
  EXPECT_TRUE(fx_.schedule);
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  EXPECT_EQ(Job(id).attempt, 1);
}

TEST_F(CoreTest, UnhealthyGpusAreNeverFree) {
  Register(Reg("n1", 2));
  state_.nodes.at("n1").gpus[0].healthy = false;
  SchedulerInput in = BuildSchedulerInput(state_, now_);
  ASSERT_EQ(in.snapshot.nodes.size(), 1u);
  EXPECT_EQ(in.snapshot.nodes[0].free_gpus, std::vector<int>{1});
}

TEST_F(CoreTest, ATaskOfNoCurrentAttemptStillHoldsItsGpus) {
  Register(Reg("n1", 2));
  Beat("n1", {Running(77, 3, 0, {1})});  // a task the head does not know (e.g. before a restart)
  SchedulerInput in = BuildSchedulerInput(state_, now_);
  EXPECT_EQ(in.snapshot.nodes[0].free_gpus, std::vector<int>{0});
}

TEST_F(CoreTest, AnElasticJobBelowItsSizeIsAskedToGrowWhenNodesFreeUp) {
  Register(Reg("n1", 1));
  api::JobSpec spec = Spec(2, 1);
  spec.min_nodes = 1;
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  ASSERT_EQ(Job(id).allocation.nodes.size(), 1u);
  EXPECT_FALSE(Job(id).move.has_value());
  Register(Reg("n2", 1));
  Pass();
  EXPECT_FALSE(Job(id).move.has_value()) << "no report from the attempt yet";
  ProgressPoint p;
  p.checkpoint_step = 40;
  progress_[{id, 0}] = p;
  Pass();
  ASSERT_TRUE(Job(id).move.has_value());
  EXPECT_TRUE(Job(id).move->grow);
  EXPECT_EQ(Job(id).move->baseline_checkpoint, 40);
  EXPECT_TRUE(fx_.jobs_to_store.contains(id));
  // Another job waiting withdraws the request.
  Submit(Spec(1, 1));
  Pass();
  EXPECT_FALSE(Job(id).move.has_value());
}

TEST_F(CoreTest, AGrowWaitsForACheckpointPastTheOneTheAttemptResumedFrom) {
  Register(Reg("n1", 1));
  Register(Reg("n2", 1));
  api::JobSpec spec = Spec(2, 1, /*max_restarts=*/1);
  spec.min_nodes = 1;
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  ProgressPoint before;
  before.step = 60;
  before.checkpoint_step = 50;
  progress_[{id, 0}] = before;
  // n2 goes silent: the job restarts small on n1 as attempt 1.
  Advance(2000);
  Beat("n1", {Running(id, 0, 0)});
  Advance(1500);
  CheckLiveness(state_, ctx_, now_);
  ASSERT_EQ(Job(id).attempt, 1);
  Beat("n1", {});
  ASSERT_EQ(Pass(), 1);
  ASSERT_EQ(Job(id).allocation.nodes.size(), 1u);
  // n2 is back before attempt 1 has reported anything, and attempt 0 wrote a checkpoint
  // at step 100 that it never reported: the grow waits for attempt 1's first report.
  Beat("n2");
  Pass();
  EXPECT_FALSE(Job(id).move.has_value());
  ProgressPoint first;
  first.step = 101;
  first.checkpoint_step = 100;  // the checkpoint it resumed from
  progress_[{id, 1}] = first;
  ProgressResult resumed = OnProgress(state_, ctx_, id, 1, 100, now_);
  EXPECT_EQ(Job(id).attempt, 1);
  EXPECT_FALSE(resumed.checkpoint) << "a grow does not ask for a checkpoint";
  Pass();
  ASSERT_TRUE(Job(id).move.has_value());
  EXPECT_EQ(Job(id).move->baseline_checkpoint, 100);
  OnProgress(state_, ctx_, id, 1, 100, now_);
  EXPECT_EQ(Job(id).attempt, 1) << "moved at the checkpoint it resumed from";
  OnProgress(state_, ctx_, id, 1, 150, now_);
  EXPECT_EQ(Job(id).attempt, 2);
  EXPECT_EQ(Job(id).moves, 1);
}

}  // namespace
}  // namespace cohort::head::core::testing
