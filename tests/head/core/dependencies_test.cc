// Job dependencies in the head's core (core/dependencies.h): after, afterany, afterok,
// afternotok and singleton across success, failure and cancellation, a chain, one never
// satisfiable (pending, or cancelled with kill_on_invalid_dep), and arrays as targets.
#include "core_test_util.h"
#include "head/core/arrays.h"
#include "head/core/dependencies.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

class DependencyTest : public CoreTest {
 protected:
  api::JobSpec After(const std::string& dependency, bool kill = false) {
    api::JobSpec s = Spec(1, 0);
    s.dependency = dependency;
    s.kill_on_invalid_dep = kill;
    return s;
  }
  // `id` exits with `code`; every other job running on n1 goes on running.
  void Exit(api::JobId id, int code) {
    std::vector<api::TaskReport> tasks = {Exited(id, Job(id).attempt, 0, code)};
    for (api::JobId other : state_.node_jobs["n1"]) {
      if (other != id) tasks.push_back(Running(other, Job(other).attempt, 0));
    }
    Beat("n1", tasks);
  }
  std::string Reason(api::JobId id) { return GetJob(state_, id)->reason; }
};

TEST_F(DependencyTest, AfterOkChainsAfterNotOkAndAfterAny) {
  Register(Reg("n1", 0));
  const api::JobId a = Submit(Spec(1, 0));
  const api::JobId b = Submit(Spec(1, 0));
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  const api::JobId ok = Submit(After("afterok:" + sa));
  const api::JobId chain = Submit(After("afterok:" + std::to_string(ok)));
  const api::JobId notok = Submit(After("afternotok:" + sb));
  const api::JobId any = Submit(After("afterany:" + sa + ":" + sb));
  const api::JobId after = Submit(After("after:" + sa));
  ASSERT_EQ(Pass(), 2) << "a and b";
  EXPECT_EQ(Job(after).state, JobState::kPending);
  ASSERT_EQ(Pass(), 1) << "`after` once a started";
  EXPECT_EQ(Job(after).state, JobState::kRunning);
  EXPECT_EQ(Reason(ok), "Dependency (afterok:" + sa + ": RUNNING)");
  EXPECT_EQ(Metrics(state_, now_).pending_by_reason.at("dependency"), 4);
  Exit(a, 0);
  Exit(b, 1);
  ASSERT_EQ(Pass(), 3) << "ok, notok and any: " << Reason(ok) << " | " << Reason(notok) << " | " << Reason(any)
                       << " | a " << api::JobStateName(Job(a).state) << " b " << api::JobStateName(Job(b).state);
  EXPECT_EQ(Job(chain).state, JobState::kPending);
  Exit(ok, 0);
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(chain).state, JobState::kRunning);
  EXPECT_EQ(Job(notok).state, JobState::kRunning);
  EXPECT_EQ(Job(any).state, JobState::kRunning);
}

TEST_F(DependencyTest, NeverSatisfiableStaysPendingOrIsCancelled) {
  Register(Reg("n1", 0));
  const api::JobId a = Submit(Spec(1, 0));
  const api::JobId cancelled = Submit(Spec(1, 0));
  const std::string sa = std::to_string(a);
  const api::JobId stays = Submit(After("afterok:" + sa));
  const api::JobId killed = Submit(After("afterok:" + sa, true));
  const api::JobId notok = Submit(After("afternotok:" + std::to_string(cancelled)));
  const api::JobId after_cancel = Submit(After("after:" + std::to_string(cancelled)));
  ASSERT_TRUE(Cancel(state_, ctx_, cancelled, now_));
  Pass();
  EXPECT_EQ(Job(notok).state, JobState::kRunning) << "a cancelled job is not ok";
  EXPECT_EQ(Job(after_cancel).state, JobState::kRunning) << "after: started or cancelled";
  Exit(a, 2);
  Pass();
  EXPECT_EQ(Job(stays).state, JobState::kPending);
  EXPECT_EQ(Reason(stays), "DependencyNeverSatisfied (afterok:" + sa + ": FAILED)");
  EXPECT_EQ(Job(killed).state, JobState::kCancelled);
  EXPECT_EQ(Job(killed).reason, "DependencyNeverSatisfied (afterok:" + sa + ": FAILED)");
  // afternotok on a job that succeeded: never.
  const api::JobId good = Submit(Spec(1, 0));
  Pass();
  Exit(good, 0);
  const api::JobId never = Submit(After("afternotok:" + std::to_string(good)));
  Pass();
  EXPECT_TRUE(Reason(never).starts_with("DependencyNeverSatisfied")) << Reason(never);
}

TEST_F(DependencyTest, SubmitChecksTheTargetsExist) {
  Register(Reg("n1", 0));
  auto missing = NewJob(state_, After("afterok:42"), now_);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().field, "dependency");
  EXPECT_NE(missing.error().message.find("there is no job 42"), std::string::npos);
  const api::JobId single = Submit(Spec(1, 0));
  auto element = NewJob(state_, After("afterok:" + std::to_string(single) + "_3"), now_);
  ASSERT_FALSE(element);
  EXPECT_NE(element.error().message.find("is not a job array"), std::string::npos);
}

TEST_F(DependencyTest, SingletonWaitsForEarlierJobsOfTheSameNameAndUser) {
  Register(Reg("n1", 0));
  api::JobSpec s = After("singleton");
  const api::JobId first = Submit(s);
  const api::JobId second = Submit(s);
  api::JobSpec other = s;
  other.user = "bob";
  const api::JobId bobs = Submit(other);
  ASSERT_EQ(Pass(), 2) << "the first of alice's and bob's";
  EXPECT_EQ(Job(first).state, JobState::kRunning);
  EXPECT_EQ(Job(bobs).state, JobState::kRunning);
  EXPECT_TRUE(Reason(second).starts_with("Dependency (singleton: job " + std::to_string(first))) << Reason(second);
  Exit(first, 0);
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(second).state, JobState::kRunning);
}

TEST_F(DependencyTest, AnArrayIsSatisfiedByAllItsElementsAndAnElementByItself) {
  Register(Reg("n1", 0));
  api::JobSpec as = Spec(1, 0);
  as.array = "0-1";
  const api::JobId array = Submit(as);
  const std::string sa = std::to_string(array);
  const api::JobId all = Submit(After("afterok:" + sa));
  const api::JobId one = Submit(After("afterany:" + sa + "_1"));
  ArrayElements made = SettleArrays(state_, ctx_, now_);
  for (auto& e : made.create) {
    e.id = next_id_++;
    AddJob(state_, ctx_, e, now_);
  }
  ASSERT_EQ(Pass(), 2) << "the two elements";
  EXPECT_TRUE(Reason(one).starts_with("Dependency (afterany:" + sa + "_1: ")) << Reason(one);
  const api::JobId e0 = *ArrayElementId(state_, array, 0), e1 = *ArrayElementId(state_, array, 1);
  Exit(e1, 0);
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(one).state, JobState::kRunning);
  EXPECT_EQ(Job(all).state, JobState::kPending) << "element 0 still runs";
  Exit(e0, 0);
  (void)SettleArrays(state_, ctx_, now_);  // the array ends SUCCEEDED
  ASSERT_EQ(Job(array).state, JobState::kSucceeded);
  ASSERT_EQ(Pass(), 1);
  EXPECT_EQ(Job(all).state, JobState::kRunning);
}

}  // namespace
}  // namespace cohort::head::core::testing
