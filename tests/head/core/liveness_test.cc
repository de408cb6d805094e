// Liveness, time limits, hung attempts and overdue moves, on a clock the test moves.
#include "core_test_util.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;
using api::NodeState;

TEST_F(CoreTest, ANodeSilentForTheFailureTimeoutIsDownAndItsGangsAreRequeued) {
  Register(Reg("n1"));
  Register(Reg("n2"));
  const api::JobId id = Submit(Spec(2, 1, /*max_restarts=*/1));
  ASSERT_EQ(Pass(), 1);
  Advance(3000);
  Beat("n2", {Running(id, 0, 1)});
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kUp) << "exactly the timeout is not yet silent";
  Advance(1);
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kDown);
  EXPECT_EQ(state_.nodes.at("n1").reason, "no heartbeat for 3.0s");
  EXPECT_EQ(state_.nodes.at("n2").state, NodeState::kUp);
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).history.back().end_reason, "node n1 went down (no heartbeat for 3.0s)");
  EXPECT_TRUE(fx_.nodes_to_store.contains("n1"));
  // n1's part needs no fence (it is DOWN; its agent fenced itself); n2's does.
  EXPECT_TRUE(state_.runtime.at("n1").stopping.empty());
  ASSERT_EQ(state_.runtime.at("n2").stopping.size(), 1u);
}

TEST_F(CoreTest, ATimeLimitEndsTheJobAsTimeout) {
  Register(Reg("n1"));
  api::JobSpec spec = Spec(1, 1);
  spec.time_limit_s = 10;
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  for (int i = 0; i < 10; ++i) {
    Advance(1000);
    Beat("n1", {Running(id, 0, 0)});
  }
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  Advance(1);
  Beat("n1", {Running(id, 0, 0)});
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(Job(id).state, JobState::kTimeout) << "TIMEOUT, as Slurm's, not FAILED";
  EXPECT_EQ(Job(id).reason, "time limit of 10.0s exceeded");
}

TEST_F(CoreTest, AnAttemptWithoutProgressForItsTimeoutIsHung) {
  Register(Reg("n1"));
  api::JobSpec spec = Spec(1, 1, /*max_restarts=*/1);
  spec.progress_timeout_s = 60;
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  Advance(50'000);
  ProgressPoint p;
  p.time_ms = now_.unix_ms;
  p.step = 7;
  progress_[{id, 0}] = p;
  Advance(59'000);
  fx_ = CheckProgress(state_, ctx_, now_);
  EXPECT_EQ(Job(id).state, JobState::kRunning) << "the report restarted the clock";
  Advance(1'001);
  fx_ = CheckProgress(state_, ctx_, now_);
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).attempt, 1);
  EXPECT_TRUE(Job(id).history.back().end_reason.starts_with(
      "no progress reported for 60s (progress_timeout_s); last step 7 at"));
  EXPECT_TRUE(Logged("is hung"));
}

TEST_F(CoreTest, AMovePastItsDeadlineHappensWithoutACheckpoint) {
  Register(Reg("n1"));
  Register(Reg("n2"));
  const api::JobId id = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  const std::string node = Job(id).allocation.nodes[0].node;
  ASSERT_TRUE(Drain(state_, ctx_, node, "", /*now_flag=*/true, 5000, now_).has_value());
  Advance(5000);
  Beat("n1", {Running(id, 0, 0)});
  Beat("n2", {Running(id, 0, 0)});
  fx_ = CheckLiveness(state_, ctx_, now_);
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).moves, 1);
  EXPECT_EQ(Job(id).reason, fmt::format("moved: node {} drained now; no new checkpoint reported within 5.0s (work "
                                        "since the last checkpoint is redone)",
                                        node));
}

}  // namespace
}  // namespace cohort::head::core::testing
