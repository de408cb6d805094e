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

// A batch script (cohort batch): rank 0 runs the script with its arguments and output
// files, the other tasks hold without either, and the script's exit ends the job with its
// code, the holding tasks still running.
TEST_F(CoreTest, ABatchScriptRunsOnItsFirstTaskAndItsExitEndsTheJob) {
  Register(Reg("n1", 2));
  Register(Reg("n2", 2));
  auto spec = AllocationSpec(2, 1);
  spec.script = "#!/bin/sh\nexit 3\n";
  spec.command = {"arg"};
  spec.output = "slurm-%j.out";
  const api::JobId failing = Submit(spec);
  spec.script = "#!/bin/sh\ntrue\n";
  const api::JobId ok = Submit(spec);
  ASSERT_EQ(Pass(), 2);
  for (const std::string node : {"n1", "n2"}) {
    auto launches = DesiredTasks(state_, ctx_, node, now_);
    ASSERT_EQ(launches.size(), 2u) << node;
    for (const api::TaskLaunch& l : launches) {
      const std::string first = Job(l.job).allocation.nodes.front().node;
      EXPECT_EQ(l.rank == 0, node == first);
      if (l.rank == 0) {
        EXPECT_FALSE(l.hold);
        EXPECT_EQ(l.script, Job(l.job).spec.script);
        EXPECT_EQ(l.command, (std::vector<std::string>{"arg"}));
        EXPECT_EQ(l.output, "slurm-%j.out");
        EXPECT_EQ(l.env.at("SLURM_JOB_ID"), std::to_string(l.job));
        EXPECT_EQ(l.env.at("SLURM_NNODES"), "2");
      } else {
        EXPECT_TRUE(l.hold);
        EXPECT_TRUE(l.script.empty());
        EXPECT_TRUE(l.command.empty());
        EXPECT_TRUE(l.output.empty()) << "a holding task writes no output file";
      }
    }
  }
  // Each node reports both jobs' tasks (a task missing from its node's report is gone).
  const auto rank_on = [&](api::JobId id, const std::string& node) {
    return Job(id).allocation.nodes.front().node == node ? 0 : 1;
  };
  const std::string first = Job(failing).allocation.nodes.front().node;
  const std::string second = Job(failing).allocation.nodes.back().node;
  Beat(second, {Running(failing, 0, 1), Running(ok, 0, rank_on(ok, second))});
  Beat(first, {Exited(failing, 0, 0, 3), Running(ok, 0, rank_on(ok, first))});
  EXPECT_EQ(Job(failing).state, JobState::kFailed);
  EXPECT_EQ(Job(failing).exit_code, 3);
  EXPECT_EQ(Job(failing).reason, "the batch script on " + first + " exited with code 3");

  const std::string ok_first = Job(ok).allocation.nodes.front().node;
  Beat(ok_first, {Exited(ok, 0, 0, 0)});
  EXPECT_EQ(Job(ok).state, JobState::kSucceeded);
  EXPECT_EQ(Job(ok).reason, "the batch script exited 0");
  EXPECT_EQ(Job(ok).exit_code, 0);
  EXPECT_TRUE(DesiredTasks(state_, ctx_, "n1", now_).empty() && DesiredTasks(state_, ctx_, "n2", now_).empty())
      << "the holding tasks are stopped";
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
