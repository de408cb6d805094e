// Job arrays in the head's core (core/arrays.h): elements made a few at a time, the
// throttle at every moment, cancellation of one element or all, the array's end state, and
// a restart in the middle of an array.
#include <set>

#include "api/job_array.h"
#include "api/job_env.h"
#include "api/sweep.h"
#include "core_test_util.h"
#include "head/core/arrays.h"
#include "head/core/job_control.h"
#include "head/core/lifecycle.h"
#include "head/core/queries.h"
#include "head/core/submit.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

class ArrayTest : public CoreTest {
 protected:
  api::JobSpec ArraySpec(const std::string& array, int gpus = 1) {
    api::JobSpec s = Spec(1, gpus);
    s.array = array;
    return s;
  }

  // What the shell does at each pass: SettleArrays, then the store's ids and AddJob for
  // every element made (the array records commit with them).
  int Settle() {
    ArrayElements made = SettleArrays(state_, ctx_, now_);
    fx_ = std::move(made.effects);
    for (api::Job& e : made.create) {
      e.id = next_id_++;
      fx_.Merge(AddJob(state_, ctx_, e, now_));
    }
    return static_cast<int>(made.create.size());
  }

  // The array's elements that are made and not ended, and of them those RUNNING.
  std::pair<int, int> Live(api::JobId array) const {
    int live = 0, running = 0;
    for (const auto& [id, j] : state_.jobs) {
      if (j.array_job_id != array || api::IsTerminal(j.state)) continue;
      ++live;
      running += j.state == JobState::kRunning;
    }
    return {live, running};
  }

  // Every RUNNING element exits with `code` (from its node's heartbeat); returns their indices.
  std::vector<int64_t> FinishRunning(api::JobId array, int code = 0) {
    std::vector<int64_t> done;
    std::map<std::string, std::vector<api::TaskReport>> exits;
    for (const auto& [id, j] : state_.jobs) {
      if (j.array_job_id != array || j.state != JobState::kRunning) continue;
      exits[j.allocation.nodes.at(0).node].push_back(Exited(id, j.attempt, 0, code));
      done.push_back(j.array_task_id);
    }
    for (auto& [node, tasks] : exits) Beat(node, tasks);
    return done;
  }
};

TEST_F(ArrayTest, TheThrottleHoldsAtEveryMomentAndEveryIndexRunsOnce) {
  Register(Reg("n1", 2));
  Register(Reg("n2", 2));
  const api::JobId array = Submit(ArraySpec("0-19:2%3"));
  EXPECT_FALSE(state_.pending.contains(array)) << "an array never queues itself";
  EXPECT_EQ(Job(array).array_left, "0-18:2");
  std::multiset<int64_t> ran;
  for (int round = 0; round < 20 && !api::IsTerminal(Job(array).state); ++round) {
    Settle();
    EXPECT_LE(Live(array).first, 3) << "round " << round;
    Pass();
    EXPECT_LE(Live(array).second, 3) << "round " << round;
    Settle();  // nothing more while three are live
    EXPECT_LE(Live(array).first, 3) << "round " << round;
    for (int64_t t : FinishRunning(array)) ran.insert(t);
  }
  Settle();
  std::multiset<int64_t> want;
  for (int64_t i = 0; i <= 18; i += 2) want.insert(i);
  EXPECT_EQ(ran, want);
  EXPECT_EQ(Job(array).state, JobState::kSucceeded);
  EXPECT_EQ(Job(array).reason, "all 10 elements succeeded");
  EXPECT_EQ(ArraySummary(state_, Job(array)).at("SUCCEEDED"), 10);
}

TEST_F(ArrayTest, ElementsGetTheirIndexAndTheArrayCollapsesInTheQueue) {
  Register(Reg("n1", 2));
  const api::JobId array = Submit(ArraySpec("5-999%2"));
  Settle();
  Pass();
  std::set<std::string> tasks;
  for (const auto& t : DesiredTasks(state_, ctx_, "n1", now_)) {
    EXPECT_EQ(t.env.at("COHORT_ARRAY_JOB_ID"), std::to_string(array));
    EXPECT_EQ(t.env.at("SLURM_ARRAY_JOB_ID"), std::to_string(array));
    EXPECT_EQ(t.env.at("COHORT_ARRAY_TASK_ID"), t.env.at("SLURM_ARRAY_TASK_ID"));
    tasks.insert(t.env.at("COHORT_ARRAY_TASK_ID"));
  }
  EXPECT_EQ(tasks, (std::set<std::string>{"5", "6"}));
  EXPECT_EQ(api::DisplayJobId(Job(array)), std::to_string(array) + "_[7-999%2]");
  auto e = ArrayElementId(state_, array, 6);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(api::DisplayJobId(Job(*e)), std::to_string(array) + "_6");
  auto waiting = ArrayElementId(state_, array, 7);
  ASSERT_FALSE(waiting);
  EXPECT_NE(waiting.error().message.find("has not started yet"), std::string::npos);
  auto outside = ArrayElementId(state_, array, 4);
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.error().message.find("has no element 4"), std::string::npos);
  EXPECT_FALSE(ArrayElementId(state_, *e, 0)) << "an element is no array";
}

// Slurm gives every element the array's shape (SLURM_ARRAY_TASK_COUNT, _MIN, _MAX, _STEP),
// which scripts use to split work ("my share is every COUNT-th file from MIN").
TEST_F(ArrayTest, ElementsGetTheArraysCountMinMaxAndStep) {
  Register(Reg("n1", 2));
  Submit(ArraySpec("3-11:4%2"));  // 3, 7, 11
  Settle();
  ASSERT_EQ(Pass(), 2);
  const auto tasks = DesiredTasks(state_, ctx_, "n1", now_);
  ASSERT_EQ(tasks.size(), 2u);
  for (const auto& t : tasks) {
    for (const std::string prefix : {"COHORT", "SLURM"}) {
      EXPECT_EQ(t.env.at(prefix + "_ARRAY_TASK_COUNT"), "3");
      EXPECT_EQ(t.env.at(prefix + "_ARRAY_TASK_MIN"), "3");
      EXPECT_EQ(t.env.at(prefix + "_ARRAY_TASK_MAX"), "11");
      EXPECT_EQ(t.env.at(prefix + "_ARRAY_TASK_STEP"), "4");
    }
  }
}

TEST_F(ArrayTest, CancelOneElementStartedOrNotThenTheWholeArray) {
  Register(Reg("n1", 1));
  const api::JobId array = Submit(ArraySpec("0-9"));
  Settle();
  Pass();
  auto e0 = ArrayElementId(state_, array, 0);
  ASSERT_TRUE(e0);
  ASSERT_EQ(Job(*e0).state, JobState::kRunning);
  // A running element.
  auto fx = CancelArrayTask(state_, ctx_, array, 0, now_);
  ASSERT_TRUE(fx) << fx.error().message;
  EXPECT_EQ(Job(*e0).state, JobState::kCancelled);
  auto again = CancelArrayTask(state_, ctx_, array, 0, now_);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kFailedPrecondition);
  // An index not yet made into an element leaves the array's record.
  const api::JobId second = Submit(ArraySpec("0-999%1"));
  Settle();
  fx = CancelArrayTask(state_, ctx_, second, 500, now_);
  ASSERT_TRUE(fx) << fx.error().message;
  EXPECT_TRUE(fx->jobs_to_store.contains(second)) << "the array record is stored without the index";
  EXPECT_EQ(Job(second).array_left, "1-499,501-999");
  EXPECT_EQ(Job(second).array_cancelled, 1);
  auto twice = CancelArrayTask(state_, ctx_, second, 500, now_);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(twice.error().message, "element " + std::to_string(second) + "_500 was cancelled before it started");
  EXPECT_EQ(CancelArrayTask(state_, ctx_, second, 1000, now_).error().code, ErrorCode::kNotFound);
  // The whole first array: its running and pending elements and what it had left.
  auto all = Cancel(state_, ctx_, array, now_);
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(Job(array).state, JobState::kCancelled);
  for (const auto& [id, j] : state_.jobs) {
    if (j.array_job_id == array) {
      EXPECT_EQ(j.state, JobState::kCancelled) << j.array_task_id;
    }
  }
  EXPECT_EQ(ArraySummary(state_, Job(array)).at("CANCELLED"), 10);
  auto all2 = Cancel(state_, ctx_, second, now_);
  ASSERT_TRUE(all2);
  EXPECT_EQ(Job(second).array_left, "");
  EXPECT_EQ(Job(second).array_cancelled, 999) << "all but element 0, which was made";
  EXPECT_EQ(ArraySummary(state_, Job(second)).at("CANCELLED"), 1000);
  EXPECT_EQ(ArraySummary(state_, Job(second)).at("PENDING"), 0);
}

TEST_F(ArrayTest, AFailedElementFailsTheArrayWithItsExitCode) {
  Register(Reg("n1", 2));
  const api::JobId array = Submit(ArraySpec("1-2"));
  Settle();
  ASSERT_EQ(Pass(), 2);
  auto e1 = ArrayElementId(state_, array, 1), e2 = ArrayElementId(state_, array, 2);
  ASSERT_TRUE(e1 && e2);
  Beat(Job(*e1).allocation.nodes[0].node, {Exited(*e1, 0, 0, 0), Exited(*e2, 0, 0, 7)});
  Settle();
  EXPECT_EQ(Job(array).state, JobState::kFailed);
  EXPECT_EQ(Job(array).reason, "1 of 2 elements failed");
  EXPECT_EQ(Job(array).exit_code, 7);
  EXPECT_EQ(FailedArrayIndices(state_, Job(array)), "2") << "what to run again";
}

// `cohort hold ARRAY` (Slurm's scontrol hold of an array): the array record is the job the
// user names, but the elements are what run. A hold that only marked the record let the
// elements go on starting; it holds every pending element and makes no more, a release
// lets them go, and an update reaches the pending elements and the ones made later.
TEST_F(ArrayTest, HoldReleaseAndUpdateOfAnArrayReachItsElements) {
  Register(Reg("n1", 1));
  const api::JobId array = Submit(ArraySpec("0-9%2"));
  Settle();
  ASSERT_EQ(Pass(), 1);
  ASSERT_EQ(Live(array), std::make_pair(2, 1)) << "element 0 runs, element 1 waits for the GPU";
  auto fx = Hold(state_, ctx_, array, "alice", now_);
  ASSERT_TRUE(fx) << fx.error().message;
  auto e1 = ArrayElementId(state_, array, 1);
  ASSERT_TRUE(e1);
  EXPECT_TRUE(Job(*e1).held) << "the pending element is held with its array";
  EXPECT_TRUE(fx->jobs_to_store.contains(*e1));
  EXPECT_EQ(Job(*e1).held_by, "alice");
  FinishRunning(array);
  EXPECT_EQ(Settle(), 0) << "a held array makes no new elements";
  EXPECT_EQ(Pass(), 0) << "nor do its elements start";
  EXPECT_EQ(Job(array).array_left, "2-9");
  EXPECT_EQ(GetJob(state_, array)->reason, "held by alice (cohort release " + std::to_string(array) + ")");

  JobUpdate u;
  u.priority = 7;
  u.time_limit_s = 60;
  ASSERT_TRUE(Update(state_, ctx_, array, u, now_));
  EXPECT_EQ(Job(*e1).spec.priority, 7) << "a pending element takes the update";
  EXPECT_EQ(Job(*e1).spec.time_limit_s, 60);
  u = {};
  u.time_limit_s = -1;
  EXPECT_FALSE(Update(state_, ctx_, array, u, now_));

  ASSERT_TRUE(Release(state_, ctx_, array, now_));
  EXPECT_FALSE(Job(array).held);
  EXPECT_FALSE(Job(*e1).held) << "released with its array";
  EXPECT_EQ(Settle(), 1);
  auto e2 = ArrayElementId(state_, array, 2);
  ASSERT_TRUE(e2);
  EXPECT_EQ(Job(*e2).spec.priority, 7) << "an element made later takes the update too";
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(*e1).state, JobState::kRunning);

  // An element held on its own by another user keeps that hold when the array is released.
  ASSERT_TRUE(Hold(state_, ctx_, *e2, "admin", now_));
  ASSERT_TRUE(Hold(state_, ctx_, array, "alice", now_));
  ASSERT_TRUE(Release(state_, ctx_, array, now_));
  EXPECT_TRUE(Job(*e2).held);
  EXPECT_EQ(Job(*e2).held_by, "admin");
}

// Slurm's ArrayTaskThrottle: `cohort update 12 --throttle N` changes %N of a running array
// (a sweep's parallel with it, so the stored spec reads back), from the next element made.
TEST_F(ArrayTest, UpdatingTheThrottleChangesHowManyElementsLive) {
  Register(Reg("n1", 4));
  const api::JobId array = Submit(ArraySpec("0-9%1"));
  Settle();
  ASSERT_EQ(Live(array).first, 1);
  JobUpdate u;
  u.array_throttle = 3;
  auto fx = Update(state_, ctx_, array, u, now_);
  ASSERT_TRUE(fx) << fx.error().message;
  EXPECT_TRUE(fx->jobs_to_store.contains(array));
  EXPECT_EQ(Job(array).spec.array, "0-9%3");
  EXPECT_EQ(Settle(), 2) << "two more elements may live now";
  EXPECT_EQ(api::DisplayJobId(Job(array)), std::to_string(array) + "_[3-9%3]");
  u.array_throttle = 1;
  ASSERT_TRUE(Update(state_, ctx_, array, u, now_));
  Pass();
  FinishRunning(array);
  EXPECT_EQ(Settle(), 1) << "three ended: one made under %1";
  u.array_throttle = 0;
  ASSERT_TRUE(Update(state_, ctx_, array, u, now_));
  EXPECT_EQ(Job(array).spec.array, "0-9");
  u.array_throttle = -1;
  EXPECT_EQ(Update(state_, ctx_, array, u, now_).error().field, "array_throttle");
  u.array_throttle = 2;
  const api::JobId plain = Submit(Spec(1, 1));
  auto not_array = Update(state_, ctx_, plain, u, now_);
  ASSERT_FALSE(not_array);
  EXPECT_NE(not_array.error().message.find("is not a job array"), std::string::npos);

  api::JobSpec sweep = Spec(1, 1);
  auto section = api::ValidateSweep(json::parse(R"({"grid": {"lr": [1, 2, 3]}, "parallel": 1})"));
  ASSERT_TRUE(section);
  sweep.sweep = *section;
  sweep.array = api::SweepArray(sweep.sweep);
  const api::JobId s = Submit(sweep);
  ASSERT_TRUE(Update(state_, ctx_, s, u, now_));
  EXPECT_EQ(Job(s).spec.array, "0-2%2");
  EXPECT_EQ(Job(s).spec.sweep["parallel"], 2);
  auto stored = api::JobSpecFromJson(api::ToJson(Job(s).spec));
  EXPECT_TRUE(stored) << "the stored spec reads back: " << stored.error().message;
}

TEST_F(ArrayTest, AFailedCreationGivesTheIndexBack) {
  Register(Reg("n1", 1));
  const api::JobId array = Submit(ArraySpec("0-3%2"));
  ArrayElements made = SettleArrays(state_, ctx_, now_);
  ASSERT_EQ(made.create.size(), 2u);
  EXPECT_EQ(Job(array).array_left, "2-3");
  EXPECT_TRUE(made.effects.jobs_to_store.contains(array)) << "stored in the same commit as the elements";
  EXPECT_EQ(SettleArrays(state_, ctx_, now_).create.size(), 0u) << "elements being created count against %2";
  ReturnArrayElement(state_, ctx_, made.create[0], now_);
  ReturnArrayElement(state_, ctx_, made.create[1], now_);
  EXPECT_EQ(Job(array).array_left, "0-3");
  EXPECT_EQ(Settle(), 2);
  EXPECT_EQ(Job(array).array_left, "2-3");
}

TEST_F(ArrayTest, AHeadRestartMidArrayLosesNothingAndRunsNothingTwice) {
  Register(Reg("n1", 2));
  const api::JobId array = Submit(ArraySpec("0-9%2"));
  std::multiset<int64_t> ran;
  Settle();
  Pass();
  for (int64_t t : FinishRunning(array)) ran.insert(t);
  Settle();
  Pass();  // two more running when the head restarts
  ASSERT_EQ(Live(array).second, 2);
  // The head restarts from its stored records (every record here was stored).
  std::vector<api::Job> stored;
  for (const auto& [id, j] : state_.jobs) stored.push_back(j);
  std::vector<api::Node> nodes;
  for (const auto& [name, n] : state_.nodes) nodes.push_back(n);
  state_ = LoadState(nodes, stored, now_);
  EXPECT_EQ(state_.arrays.at(array).live.size(), 2u);
  EXPECT_EQ(Settle(), 0) << "the two running elements still count against %2";
  for (int round = 0; round < 10 && !api::IsTerminal(Job(array).state); ++round) {
    for (int64_t t : FinishRunning(array)) ran.insert(t);
    Settle();
    Pass();
    EXPECT_LE(Live(array).first, 2);
  }
  EXPECT_EQ(ran, (std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(Job(array).state, JobState::kSucceeded);
}

TEST_F(ArrayTest, EarlyStoppingStopsTheWorstElementsAtAMilestone) {
  Register(Reg("n1", 4));
  api::JobSpec spec = Spec(1, 1);
  auto sweep = api::ValidateSweep(json::parse(
      R"({"grid": {"train.lr": [1, 2, 3, 4]}, "early_stop": {"milestones": [10, 20], "keep": 0.5, "min_elements": 3}})"));
  ASSERT_TRUE(sweep) << sweep.error().message;
  spec.sweep = *sweep;
  spec.array = api::SweepArray(spec.sweep);
  const api::JobId array = Submit(spec);
  Settle();
  ASSERT_EQ(Pass(), 4);
  std::vector<api::JobId> e;
  for (int64_t t = 0; t < 4; ++t) e.push_back(*ArrayElementId(state_, array, t));
  EXPECT_EQ(Job(e[1]).sweep_values.at("train.lr"), "2");
  // Below min_elements nothing is judged; from the third on, each is ranked as it arrives.
  OnSweepProgress(state_, ctx_, e[0], 10, 1.0, now_);
  OnSweepProgress(state_, ctx_, e[1], 12, 3.0, now_);
  OnSweepProgress(state_, ctx_, e[0], 11, 9.0, now_);  // judged at 10 already
  EXPECT_EQ(Job(e[0]).state, JobState::kRunning);
  EXPECT_EQ(Job(e[1]).state, JobState::kRunning);
  OnSweepProgress(state_, ctx_, e[2], 10, 0.5, now_);
  EXPECT_EQ(Job(e[2]).state, JobState::kRunning) << "the best of three";
  OnSweepProgress(state_, ctx_, e[3], 15, 5.0, now_);
  EXPECT_EQ(Job(e[3]).state, JobState::kCancelled);
  EXPECT_EQ(Job(e[3]).reason, "early-stopped at step 10: loss 5.0000 ranks 4 of 4 (keeps the best 2)");
  EXPECT_TRUE(OnSweepProgress(state_, ctx_, e[0], 5, std::nullopt, now_).jobs_to_store.empty());
}

TEST_F(ArrayTest, AHundredThousandElementsAreOneSmallRecordAndAWindow) {
  Register(Reg("n1", 2));
  const api::JobId array = Submit(ArraySpec("0-99999"));
  EXPECT_LT(api::ToJson(Job(array)).dump().size(), 1000u);
  EXPECT_EQ(Settle(), kArrayWindow) << "without a throttle, a window of pending elements";
  EXPECT_EQ(Settle(), 0);
  EXPECT_EQ(Pass(), 2);
  EXPECT_EQ(Settle(), 2) << "the window refills as elements start";
  EXPECT_EQ(ArraySummary(state_, Job(array)).at("PENDING"), 99998);
  EXPECT_EQ(ArraySummary(state_, Job(array)).at("RUNNING"), 2);
}

// The job limits (job_limits.h): an array counts once and each element made from it too,
// so at a user's limit its next elements wait, saying so, and run once room comes back.
TEST_F(ArrayTest, AtTheUsersJobLimitElementsWaitWithThatReasonAndEveryIndexStillRunsOnce) {
  Register(Reg("n1", 4));
  ctx_.job_limits = {5, 0};
  api::JobSpec spec = ArraySpec("0-9");
  spec.user = "alice";
  const api::JobId array = Submit(spec);
  EXPECT_EQ(Settle(), 4) << "the array's record and four elements are alice's five open jobs";
  EXPECT_EQ(Settle(), 0);
  const std::string& why = ShownReason(state_, Job(array));
  EXPECT_NE(why.find("its next elements wait: user alice has 5 jobs pending or running"), std::string::npos) << why;
  EXPECT_NE(why.find("--max-jobs-per-user 5"), std::string::npos) << why;
  api::JobSpec other = Spec(1, 1);
  other.user = "alice";
  EXPECT_EQ(AcceptJob(state_, ctx_, other, now_).error().code, ErrorCode::kResourceExhausted);

  std::multiset<int64_t> ran;
  for (int round = 0; round < 10 && !api::IsTerminal(Job(array).state); ++round) {
    Pass();
    for (int64_t t : FinishRunning(array)) ran.insert(t);
    Settle();
    EXPECT_LE(state_.open.by_user.contains("alice") ? state_.open.by_user.at("alice") : 0, 5) << "round " << round;
  }
  EXPECT_EQ(Job(array).state, JobState::kSucceeded);
  EXPECT_EQ(ran, (std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_FALSE(state_.open.by_user.contains("alice")) << "nothing of alice's is open at the end";
  EXPECT_EQ(ShownReason(state_, Job(array)), Job(array).reason);
}

// Between the pass that takes an index and the commit that makes its job, the element is
// "being made", not "cancelled before it started" (cohort logs -f looks again on it).
TEST_F(ArrayTest, AnElementWhoseCommitIsUnderWayIsBeingMade) {
  Register(Reg("n1", 2));
  const api::JobId array = Submit(ArraySpec("0-1%1"));
  ArrayElements made = SettleArrays(state_, ctx_, now_);
  ASSERT_EQ(made.create.size(), 1u);
  auto during = ArrayElementId(state_, array, 0);
  ASSERT_FALSE(during.has_value());
  EXPECT_NE(during.error().message.find("is being made"), std::string::npos) << during.error().message;
  auto waiting = ArrayElementId(state_, array, 1);
  ASSERT_FALSE(waiting.has_value());
  EXPECT_NE(waiting.error().message.find("waits in its array"), std::string::npos) << waiting.error().message;
  EXPECT_EQ(ArraySummary(state_, Job(array)).at("PENDING"), 2);
  api::Job e = made.create[0];
  e.id = next_id_++;
  AddJob(state_, ctx_, e, now_);
  auto after = ArrayElementId(state_, array, 0);
  ASSERT_TRUE(after.has_value()) << after.error().message;
  EXPECT_EQ(*after, e.id);

  // A failed commit gives the index back: it waits again.
  const api::JobId second = Submit(ArraySpec("0%1"));
  made = SettleArrays(state_, ctx_, now_);
  ASSERT_EQ(made.create.size(), 1u);
  ReturnArrayElement(state_, ctx_, made.create[0], now_);
  auto back = ArrayElementId(state_, second, 0);
  ASSERT_FALSE(back.has_value());
  EXPECT_NE(back.error().message.find("waits in its array"), std::string::npos) << back.error().message;
}

}  // namespace
}  // namespace cohort::head::core::testing
