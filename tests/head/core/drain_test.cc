// drain, drain --now and the moves that follow a checkpoint; resume.
#include "core_test_util.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

class DrainTest : public CoreTest {
 protected:
  void SetUp() override {
    Register(Reg("n1", 1));
    Register(Reg("n2", 1));
    id_ = Submit(Spec(1, 1));
    ASSERT_EQ(Pass(), 1);
    node_ = Job(id_).allocation.nodes[0].node;
  }
  api::JobId id_ = 0;
  std::string node_;
};

TEST_F(DrainTest, DrainNowAsksTheJobToCheckpointPastWhatItReported) {
  ProgressPoint p;
  p.step = 50;
  p.checkpoint_step = 40;
  progress_[{id_, 0}] = p;
  auto fx = Drain(state_, ctx_, node_, "bad fan", /*now_flag=*/true, 60'000, now_);
  ASSERT_TRUE(fx.has_value());
  EXPECT_TRUE(state_.nodes.at(node_).drain);
  EXPECT_EQ(state_.nodes.at(node_).drain_reason, "bad fan");
  ASSERT_TRUE(Job(id_).move.has_value());
  EXPECT_EQ(Job(id_).move->baseline_checkpoint, 50);
  EXPECT_EQ(Job(id_).move->deadline_ms, now_.unix_ms + 60'000);
  // Drained again without a reason (drain --now after drain --reason): the reason stays.
  ASSERT_TRUE(Drain(state_, ctx_, node_, "", /*now_flag=*/false, 60'000, now_).has_value());
  EXPECT_EQ(state_.nodes.at(node_).drain_reason, "bad fan");
  EXPECT_TRUE(fx->jobs_to_store.contains(id_));
  EXPECT_TRUE(fx->nodes_to_store.contains(node_));
  EXPECT_TRUE(fx->wake.contains("http://agent-" + node_));
  // The agent delivers the checkpoint signal from the reply.
  api::HeartbeatReply reply = Beat(node_, {Running(id_, 0, 0)});
  ASSERT_EQ(reply.tasks.size(), 1u);
  EXPECT_TRUE(reply.tasks[0].checkpoint_requested);
}

TEST_F(DrainTest, TheJobMovesAtTheFirstNewerCheckpoint) {
  ASSERT_TRUE(Drain(state_, ctx_, node_, "", true, 60'000, now_).has_value());
  EXPECT_EQ(state_.nodes.at(node_).drain_reason, "drained by request");
  ProgressResult older = OnProgress(state_, ctx_, id_, 0, std::nullopt, now_);
  EXPECT_TRUE(older.checkpoint) << "no checkpoint yet: keep asking";
  EXPECT_EQ(Job(id_).state, JobState::kRunning);
  Advance(2500);
  ProgressResult r = OnProgress(state_, ctx_, id_, 0, 3, now_);
  EXPECT_FALSE(r.checkpoint);
  EXPECT_EQ(Job(id_).state, JobState::kPending);
  EXPECT_EQ(Job(id_).moves, 1);
  EXPECT_EQ(Job(id_).attempt, 1);
  EXPECT_EQ(Job(id_).reason,
            fmt::format("moved: node {} drained now; checkpoint at step 3 written 2.5s after the request", node_));
  EXPECT_FALSE(Job(id_).move.has_value());
  // Reports of the ended attempt change nothing.
  ProgressResult stale = OnProgress(state_, ctx_, id_, 0, 9, now_);
  EXPECT_FALSE(stale.checkpoint);
  EXPECT_TRUE(stale.effects.jobs_to_store.empty());
}

// A job that exits with a failure once asked to checkpoint (here: killed by SIGTERM, its
// checkpoint signal) moves as drain --now asked; it is not a failure of the job.
TEST_F(DrainTest, AJobThatStopsOnItsCheckpointSignalMovesInsteadOfFailing) {
  ASSERT_TRUE(Drain(state_, ctx_, node_, "", true, 60'000, now_).has_value());
  Advance(1000);
  api::TaskReport killed = Exited(id_, 0, 0, 0);
  killed.signal = 15;
  Beat(node_, {killed});
  EXPECT_EQ(Job(id_).state, JobState::kPending) << Job(id_).reason;
  EXPECT_EQ(Job(id_).moves, 1);
  EXPECT_EQ(Job(id_).attempt, 1);
  EXPECT_EQ(Job(id_).reason, fmt::format("moved: node {0} drained now; it stopped 1.0s after the request: rank 0 on "
                                         "{0} was killed by signal 15",
                                         node_));
  EXPECT_EQ(Job(id_).exit_code, std::nullopt);
}

TEST_F(DrainTest, ResumeClearsTheDrainAndUnhealthyMarks) {
  ASSERT_TRUE(Drain(state_, ctx_, node_, "x", false, 0, now_).has_value());
  state_.nodes.at(node_).gpus[0].healthy = false;
  state_.nodes.at(node_).gpus[0].health_reason = "XID 48";
  auto fx = Resume(state_, ctx_, node_, now_);
  ASSERT_TRUE(fx.has_value());
  EXPECT_FALSE(state_.nodes.at(node_).drain);
  EXPECT_TRUE(state_.nodes.at(node_).gpus[0].healthy);
  EXPECT_TRUE(fx->schedule);
  EXPECT_FALSE(Resume(state_, ctx_, "nope", now_).has_value());
  EXPECT_FALSE(Drain(state_, ctx_, "nope", "", false, 0, now_).has_value());
}

}  // namespace
}  // namespace cohort::head::core::testing
