// Service replicas (JobSpec::service) in the core's lifecycle: kept running however they
// end, restarts not counted; only a cancellation ends them.
#include <gtest/gtest.h>

#include "head/core/liveness.h"
#include "head/core/submit.h"
#include "core_test_util.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;
using api::NodeState;

api::JobSpec Replica() {
  api::JobSpec s = Spec(1, 1);
  s.service = "chat";
  s.service_model = "tiny";
  return s;
}

TEST_F(CoreTest, AReplicaThatExitsZeroRunsAgainAndNeverSucceeds) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Replica());
  ASSERT_EQ(Pass(), 1);
  Beat("n1", {Exited(id, 0, 0, 0)});
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).attempt, 1);
  EXPECT_EQ(Job(id).reason, "replica restarting after: rank 0 on n1 exited 0 (attempt 1)");
  Beat("n1");  // the agent confirms attempt 0 gone
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  EXPECT_EQ(state_.counters.transitions.count({"running", "succeeded"}), 0u);
}

TEST_F(CoreTest, AFailingReplicaRestartsWithoutLimit) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Replica());  // max_restarts 0
  for (int attempt = 0; attempt < 5; ++attempt) {
    ASSERT_EQ(Pass(), 1) << "attempt " << attempt;
    Beat("n1", {Exited(id, attempt, 0, 1)});
    ASSERT_EQ(Job(id).state, JobState::kPending) << Job(id).reason;
    Beat("n1");
  }
  EXPECT_EQ(Job(id).attempt, 5);
  EXPECT_EQ(state_.counters.transitions.count({"running", "failed"}), 0u);
}

TEST_F(CoreTest, AReplicaOnALostNodeIsPlacedElsewhere) {
  Register(Reg("n1"));
  Register(Reg("n2"));
  const api::JobId id = Submit(Replica());
  ASSERT_EQ(Pass(), 1);
  const std::string first = Job(id).allocation.nodes.front().node;
  const std::string other = first == "n1" ? "n2" : "n1";
  Advance(3001);
  Beat(other);
  fx_ = CheckLiveness(state_, ctx_, now_);
  ASSERT_EQ(state_.nodes.at(first).state, NodeState::kDown);
  EXPECT_EQ(Job(id).state, JobState::kPending);
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  EXPECT_EQ(Job(id).allocation.nodes.front().node, other);
}

TEST_F(CoreTest, ACancelledReplicaEnds) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Replica());
  ASSERT_EQ(Pass(), 1);
  auto r = Cancel(state_, ctx_, id, now_);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(Job(id).state, JobState::kCancelled);
}

}  // namespace
}  // namespace cohort::head::core::testing
