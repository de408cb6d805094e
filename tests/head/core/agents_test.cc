// The agent protocol's transitions: registration, heartbeats, exits, lost tasks.
#include "core_test_util.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;
using api::NodeState;

TEST_F(CoreTest, RegisterStoresTheNodeAndAsksForAPass) {
  Register(Reg("n1"));
  EXPECT_EQ(fx_.nodes_to_store, std::set<std::string>{"n1"});
  EXPECT_TRUE(fx_.schedule);
  EXPECT_TRUE(Logged("node n1 registered: 2 GPU(s), 8 CPU(s)"));
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kUp);
  EXPECT_EQ(state_.runtime.at("n1").last_seen_mono_ms, now_.mono_ms);
}

TEST_F(CoreTest, AnotherLiveAgentCannotTakeTheNameAndNothingChanges) {
  Register(Reg("n1"));
  Advance(1000);
  auto r = core::Register(state_, ctx_, Reg("n1", 2, "intruder"), now_);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(state_.nodes.at("n1").incarnation, "inc1");
}

TEST_F(CoreTest, ANewAgentAfterTheOldOneWentSilentFailsItsGangsAndKeepsUnhealthyMarks) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Spec(1, 1, /*max_restarts=*/1));
  ASSERT_EQ(Pass(), 1);
  state_.nodes.at("n1").gpus[1].healthy = false;
  state_.nodes.at("n1").gpus[1].health_reason = "XID 79";
  Advance(4000);  // past the failure timeout: the old agent is gone
  Register(Reg("n1", 2, "inc2"));
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).attempt, 1);
  EXPECT_EQ(Job(id).history.back().end_reason, "node n1 restarted: its agent's tasks are gone");
  EXPECT_FALSE(state_.nodes.at("n1").gpus[1].healthy);
  EXPECT_EQ(state_.nodes.at("n1").gpus[1].health_reason, "XID 79");
  EXPECT_TRUE(fx_.jobs_to_store.contains(id));
  EXPECT_EQ(fx_.drop_rendezvous, std::vector<api::JobId>{id});
}

TEST_F(CoreTest, HeartbeatsFromUnknownNodesOrOldIncarnationsChangeNothing) {
  Register(Reg("n1"));
  api::Heartbeat hb;
  hb.incarnation = "inc1";
  auto unknown = core::Heartbeat(state_, ctx_, "nx", hb, now_);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  hb.incarnation = "old";
  Advance(2000);
  auto stale = core::Heartbeat(state_, ctx_, "n1", hb, now_);
  ASSERT_FALSE(stale.has_value());
  EXPECT_EQ(stale.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(state_.counters.heartbeats, 0u);
  EXPECT_EQ(state_.runtime.at("n1").last_seen_mono_ms, now_.mono_ms - 2000);
}

TEST_F(CoreTest, AHeartbeatBringsADownNodeBackUp) {
  Register(Reg("n1"));
  Advance(3500);
  CheckLiveness(state_, ctx_, now_);
  ASSERT_EQ(state_.nodes.at("n1").state, NodeState::kDown);
  Beat("n1");
  EXPECT_EQ(state_.nodes.at("n1").state, NodeState::kUp);
  EXPECT_TRUE(fx_.nodes_to_store.contains("n1"));
  EXPECT_TRUE(fx_.schedule);
  EXPECT_TRUE(Logged("node n1 is UP again"));
}

TEST_F(CoreTest, TheReplyCarriesEveryTaskWithTheJobContractEnvironment) {
  Register(Reg("n1", 4));
  api::JobSpec spec = Spec(1, 4);
  spec.tasks_per_node = 2;
  spec.env = {{"EXTRA", "1"}};
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  EXPECT_TRUE(fx_.wake.contains("http://agent-n1"));
  // The agent's first heartbeat after the wake-up: it has not applied the new version yet.
  api::Heartbeat hb;
  hb.incarnation = "inc1";
  auto r = core::Heartbeat(state_, ctx_, "n1", hb, now_);
  ASSERT_TRUE(r.has_value());
  const api::HeartbeatReply& reply = r->reply;
  ASSERT_EQ(reply.tasks.size(), 2u);
  EXPECT_EQ(reply.version, state_.runtime.at("n1").desired_version);
  const auto& env = reply.tasks[1].env;
  EXPECT_EQ(env.at("RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  ASSERT_EQ(reply.tasks[1].gpus.size(), 2u);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), fmt::format("{},{}", reply.tasks[1].gpus[0], reply.tasks[1].gpus[1]));
  EXPECT_EQ(env.at("COHORT_RENDEZVOUS"), fmt::format("http://head:8470/v1/rendezvous/tok-{}-0", id));
  EXPECT_EQ(env.at("COHORT_REPORT"), fmt::format("http://head:8470/v1/report/tok-{}-0", id));
  EXPECT_EQ(env.at("COHORT_CHECKPOINT_DIR"), fmt::format("/ckpt/job-{}", id));
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(env.at("EXTRA"), "1");
}

// A task the heartbeat reports goes back as its key alone: its environment (tokens, the
// CA) travels once, in the reply that starts it, not in every reply while it runs. The
// rank the agent did not report still gets its whole launch.
TEST_F(CoreTest, TheReplyLeavesOutTheLaunchOfTasksTheAgentReportsRunning) {
  Register(Reg("n1", 4));
  api::JobSpec spec = Spec(1, 4);
  spec.tasks_per_node = 2;
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  api::Heartbeat hb;
  hb.incarnation = "inc1";
  // Rank 1 is reported for an attempt the head does not run: not a match.
  hb.tasks = {Running(id, 0, 0), Running(id, 7, 1)};
  auto r = core::Heartbeat(state_, ctx_, "n1", hb, now_);
  ASSERT_TRUE(r.has_value());
  const auto& tasks = r->reply.tasks;
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].rank, 0);
  EXPECT_TRUE(tasks[0].command.empty());
  EXPECT_TRUE(tasks[0].env.empty());
  EXPECT_EQ(tasks[0].gpus.size(), 2u);
  EXPECT_EQ(tasks[1].rank, 1);
  EXPECT_EQ(tasks[1].command, spec.command);
  EXPECT_EQ(tasks[1].env.at("RANK"), "1");
  // On the wire: no command, no env; and it decodes back the same.
  const json wire = api::ToJson(r->reply);
  EXPECT_FALSE(wire["tasks"][0].contains("command"));
  EXPECT_FALSE(wire["tasks"][0].contains("env"));
  auto back = api::HeartbeatReplyFromJson(wire);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_TRUE(back->tasks[0].command.empty());
  EXPECT_EQ(back->tasks[1].command, spec.command);
  EXPECT_EQ(back->tasks[1].env, tasks[1].env);
}

TEST_F(CoreTest, AFailedRankFailsTheGangAndEveryFinishedTaskIsAcknowledged) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Spec(1, 2, /*max_restarts=*/1));
  ASSERT_EQ(Pass(), 1);
  api::HeartbeatReply reply = Beat("n1", {Exited(id, 0, 0, 3), Exited(99, 0, 0, 0)});
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).attempt, 1);
  EXPECT_EQ(Job(id).reason, "requeued after: rank 0 on n1 exited with code 3 (restart 1 of 1)");
  ASSERT_EQ(reply.acked.size(), 2u);  // the unknown job's task too: the agent may forget it
  EXPECT_TRUE(reply.tasks.empty());
  EXPECT_TRUE(fx_.jobs_to_store.contains(id));
}

TEST_F(CoreTest, AnExitOfAnEarlierAttemptIsAcknowledgedButNotRecorded) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Spec(1, 1, /*max_restarts=*/2));
  ASSERT_EQ(Pass(), 1);
  Beat("n1", {Exited(id, 0, 0, 1)});  // attempt 0 fails: requeued as attempt 1
  Beat("n1");                          // the agent confirms attempt 0 gone
  ASSERT_EQ(Pass(), 1);
  ASSERT_EQ(Job(id).attempt, 1);
  api::HeartbeatReply reply = Beat("n1", {Running(id, 1, 0), Exited(id, 0, 0, 1)});
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  EXPECT_TRUE(Job(id).exits.empty());
  EXPECT_EQ(reply.acked.size(), 1u);
}

TEST_F(CoreTest, ATaskTheAgentNoLongerHasFailsItsGang) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  Beat("n1", {});  // has applied the version that placed rank 0, and reports nothing
  EXPECT_EQ(Job(id).state, JobState::kFailed);
  EXPECT_EQ(Job(id).reason, "rank 0 on n1 is gone (its agent no longer has the task)");
}

// A heartbeat sent before the agent applied the placement can reach the head after a newer
// one (the agent's client gave up on a slow reply and sent the next): it lists what ran
// then, and loses nothing.
TEST_F(CoreTest, AHeartbeatOlderThanThePlacementLosesNoTask) {
  Register(Reg("n1"));
  const int64_t before = state_.runtime.at("n1").desired_version;
  const api::JobId id = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  Beat("n1", {Running(id, 0, 0)});  // the newer heartbeat: rank 0 runs
  api::Heartbeat stale;
  stale.incarnation = state_.nodes.at("n1").incarnation;
  stale.applied_version = before;  // sent before the placement was applied
  auto r = core::Heartbeat(state_, ctx_, "n1", stale, now_);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(Job(id).state, JobState::kRunning) << Job(id).reason;
  Beat("n1", {});  // a current heartbeat without the task still fails the gang
  EXPECT_EQ(Job(id).state, JobState::kFailed);
}

TEST_F(CoreTest, AllRanksExitingZeroSucceed) {
  Register(Reg("n1"));
  Register(Reg("n2"));
  const api::JobId id = Submit(Spec(2, 1));
  ASSERT_EQ(Pass(), 1);
  Beat("n1", {Exited(id, 0, 0, 0)});
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  Beat("n2", {Exited(id, 0, 1, 0)});
  EXPECT_EQ(Job(id).state, JobState::kSucceeded);
  EXPECT_EQ(Job(id).exit_code, 0);
  EXPECT_EQ(state_.counters.transitions.at({"running", "succeeded"}), 1u);
}

}  // namespace
}  // namespace cohort::head::core::testing

namespace cohort::head::core::testing {
namespace {

// A port the head handed out as MASTER_PORT is free on the node until the job's rank 0
// binds it, seconds later (python imports torch first): the next heartbeat may list it as
// free again, and a second job started there must not get the same port.
TEST_F(CoreTest, AJobsMasterPortIsNotHandedToAnotherJobOnTheSameNode) {
  Register(Reg("n1", 4));
  auto beat_with_ports = [&](std::vector<int> ports, std::vector<api::TaskReport> tasks) {
    api::Heartbeat hb;
    hb.incarnation = state_.nodes.at("n1").incarnation;
    hb.applied_version = state_.runtime.at("n1").desired_version;
    hb.tasks = std::move(tasks);
    hb.free_ports = std::move(ports);
    ASSERT_TRUE(core::Heartbeat(state_, ctx_, "n1", hb, now_).has_value());
  };
  beat_with_ports({41001}, {});
  const api::JobId a = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  ASSERT_EQ(Job(a).allocation.master_port, 41001);
  Advance(1000);
  beat_with_ports({41002, 41001}, {Running(a, 0, 0, {0})});  // a has not bound it yet
  const api::JobId b = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(b).allocation.master_port, 41002);
  // With no listed port left, the derived one still avoids the ports of running jobs.
  const api::JobId c = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  EXPECT_NE(Job(c).allocation.master_port, 41001);
  EXPECT_NE(Job(c).allocation.master_port, 41002);
  EXPECT_GT(Job(c).allocation.master_port, 0);
}

// A job placed before its node's first heartbeat gets a port the node found free as it
// registered, not the one derived from the job's id (the same for job 1 of every head on a
// machine, and checked by no node).
TEST_F(CoreTest, AJobPlacedBeforeTheFirstHeartbeatGetsAPortTheRegistrationListed) {
  api::Registration reg = Reg("n1", 2);
  reg.free_ports = {43001, 43002};
  Register(reg);
  const api::JobId a = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  const int port = Job(a).allocation.master_port;
  EXPECT_TRUE(port == 43001 || port == 43002) << port;
  // The codec carries them (an agent's registration over the wire).
  reg.agent_url = "http://127.0.0.1:9000";
  auto decoded = api::RegistrationFromJson(api::ToJson(reg));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
  EXPECT_EQ(decoded->free_ports, (std::vector<int>{43001, 43002}));
  json bad = api::ToJson(reg);
  bad["free_ports"] = {0};
  auto refused = api::RegistrationFromJson(bad);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().field, "free_ports");
}

}  // namespace
}  // namespace cohort::head::core::testing
