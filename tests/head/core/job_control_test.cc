// Hold, release, update and requeue of jobs (core/job_control.h), and the checkpoint asked
// for before a time limit (core/drain.h).
#include <csignal>

#include "core_test_util.h"
#include "head/core/drain.h"
#include "head/core/job_control.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

JobUpdate Priority(int p) {
  JobUpdate u;
  u.priority = p;
  return u;
}
JobUpdate TimeLimit(int64_t s) {
  JobUpdate u;
  u.time_limit_s = s;
  return u;
}
JobUpdate Name(std::string n) {
  JobUpdate u;
  u.name = std::move(n);
  return u;
}
// One GPU, a 10-minute limit, and USR1 2 minutes before it (--signal USR1@120).
api::JobSpec AskedToCheckpointBeforeItsLimit() {
  api::JobSpec spec = Spec(1, 1);
  spec.time_limit_s = 600;
  spec.checkpoint_before_limit_s = 120;
  spec.checkpoint_signal = "USR1";
  return spec;
}
JobFilter Window(int64_t since_ms, int64_t until_ms) {
  JobFilter f;
  f.since_ms = since_ms;
  f.until_ms = until_ms;
  return f;
}

TEST_F(CoreTest, AHeldJobIsPassedOverUntilReleased) {
  Register(Reg("n1", 1));
  const api::JobId held = Submit(Spec(1, 1));
  const api::JobId other = Submit(Spec(1, 1));
  auto fx = Hold(state_, ctx_, held, "alice", now_);
  ASSERT_TRUE(fx.has_value()) << fx.error().message;
  EXPECT_TRUE(fx->jobs_to_store.contains(held)) << "the hold is stored";
  EXPECT_TRUE(Job(held).held);
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(held).state, JobState::kPending);
  EXPECT_EQ(Job(other).state, JobState::kRunning) << "the later job takes the GPU the held one would have";
  EXPECT_EQ(GetJob(state_, held)->reason, "held by alice (cohort release " + std::to_string(held) + ")");
  EXPECT_EQ(Metrics(state_, now_).pending_by_reason.at("held"), 1);

  auto again = Hold(state_, ctx_, held, "alice", now_);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kFailedPrecondition);

  fx = Release(state_, ctx_, held, now_);
  ASSERT_TRUE(fx.has_value()) << fx.error().message;
  EXPECT_TRUE(fx->schedule);
  EXPECT_FALSE(Job(held).held);
  EXPECT_EQ(Job(held).held_by, "");
  Pass();
  EXPECT_NE(GetJob(state_, held)->reason.find("needs 1 node"), std::string::npos) << GetJob(state_, held)->reason;
  auto not_held = Release(state_, ctx_, held, now_);
  ASSERT_FALSE(not_held.has_value());
  EXPECT_EQ(not_held.error().code, ErrorCode::kFailedPrecondition);
}

TEST_F(CoreTest, OnlyAPendingJobCanBeHeldReleasedOrUpdated) {
  Register(Reg("n1", 1));
  const api::JobId id = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  for (auto r : {Hold(state_, ctx_, id, "alice", now_), Release(state_, ctx_, id, now_),
                 Update(state_, ctx_, id, Priority(5), now_)}) {
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kFailedPrecondition);
    EXPECT_NE(r.error().message.find("is RUNNING"), std::string::npos) << r.error().message;
  }
  auto missing = Hold(state_, ctx_, 999, "alice", now_);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

TEST_F(CoreTest, CancellingAHeldJobEndsTheHold) {
  Register(Reg("n1", 1));
  const api::JobId id = Submit(Spec(1, 1));
  ASSERT_TRUE(Hold(state_, ctx_, id, "alice", now_).has_value());
  ASSERT_TRUE(Cancel(state_, ctx_, id, now_).has_value());
  EXPECT_EQ(Job(id).state, JobState::kCancelled);
  EXPECT_FALSE(Job(id).held);
}

TEST_F(CoreTest, AnUpdateChangesTheOrderAndIsChecked) {
  Register(Reg("n1", 1));
  const api::JobId first = Submit(Spec(1, 1));
  const api::JobId second = Submit(Spec(1, 1));
  JobUpdate all = Priority(10);
  all.time_limit_s = 600;
  all.name = "urgent";
  auto fx = Update(state_, ctx_, second, all, now_);
  ASSERT_TRUE(fx.has_value()) << fx.error().message;
  EXPECT_TRUE(fx->jobs_to_store.contains(second));
  EXPECT_EQ(Job(second).spec.priority, 10);
  EXPECT_EQ(Job(second).spec.time_limit_s, 600);
  EXPECT_EQ(Job(second).spec.name, "urgent");
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(second).state, JobState::kRunning) << "the higher priority goes first";
  EXPECT_EQ(Job(first).state, JobState::kPending);

  const std::vector<std::pair<JobUpdate, std::string>> bad_updates = {
      {Priority(1001), "priority"},
      {TimeLimit(-1), "time_limit_s"},
      {TimeLimit(api::kMaxTimeLimitS + 1), "time_limit_s"},
      {Name("no spaces"), "name"}};
  for (const auto& [update, field] : bad_updates) {
    auto bad = Update(state_, ctx_, first, update, now_);
    ASSERT_FALSE(bad.has_value()) << field;
    EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(bad.error().field, field) << bad.error().message;
  }
  EXPECT_EQ(Job(first).spec.priority, 0) << "a refused update changes nothing";
  auto empty = Update(state_, ctx_, first, JobUpdate{}, now_);
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(CoreTest, TheTimeWindowOfAListKeepsJobsThatOverlapIt) {
  Register(Reg("n1", 1));
  const api::JobId early = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  ASSERT_TRUE(Cancel(state_, ctx_, early, now_).has_value());
  const int64_t after_early = now_.unix_ms + 1;
  Advance(10'000);
  const api::JobId late = Submit(Spec(1, 1));
  auto ids = [&](JobFilter f) {
    std::vector<api::JobId> out;
    for (const auto& j : ListJobs(state_, f)) out.push_back(j.id);
    return out;
  };
  EXPECT_EQ(ids(Window(after_early, 0)), std::vector<api::JobId>{late}) << "ended before the window";
  EXPECT_EQ(ids(Window(0, after_early)), std::vector<api::JobId>{early}) << "submitted after the window";
  EXPECT_EQ(ids({}), (std::vector<api::JobId>{early, late}));
}

}  // namespace
}  // namespace cohort::head::core::testing

namespace cohort::head::core::testing {
namespace {

// Slurm's --signal=USR1@TIME: TIME seconds before the attempt's time limit the head asks
// for a checkpoint (in the agent's launches and in progress replies) until the attempt
// reports one made since then; the job runs on.
TEST_F(CoreTest, AJobWaitsForItsBeginTimeAndAnUpdateMovesIt) {
  Register(Reg("n1", 2));
  api::JobSpec spec = Spec(1, 1);
  spec.begin_ms = now_.unix_ms + 60'000;
  const api::JobId later = Submit(spec);
  const api::JobId now = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(later).state, JobState::kPending);
  EXPECT_EQ(Job(now).state, JobState::kRunning) << "a job with no begin time starts";
  EXPECT_EQ(GetJob(state_, later)->reason, "BeginTime (not before 2023-11-14T22:14:20Z, in 1m00s)")
      << GetJob(state_, later)->reason;
  EXPECT_EQ(Metrics(state_, now_).pending_by_reason.at("begin"), 1);

  // scontrol update StartTime: later, checked, refused once running.
  JobUpdate u;
  u.begin_ms = now_.unix_ms + 3'600'000;
  auto fx = Update(state_, ctx_, later, u, now_);
  ASSERT_TRUE(fx.has_value()) << fx.error().message;
  EXPECT_TRUE(fx->jobs_to_store.contains(later)) << "the new begin time is stored";
  u.begin_ms = -1;
  auto bad = Update(state_, ctx_, later, u, now_);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().field, "begin_ms");
  EXPECT_EQ(Job(later).spec.begin_ms, now_.unix_ms + 3'600'000) << "a refused update changes nothing";

  Advance(61'000);
  ASSERT_EQ(Pass(), 0) << "the first begin time has passed, the updated one has not";
  EXPECT_NE(GetJob(state_, later)->reason.find("in 58m59s"), std::string::npos) << GetJob(state_, later)->reason;
  u.begin_ms = 0;  // now
  ASSERT_TRUE(Update(state_, ctx_, later, u, now_).has_value());
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(later).state, JobState::kRunning);
  u.begin_ms = now_.unix_ms + 1000;
  auto running = Update(state_, ctx_, later, u, now_);
  ASSERT_FALSE(running.has_value());
  EXPECT_EQ(running.error().code, ErrorCode::kFailedPrecondition);
}

TEST_F(CoreTest, AJobStartsOnceItsBeginTimeComes) {
  Register(Reg("n1", 1));
  api::JobSpec spec = Spec(1, 1);
  spec.begin_ms = now_.unix_ms + 5'000;
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 0);
  Advance(4'999);
  ASSERT_EQ(Pass(), 0);
  EXPECT_EQ(Job(id).state, JobState::kPending);
  Advance(1);
  ASSERT_EQ(Pass(), 1) << "at its begin time, not later";
  EXPECT_EQ(Job(id).state, JobState::kRunning);
}

TEST_F(CoreTest, ACheckpointIsAskedForBeforeTheTimeLimitUntilOneIsMade) {
  Register(Reg("n1", 1));
  const api::JobId id = Submit(AskedToCheckpointBeforeItsLimit());
  ASSERT_EQ(Pass(), 1);
  const int attempt = Job(id).attempt;
  auto asked = [&] {
    const auto reply = Beat("n1", {Running(id, attempt, 0, {0})});
    EXPECT_EQ(reply.tasks.size(), 1u);
    return !reply.tasks.empty() && reply.tasks[0].checkpoint_requested;
  };
  EXPECT_FALSE(asked());
  EXPECT_FALSE(OnProgress(state_, ctx_, id, attempt, 3, now_).checkpoint) << "a checkpoint at step 3, long before";
  Advance(479'000);
  EXPECT_FALSE(asked()) << "121 s before the limit";
  EXPECT_FALSE(OnProgress(state_, ctx_, id, attempt, std::nullopt, now_).checkpoint);
  Advance(1'000);
  EXPECT_TRUE(asked()) << "120 s before the limit";
  EXPECT_EQ(Beat("n1", {Running(id, attempt, 0, {0})}).tasks[0].checkpoint_signal, SIGUSR1);
  EXPECT_TRUE(OnProgress(state_, ctx_, id, attempt, std::nullopt, now_).checkpoint) << "a report without one";
  EXPECT_TRUE(OnProgress(state_, ctx_, id, attempt, 3, now_).checkpoint) << "step 3 was made before the request";
  Advance(5'000);
  EXPECT_FALSE(OnProgress(state_, ctx_, id, attempt, 40, now_).checkpoint) << "step 40, made since: answered";
  EXPECT_FALSE(asked());
  EXPECT_EQ(Job(id).state, JobState::kRunning) << "the job runs on to its limit";
}

// Each checkpoint request names itself in the launches with the time it was made
// (TaskLaunch::checkpoint_requested_ms), the same in every reply while it stands: a drain's
// made right after the time-limit request was answered has another, so an agent that had
// no reply between them still tells it from the first and signals again.
TEST_F(CoreTest, EachCheckpointRequestCarriesTheTimeItWasMade) {
  Register(Reg("n1", 1));
  Register(Reg("n2", 1));
  const api::JobId id = Submit(AskedToCheckpointBeforeItsLimit());
  ASSERT_EQ(Pass(), 1);
  const int attempt = Job(id).attempt;
  const std::string node = Job(id).allocation.nodes[0].node;
  const int64_t limit_asked = Job(id).start_ms + 480'000;
  auto launch = [&] {
    const auto reply = Beat(node, {Running(id, attempt, 0, {0})});
    EXPECT_EQ(reply.tasks.size(), 1u);
    return reply.tasks.empty() ? api::TaskLaunch{} : reply.tasks[0];
  };
  EXPECT_EQ(launch().checkpoint_requested_ms, 0) << "nothing asked yet";
  Advance(480'000);
  EXPECT_TRUE(launch().checkpoint_requested);
  Advance(1'000);
  EXPECT_EQ(launch().checkpoint_requested_ms, limit_asked) << "the same request in every reply";
  EXPECT_FALSE(OnProgress(state_, ctx_, id, attempt, 40, now_).checkpoint) << "answered";
  Advance(1);
  ASSERT_TRUE(Drain(state_, ctx_, node, "", /*now_flag=*/true, 60'000, now_).has_value());
  const api::TaskLaunch drained = launch();
  EXPECT_TRUE(drained.checkpoint_requested);
  EXPECT_EQ(drained.checkpoint_requested_ms, now_.unix_ms) << "the drain's request is a new one";
  EXPECT_NE(drained.checkpoint_requested_ms, limit_asked);
  // The agent reads it from the reply's JSON.
  api::HeartbeatReply reply;
  reply.tasks = {drained};
  auto decoded = api::HeartbeatReplyFromJson(api::ToJson(reply));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
  ASSERT_EQ(decoded->tasks.size(), 1u);
  EXPECT_EQ(decoded->tasks[0].checkpoint_requested_ms, drained.checkpoint_requested_ms);
}

TEST_F(CoreTest, ARunningJobIsRequeuedAsItsNextAttemptWithItsTasksStopped) {
  Register(Reg("n1", 1));
  api::JobSpec spec = Spec(1, 1, /*max_restarts=*/0);
  spec.user = "alice";
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  const int first = Job(id).attempt;
  auto fx = Requeue(state_, ctx_, id, "alice", /*hold=*/false, now_);
  ASSERT_TRUE(fx.has_value()) << fx.error().message;
  EXPECT_TRUE(fx->jobs_to_store.contains(id));
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).attempt, first + 1);
  EXPECT_EQ(Job(id).moves, 1) << "asked for, so no restart is counted";
  EXPECT_NE(Job(id).reason.find("requeued by alice (was RUNNING"), std::string::npos) << Job(id).reason;
  EXPECT_EQ(Job(id).history.back().end_reason, "requeued by alice");
  EXPECT_TRUE(Beat("n1", {Running(id, first, 0, {0})}).tasks.empty()) << "the old attempt's task is stopped";
  Beat("n1");
  ASSERT_EQ(Pass(), 1) << "it runs again, though max_restarts is 0";
  EXPECT_EQ(Job(id).state, JobState::kRunning);
  EXPECT_EQ(Job(id).attempt, first + 1);
}

TEST_F(CoreTest, AnEndedJobIsRequeuedOpenAgainAndHeldWhenAsked) {
  Register(Reg("n1", 1));
  ctx_.job_limits.per_user = 1;
  api::JobSpec spec = Spec(1, 1);
  spec.user = "alice";
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  Beat("n1", {Exited(id, Job(id).attempt, 0, 3)});
  ASSERT_EQ(Job(id).state, JobState::kFailed);
  const int ended = Job(id).attempt;

  const api::JobId other = Submit(spec);  // alice's one open job
  auto full = Requeue(state_, ctx_, id, "alice", false, now_);
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().code, ErrorCode::kResourceExhausted) << full.error().message;
  EXPECT_EQ(Job(id).state, JobState::kFailed) << "nothing changed";
  ASSERT_TRUE(Cancel(state_, ctx_, other, now_).has_value());

  auto fx = Requeue(state_, ctx_, id, "bob", /*hold=*/true, now_);
  ASSERT_TRUE(fx.has_value()) << fx.error().message;
  EXPECT_EQ(Job(id).state, JobState::kPending);
  EXPECT_EQ(Job(id).attempt, ended + 1);
  EXPECT_EQ(Job(id).end_ms, 0);
  EXPECT_FALSE(Job(id).exit_code.has_value());
  EXPECT_TRUE(Job(id).held);
  EXPECT_EQ(Job(id).held_by, "bob");
  EXPECT_EQ(Pass(), 0) << "held";
  auto second = AcceptJob(state_, ctx_, spec, now_);
  ASSERT_FALSE(second.has_value()) << "the requeued job is alice's open job again";
  EXPECT_EQ(second.error().code, ErrorCode::kResourceExhausted);
  ASSERT_TRUE(Release(state_, ctx_, id, now_).has_value());
  EXPECT_EQ(Pass(), 1);
}

TEST_F(CoreTest, WhatCannotBeRequeuedSaysWhatToDoInstead) {
  Register(Reg("n1", 1));
  api::JobSpec alloc = Spec(1, 1);
  alloc.allocation = true;
  alloc.command.clear();
  const api::JobId a = Submit(alloc);
  ASSERT_EQ(Pass(), 1);
  auto r = Requeue(state_, ctx_, a, "alice", false, now_);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(r.error().message.find("is an allocation"), std::string::npos) << r.error().message;
  EXPECT_EQ(Job(a).state, JobState::kRunning);

  const api::JobId pending = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 0);
  r = Requeue(state_, ctx_, pending, "alice", false, now_);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(r.error().message.find("PENDING already"), std::string::npos) << r.error().message;

  r = Requeue(state_, ctx_, 999, "alice", false, now_);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace cohort::head::core::testing
