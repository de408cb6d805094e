// Removing a node (core/remove_node.h): never an alive one; a DOWN one is forgotten (record
// deleted, runtime and shape gone, a pass asked for); one holding work only when forced,
// its gangs failing as on a node that went down; the name may register again.
#include "core_test_util.h"
#include "head/core/remove_node.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

class RemoveNodeTest : public CoreTest {};

TEST_F(RemoveNodeTest, AnAliveNodeIsNeverRemovedForcedOrNot) {
  Register(Reg("n1"));
  for (bool force : {false, true}) {
    auto r = RemoveNode(state_, ctx_, "n1", force, now_);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kFailedPrecondition);
    EXPECT_NE(r.error().message.find("is alive"), std::string::npos) << r.error().message;
  }
  EXPECT_TRUE(state_.nodes.contains("n1"));
  EXPECT_EQ(RemoveNode(state_, ctx_, "ghost", false, now_).error().code, ErrorCode::kNotFound);
}

TEST_F(RemoveNodeTest, ADownNodeIsForgottenAndItsNameMayJoinAgain) {
  Register(Reg("n1"));
  Register(Reg("n2"));
  Advance(2000);
  Beat("n2");
  Advance(2000);
  (void)CheckLiveness(state_, ctx_, now_);
  ASSERT_EQ(state_.nodes.at("n1").state, api::NodeState::kDown);
  ASSERT_TRUE(CanRemoveNode(state_, ctx_, "n1", false, now_));
  ASSERT_EQ(state_.node_shapes[std::make_pair(2, 8)], 2);
  auto fx = RemoveNode(state_, ctx_, "n1", false, now_);
  ASSERT_TRUE(fx) << fx.error().message;
  EXPECT_FALSE(state_.nodes.contains("n1"));
  EXPECT_FALSE(state_.runtime.contains("n1"));
  EXPECT_EQ(state_.node_shapes[std::make_pair(2, 8)], 1);
  EXPECT_EQ(fx->nodes_to_remove, std::set<std::string>{"n1"});
  EXPECT_TRUE(fx->nodes_to_store.empty());
  EXPECT_TRUE(fx->schedule);
  EXPECT_EQ(RemoveNode(state_, ctx_, "n1", false, now_).error().code, ErrorCode::kNotFound);
  // Its old agent's heartbeat finds no node.
  api::Heartbeat hb;
  hb.incarnation = "inc1";
  EXPECT_EQ(core::Heartbeat(state_, ctx_, "n1", hb, now_).error().code, ErrorCode::kNotFound);
  // The name registers again as a new node.
  Register(Reg("n1", 2, "inc2"));
  EXPECT_TRUE(Logged("node n1 registered")) << "a new node, not a returning one";
  EXPECT_EQ(state_.nodes.at("n1").incarnation, "inc2");
}

TEST_F(RemoveNodeTest, ASilentNodeHoldingAGangGoesOnlyWhenForcedAndTheGangIsRequeued) {
  Register(Reg("n1", 1));
  const api::JobId id = Submit(Spec(1, 1, /*max_restarts=*/1));
  ASSERT_EQ(Pass(), 1);
  ASSERT_EQ(Job(id).state, JobState::kRunning);
  Advance(3001);  // silent past the failure timeout; no liveness check has marked it DOWN
  auto refused = RemoveNode(state_, ctx_, "n1", false, now_);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(refused.error().message.find("still holds job " + std::to_string(id)), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("--force"), std::string::npos);
  EXPECT_TRUE(state_.nodes.contains("n1"));
  auto fx = RemoveNode(state_, ctx_, "n1", true, now_);
  ASSERT_TRUE(fx) << fx.error().message;
  EXPECT_FALSE(state_.nodes.contains("n1"));
  EXPECT_FALSE(state_.node_jobs.contains("n1"));
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).attempt, 1);
  EXPECT_NE(Job(id).reason.find("node n1 was removed"), std::string::npos) << Job(id).reason;
  EXPECT_TRUE(fx->jobs_to_store.contains(id));
  EXPECT_NE(Pass(), 1) << "nowhere to run it now";
}

}  // namespace
}  // namespace cohort::head::core::testing
