// Allocations and steps on the wire (api/step.h): the allocation kind's rules, which tasks
// a step runs on, what it may not ask, and the step record's codec.
#include <gtest/gtest.h>

#include "api/step.h"

namespace cohort::api {
namespace {

TEST(AllocationSpec, HoldsResourcesWithoutACommand) {
  auto s = JobSpecFromJson(json{{"kind", "allocation"}, {"nodes", 2}, {"gpus_per_node", 4}, {"time_limit_s", 60}});
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_TRUE(s->is_allocation());
  EXPECT_EQ(s->name, "allocation");
  EXPECT_TRUE(s->command.empty());
  json j = ToJson(*s);
  EXPECT_EQ(j["kind"], "allocation");
  auto again = JobSpecFromJson(j);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(ToJson(*again), j);
  // A batch job still needs a command.
  EXPECT_FALSE(JobSpecFromJson(json{{"nodes", 2}}).has_value());
}

TEST(AllocationSpec, RefusesWhatOnlyABatchJobHas) {
  const std::pair<json, std::string> cases[] = {
      {{{"command", {"true"}}}, "command"},
      {{{"array", "0-3"}}, "array"},
      {{{"max_restarts", 1}}, "max_restarts"},
      {{{"nodes", 2}, {"min_nodes", 1}}, "min_nodes"},
      {{{"container", {{"image", "busybox"}}}}, "container"},
      {{{"progress_timeout_s", 60}}, "progress_timeout_s"},
      {{{"checkpoint_signal", "USR1"}}, "checkpoint_signal"},
  };
  for (const auto& [extra, field] : cases) {
    json j = {{"kind", "allocation"}};
    j.update(extra);
    auto s = JobSpecFromJson(j);
    ASSERT_FALSE(s.has_value()) << j.dump();
    EXPECT_EQ(s.error().field, field) << s.error().message;
    EXPECT_NE(s.error().message.find("allocation"), std::string::npos) << s.error().message;
  }
  auto bad = JobSpecFromJson(json{{"kind", "interactive"}, {"command", {"true"}}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("'batch', 'service' or 'allocation'"), std::string::npos);
}

// A batch script (cohort batch, sbatch) is an allocation that carries its script's text,
// with `command` as the script's arguments; it may be an array and write output files.
TEST(BatchScriptSpec, CarriesItsScriptAndArguments) {
  const std::string script = "#!/bin/bash\n#SBATCH -N 2\nsrun hostname\n";
  auto s = JobSpecFromJson(json{{"kind", "allocation"}, {"script", script}, {"command", {"a", "b c"}},
                                {"nodes", 2}, {"array", "0-3"}, {"output", "slurm-%A_%a.out"}});
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_TRUE(s->is_batch_script());
  EXPECT_EQ(s->name, "sbatch");
  EXPECT_EQ(s->command, (std::vector<std::string>{"a", "b c"}));
  json j = ToJson(*s);
  EXPECT_EQ(j["script"], script);
  auto again = JobSpecFromJson(j);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(ToJson(*again), j);
  // Without a script: no "script" on the wire, and a plain allocation.
  EXPECT_FALSE(ToJson(JobSpecFromJson(json{{"kind", "allocation"}}).value()).contains("script"));
}

TEST(BatchScriptSpec, RefusesWhatIsNoScriptItsInterpreterCouldRun) {
  const std::pair<json, std::string> cases[] = {
      {{{"kind", "allocation"}, {"script", "echo hi\n"}}, "its first line must start with #!"},
      {{{"kind", "allocation"}, {"script", std::string("#!/bin/sh\necho \0x\n", 18)}}, "NUL byte at offset 15"},
      {{{"kind", "allocation"}, {"script", "#!/bin/sh\necho a\r\necho b\r\n"}}, "CR LF, first on line 2"},
      {{{"kind", "allocation"}, {"script", "#!/bin/sh\n" + std::string(kMaxScriptBytes, '#')}}, "at most 1048576"},
      {{{"script", "#!/bin/sh\n"}, {"command", {"true"}}}, "a batch script runs only in an allocation"},
      {{{"kind", "allocation"}, {"script", "#!/bin/sh\n"}, {"max_restarts", 1}}, "never restarted"},
  };
  for (const auto& [j, want] : cases) {
    auto s = JobSpecFromJson(j);
    ASSERT_FALSE(s.has_value()) << want;
    EXPECT_NE(s.error().message.find(want), std::string::npos) << s.error().message;
  }
}

// The script travels to its node in the launch, and only there.
TEST(BatchScriptSpec, TheLaunchCarriesTheScript) {
  HeartbeatReply r;
  TaskLaunch l;
  l.job = 7;
  l.script = "#!/bin/sh\necho hi\n";
  l.command = {"arg"};
  r.tasks.push_back(l);
  TaskLaunch held;
  held.job = 7;
  held.rank = 1;
  held.hold = true;
  r.tasks.push_back(held);
  auto back = HeartbeatReplyFromJson(ToJson(r));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ASSERT_EQ(back->tasks.size(), 2u);
  EXPECT_EQ(back->tasks[0].script, l.script);
  EXPECT_EQ(back->tasks[0].command, l.command);
  EXPECT_TRUE(back->tasks[0].has_details());
  EXPECT_TRUE(back->tasks[1].script.empty());
  EXPECT_TRUE(back->tasks[1].hold);
}

// A RUNNING allocation of `nodes` nodes x `per_node` tasks with `gpus` GPUs per node.
Job Allocation(int nodes, int per_node, int gpus) {
  Job job;
  job.id = 12;
  job.state = JobState::kRunning;
  job.spec.allocation = true;
  job.spec.nodes = nodes;
  job.spec.tasks_per_node = per_node;
  job.spec.gpus_per_node = gpus;
  for (int n = 0; n < nodes; ++n) {
    NodeAllocation na;
    na.node = "n" + std::to_string(n);
    na.node_rank = n;
    // Local ranks listed backwards: the plan orders them.
    for (int l = per_node - 1; l >= 0; --l) na.tasks.push_back({n * per_node + l, l, {}});
    job.allocation.nodes.push_back(na);
  }
  return job;
}

TEST(PlanStep, TakesAllOrTheFirstNodesAndSpreadsTasks) {
  const Job job = Allocation(3, 2, 4);
  EXPECT_EQ(PlanStep(job, {{"true"}}).value(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(PlanStep(job, {{"true"}, 1}).value(), (std::vector<int>{0, 1}));
  EXPECT_EQ(PlanStep(job, {{"true"}, 0, 3}).value(), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(PlanStep(job, {{"true"}, 2, 3}).value(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(PlanStep(job, {{"true"}, 0, 0, 4}).value().size(), 6u);
}

TEST(PlanStep, RefusesMoreThanTheAllocationHolds) {
  const Job job = Allocation(2, 2, 4);
  auto r = PlanStep(job, {{"true"}, 3});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "nodes: the step asks 3 nodes; allocation 12 holds 2");
  r = PlanStep(job, {{"true"}, 1, 3});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "tasks");
  EXPECT_NE(r.error().message.find("holds 2 task(s) per node"), std::string::npos) << r.error().message;
  r = PlanStep(job, {{"true"}, 2, 1});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("at least one task per node"), std::string::npos);
  r = PlanStep(job, {{"true"}, 0, 0, 8});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "gpus: the step asks 8 GPU(s) per node; allocation 12 holds 4 per node");

  Job batch = job;
  batch.spec.allocation = false;
  r = PlanStep(batch, {{"true"}});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("job 12 is not an allocation"), std::string::npos);
  Job pending = job;
  pending.state = JobState::kPending;
  r = PlanStep(pending, {{"true"}});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "allocation 12 is PENDING: a step needs it RUNNING");
}

TEST(StepCodec, RoundTripsAndChecks) {
  StepRecord s{3, {"sh", "-c", "hostname"}, 1000, 2000, {{0, "n0", "ab12", 0}, {1, "n1", "cd34", std::nullopt}}};
  auto back = StepRecordFromJson(ToJson(s));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), ToJson(s));
  EXPECT_FALSE(back->tasks[1].exit_code.has_value());
  json bad = ToJson(s);
  bad["tasks"][0]["exit_code"] = 300;
  EXPECT_FALSE(StepRecordFromJson(bad).has_value());
  auto req = StepRequestFromJson(json{{"command", json::array()}});
  ASSERT_FALSE(req.has_value());
  EXPECT_NE(req.error().message.find("command"), std::string::npos);
  req = StepRequestFromJson(json{{"command", {"true"}}, {"nodes", -1}});
  ASSERT_FALSE(req.has_value());
  EXPECT_NE(req.error().message.find("nodes"), std::string::npos);
}

}  // namespace
}  // namespace cohort::api
