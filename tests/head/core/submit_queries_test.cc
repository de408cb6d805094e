// Submitting and cancelling, and the read-only views of the state.
#include "core_test_util.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

TEST_F(CoreTest, NoJobIsAcceptedBeforeANodeRegisters) {
  auto job = NewJob(state_, Spec(1, 1), now_);
  ASSERT_FALSE(job.has_value());
  EXPECT_EQ(job.error().code, ErrorCode::kUnsatisfiable);
  EXPECT_TRUE(state_.jobs.empty());
}

TEST_F(CoreTest, AJobThatCouldNeverFitIsRefused) {
  Register(Reg("n1", 2));
  auto job = NewJob(state_, Spec(1, 4), now_);
  ASSERT_FALSE(job.has_value());
  EXPECT_EQ(job.error().code, ErrorCode::kUnsatisfiable);
}

TEST_F(CoreTest, ASubmittedJobWaitsForTheScheduler) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Spec(1, 1));
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).reason, "waiting for the scheduler");
  EXPECT_TRUE(state_.pending.contains(id));
  EXPECT_TRUE(fx_.schedule);
  EXPECT_TRUE(fx_.jobs_to_store.empty()) << "the store created it already";
  EXPECT_EQ(state_.counters.transitions.at({"none", "pending"}), 1u);
}

TEST_F(CoreTest, CancellingARunningJobFencesItsTasksUntilTheAgentConfirms) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Spec(1, 2));
  ASSERT_EQ(Pass(), 1);
  Beat("n1", {Running(id, 0, 0, {0, 1})});
  auto fx = Cancel(state_, ctx_, id, now_);
  ASSERT_TRUE(fx.has_value());
  EXPECT_EQ(Job(id).state, JobState::kCancelled);
  EXPECT_EQ(fx->drop_rendezvous, std::vector<api::JobId>{id});
  EXPECT_TRUE(fx->wake.contains("http://agent-n1"));
  ASSERT_EQ(state_.runtime.at("n1").stopping.size(), 1u);
  EXPECT_EQ(state_.runtime.at("n1").stopping[0].gpus, (std::vector<int>{0, 1}));
  auto again = Cancel(state_, ctx_, id, now_);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kFailedPrecondition);
}

TEST_F(CoreTest, OnlyTheCurrentAttemptCounts) {
  Register(Reg("n1"));
  const api::JobId id = Submit(Spec(1, 1, /*max_restarts=*/1));
  EXPECT_EQ(CurrentAttempt(state_, id, 0), nullptr) << "pending";
  ASSERT_EQ(Pass(), 1);
  EXPECT_NE(CurrentAttempt(state_, id, 0), nullptr);
  EXPECT_EQ(CurrentAttempt(state_, id, 1), nullptr);
  EXPECT_EQ(CurrentAttempt(state_, 999, 0), nullptr);
  Beat("n1", {Running(id, 0, 0)});
  auto usage = RunningTaskUsage(state_);
  ASSERT_EQ(usage.at(id).size(), 1u);
  Beat("n1", {Exited(id, 0, 0, 1)});  // requeued as attempt 1
  EXPECT_EQ(CurrentAttempt(state_, id, 0), nullptr);
  Beat("n1", {Running(id, 0, 0)});  // a straggler of attempt 0
  EXPECT_TRUE(RunningTaskUsage(state_).empty());
}

// A job whose tasks ended while the head was down ends when they did, not when the
// restarted head heard of it: `history` showed `sleep 4` running 7.6s, and GPU-hours
// billed the head's downtime.
TEST_F(CoreTest, AJobEndsWhenItsTasksEndedNotWhenTheHeadHeard) {
  Register(Reg("n1", 4));
  const api::JobId ok = Submit(Spec(1, 1));
  const api::JobId bad = Submit(Spec(1, 1, /*max_restarts=*/1));
  ASSERT_EQ(Pass(), 2);
  const int64_t started = now_.unix_ms;
  Beat("n1", {Running(ok, 0, 0), Running(bad, 0, 0)});
  Advance(10'000);  // the head was down; both tasks ended 4 s in
  api::TaskReport done = Exited(ok, 0, 0, 0);
  done.finished_ms = started + 4000;
  api::TaskReport failed = Exited(bad, 0, 0, 3);
  failed.finished_ms = started + 4000;
  Beat("n1", {done, failed});
  ASSERT_EQ(Job(ok).state, JobState::kSucceeded);
  EXPECT_EQ(Job(ok).end_ms, started + 4000);
  EXPECT_EQ(Job(ok).history.back().end_ms, started + 4000);
  ASSERT_EQ(Job(bad).state, JobState::kPending) << "requeued";
  EXPECT_EQ(Job(bad).history.back().end_ms, started + 4000);
  // An agent's clock is not the head's: a time past now is now, one before the start the start.
  const api::JobId ahead = Submit(Spec(1, 1));
  const api::JobId behind = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 3) << "the requeued job and these two";
  const int64_t second = now_.unix_ms;
  Advance(1000);
  api::TaskReport future = Exited(ahead, 0, 0, 0);
  future.finished_ms = second + 60'000;
  api::TaskReport past = Exited(behind, 0, 0, 0);
  past.finished_ms = second - 60'000;
  Beat("n1", {future, past});
  EXPECT_EQ(Job(ahead).end_ms, now_.unix_ms);
  EXPECT_EQ(Job(behind).end_ms, second);
}

TEST_F(CoreTest, NodeStatusShowsDrainingUntilItsJobsAreGone) {
  Register(Reg("n1", 2));
  const api::JobId id = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  ASSERT_TRUE(Drain(state_, ctx_, "n1", "", false, 0, now_).has_value());
  Advance(700);
  api::NodeStatus st = StatusOf(state_, state_.nodes.at("n1"), now_);
  EXPECT_EQ(st.display_state, "DRAINING");
  EXPECT_EQ(st.gpus_allocated, 1);
  EXPECT_EQ(st.jobs, std::vector<api::JobId>{id});
  EXPECT_EQ(st.heartbeat_age_ms, 700);
  ASSERT_TRUE(Cancel(state_, ctx_, id, now_).has_value());
  EXPECT_EQ(StatusOf(state_, state_.nodes.at("n1"), now_).display_state, "DRAINED");
}

TEST_F(CoreTest, ListJobsKeepsTheNewestWithinTheLimit) {
  Register(Reg("n1"));
  for (int i = 0; i < 5; ++i) Submit(Spec(1, 1));
  JobFilter f;
  f.limit = 2;
  auto jobs = ListJobs(state_, f);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, 4);
  EXPECT_EQ(jobs[1].id, 5);
  f.states = {JobState::kRunning};
  EXPECT_TRUE(ListJobs(state_, f).empty());
}

TEST_F(CoreTest, AGrownHealthCounterMarksTheGpuAndFailsItsJob) {
  Register(Reg("n1", 2));
  const api::JobId id = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  const int gpu = Job(id).allocation.nodes[0].gpus[0];
  api::Heartbeat hb;
  hb.incarnation = "inc1";
  hb.applied_version = state_.runtime.at("n1").desired_version;
  hb.tasks = {Running(id, 0, 0, {gpu})};
  api::GpuReport r;
  r.index = gpu;
  r.health_events = 1;
  r.health_event = "XID 79: GPU has fallen off the bus";
  hb.gpus = {r};
  auto out = core::Heartbeat(state_, ctx_, "n1", hb, now_);
  ASSERT_TRUE(out.has_value());
  EXPECT_FALSE(state_.nodes.at("n1").gpus[static_cast<size_t>(gpu)].healthy);
  EXPECT_EQ(Job(id).state, JobState::kFailed);
  EXPECT_EQ(Job(id).reason, fmt::format("GPU {} on n1 became unhealthy: XID 79: GPU has fallen off the bus", gpu));
  EXPECT_EQ(state_.counters.gpu_health_events, 1u);
  // The same counter again is no new event.
  auto again = core::Heartbeat(state_, ctx_, "n1", hb, now_);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(state_.counters.gpu_health_events, 1u);
}

}  // namespace
}  // namespace cohort::head::core::testing

namespace cohort::head::core::testing {
namespace {

TEST_F(CoreTest, FeasibilityFollowsNodesThatReRegisterWithOtherGpus) {
  Register(Reg("n1", 2));
  Register(Reg("n2", 2));
  EXPECT_FALSE(NewJob(state_, Spec(1, 4), now_).has_value()) << "no node has 4 GPUs";
  Advance(3001);                   // n1's agent is gone...
  Register(Reg("n1", 4, "inc2"));  // ...and its new one finds 4 GPUs
  EXPECT_TRUE(NewJob(state_, Spec(1, 4), now_).has_value());
  EXPECT_FALSE(NewJob(state_, Spec(2, 4), now_).has_value()) << "only one node has 4";
  EXPECT_TRUE(NewJob(state_, Spec(2, 2), now_).has_value());
  EXPECT_EQ((state_.node_shapes), (std::map<std::pair<int, int>, int>{{{2, 8}, 1}, {{4, 8}, 1}}));
  // A restart counts the same shapes.
  std::vector<api::Node> nodes;
  for (const auto& [name, n] : state_.nodes) nodes.push_back(n);
  EXPECT_EQ(LoadState(nodes, {}, now_).node_shapes, state_.node_shapes);
}

}  // namespace
}  // namespace cohort::head::core::testing
