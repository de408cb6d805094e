// Allocations and their steps in the core (core/steps.h): an allocation's tasks go out held
// (no command), steps are numbered and stored, a session's exit lands in its step, and the
// holder's end decides the allocation's final state.
#include "core_test_util.h"
#include "head/core/lifecycle.h"
#include "head/core/steps.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

api::JobSpec AllocationSpec(int nodes, int gpus) {
  api::JobSpec s = Spec(nodes, gpus);
  s.command.clear();
  s.allocation = true;
  s.name = "allocation";
  return s;
}

api::StepRecord TwoTaskStep() {
  api::StepRecord s;
  s.command = {"hostname"};
  s.tasks = {{0, "n1", "aa", std::nullopt}, {1, "n2", "bb", std::nullopt}};
  return s;
}

TEST_F(CoreTest, AnAllocationsTasksAreHeldAndItsStepsRecorded) {
  Register(Reg("n1", 2));
  Register(Reg("n2", 2));
  const api::JobId id = Submit(AllocationSpec(2, 1));
  auto early = TwoTaskStep();
  auto pending = AddStep(state_, ctx_, id, early, now_);
  ASSERT_FALSE(pending.has_value()) << "a PENDING allocation takes no step";
  EXPECT_EQ(pending.error().code, ErrorCode::kFailedPrecondition);
  ASSERT_EQ(Pass(), 1);
  ASSERT_EQ(Job(id).state, JobState::kRunning);
  auto launches = DesiredTasks(state_, ctx_, "n1", now_);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_TRUE(launches[0].hold);
  EXPECT_TRUE(launches[0].command.empty());
  EXPECT_TRUE(launches[0].has_details());
  EXPECT_FALSE(launches[0].env.empty()) << "a held task still gets the job contract";

  auto first = TwoTaskStep();
  auto fx = AddStep(state_, ctx_, id, first, now_);
  ASSERT_TRUE(fx.has_value()) << fx.error().message;
  EXPECT_TRUE(fx->jobs_to_store.contains(id));
  EXPECT_EQ(first.id, 1);
  auto second = TwoTaskStep();
  second.tasks = {{1, "n2", "cc", std::nullopt}};
  ASSERT_TRUE(AddStep(state_, ctx_, id, second, now_).has_value());
  EXPECT_EQ(second.id, 2);

  // Exits land in the step that owns the session; the step ends with its last task.
  auto exit = RecordStepExit(state_, ctx_, id, "bb", 3, now_);
  EXPECT_TRUE(exit.jobs_to_store.contains(id));
  EXPECT_EQ(Job(id).steps[0].tasks[1].exit_code, 3);
  EXPECT_EQ(Job(id).steps[0].end_ms, 0);
  RecordStepExit(state_, ctx_, id, "aa", 0, now_);
  EXPECT_GT(Job(id).steps[0].end_ms, 0);
  EXPECT_TRUE(RecordStepExit(state_, ctx_, id, "aa", 9, now_).jobs_to_store.empty()) << "an exit is kept once";
  EXPECT_EQ(Job(id).steps[0].tasks[0].exit_code, 0);
  EXPECT_TRUE(RecordStepExit(state_, ctx_, id, "zz", 1, now_).jobs_to_store.empty()) << "no step has that session";

  // The holder ends it: the command's exit code decides.
  ASSERT_TRUE(EndAllocation(state_, ctx_, id, 0, 0, now_).has_value());
  EXPECT_EQ(Job(id).state, JobState::kSucceeded);
  auto again = EndAllocation(state_, ctx_, id, 0, 0, now_);
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("has already ended (SUCCEEDED)"), std::string::npos);
}

TEST_F(CoreTest, TheHoldersEndDecidesTheAllocationsState) {
  Register(Reg("n1", 4));
  const api::JobId failed = Submit(AllocationSpec(1, 1));
  const api::JobId cancelled = Submit(AllocationSpec(1, 1));
  const api::JobId batch = Submit(Spec(1, 1));
  ASSERT_EQ(Pass(), 3);
  ASSERT_TRUE(EndAllocation(state_, ctx_, failed, 4, 0, now_).has_value());
  EXPECT_EQ(Job(failed).state, JobState::kFailed);
  EXPECT_EQ(Job(failed).exit_code, 4);
  EXPECT_EQ(Job(failed).reason, "released: the command exited 4");
  ASSERT_TRUE(EndAllocation(state_, ctx_, cancelled, 143, SIGTERM, now_).has_value());
  EXPECT_EQ(Job(cancelled).state, JobState::kCancelled);
  EXPECT_EQ(Job(cancelled).reason, "released: cohort alloc was stopped by SIGTERM");
  auto not_alloc = EndAllocation(state_, ctx_, batch, 0, 0, now_);
  ASSERT_FALSE(not_alloc.has_value());
  EXPECT_NE(not_alloc.error().message.find("is not an allocation"), std::string::npos);
  EXPECT_EQ(Job(batch).state, JobState::kRunning);
  EXPECT_FALSE(DesiredTasks(state_, ctx_, "n1", now_).front().hold) << "a batch job's task runs its command";
}

}  // namespace
}  // namespace cohort::head::core::testing
