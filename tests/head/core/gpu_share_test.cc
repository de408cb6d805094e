// Issue 18 through the head's core: two halves share one GPU and a third waits; their
// tasks carry their slices and MPS limits; a freed part is free again; a type or MIG
// profile no node has is refused at submit; MIG tasks see uuids; a team's quarter-GPU jobs
// stop at its quota and accrue a quarter of the GPU-seconds each (issue 17).
#include "core_test_util.h"
#include "api/gpu_request.h"
#include "head/core/lifecycle.h"
#include "head/core/shares.h"
#include "head/core/teams.h"

namespace cohort::head::core::testing {
namespace {

using api::JobState;

api::Registration H100s(const std::string& name, int gpus) {
  api::Registration r = Reg(name, gpus);
  for (api::Gpu& g : r.gpus) {
    g.name = "NVIDIA H100 80GB HBM3";
    g.memory_bytes = int64_t{80} << 30;
  }
  r.gpu_sharing = "time-slicing";
  return r;
}

api::JobSpec Half() {
  api::JobSpec s = Spec(1, 0);
  s.gpu_share = 2;
  return s;
}

TEST_F(CoreTest, TwoHalvesShareOneGpuAThirdWaitsAndTakesTheFreedPart) {
  Register(H100s("n1", 1));
  const api::JobId a = Submit(Half());
  const api::JobId b = Submit(Half());
  const api::JobId c = Submit(Half());
  EXPECT_EQ(Pass(), 2);
  EXPECT_EQ(Job(a).state, JobState::kRunning);
  EXPECT_EQ(Job(b).state, JobState::kRunning);
  EXPECT_EQ(Job(c).state, JobState::kPending);
  EXPECT_EQ(state_.pending_reasons.at(c),
            "needs 1 node with 0.5 of a free GPU; 0 available; reserved on n1, start unknown (waiting on jobs "
            "without a time limit)");
  const api::TaskPlacement& t = Job(a).allocation.nodes[0].tasks[0];
  EXPECT_EQ(t.gpus, std::vector<int>{0});
  EXPECT_EQ(t.gpu_share, 2);
  EXPECT_EQ(t.gpu_memory_mib, 40 * 1024);
  EXPECT_EQ(Job(a).allocation.nodes[0].gpu_sharing, "time-slicing");
  EXPECT_EQ(Job(a).history.back().gpu_share_units, 2);
  EXPECT_EQ(Job(a).history.back().gpus, 0);
  const auto tasks = DesiredTasks(state_, ctx_, "n1", now_);
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].env.at("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(tasks[0].env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "50");
  EXPECT_EQ(tasks[0].env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=40960M");
  // A whole-GPU job cannot take the shared GPU.
  const api::JobId whole = Submit(Spec(1, 1));
  EXPECT_EQ(Pass(), 0);
  EXPECT_EQ(Job(whole).state, JobState::kPending);
  // a ends: its half is free again, for c.
  Beat("n1", {Exited(a, 0, 0, 0), Running(b, 0, 0, {0})});
  ASSERT_TRUE(IsTerminal(Job(a).state));
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(c).state, JobState::kRunning);
}

// `cohort nodes`, `top`, the dashboard and /metrics' free GPUs read gpus_allocated: a GPU
// that two jobs (or two tasks of one job) share is one allocated GPU, not two.
TEST_F(CoreTest, AGpuSharedByJobsAndTasksCountsAsOneAllocatedGpu) {
  Register(H100s("n1", 4));
  api::JobSpec two_halves = Half();
  two_halves.tasks_per_node = 2;
  two_halves.placement = api::Placement::kPack;
  const api::JobId pair = Submit(two_halves);
  api::JobSpec quarter = Half();
  quarter.gpu_share = 1;
  quarter.placement = api::Placement::kPack;
  const api::JobId q1 = Submit(quarter);
  const api::JobId q2 = Submit(quarter);
  ASSERT_EQ(Pass(), 3);
  const auto gpu_of = [&](api::JobId id) { return Job(id).allocation.nodes[0].gpus; };
  ASSERT_EQ(gpu_of(pair), (std::vector<int>{0, 0})) << "both tasks packed onto one GPU";
  ASSERT_EQ(gpu_of(q1), std::vector<int>{1});
  ASSERT_EQ(gpu_of(q2), std::vector<int>{1});
  const api::NodeStatus st = StatusOf(state_, state_.nodes.at("n1"), now_);
  EXPECT_EQ(st.gpus_allocated, 2) << "GPUs 0 and 1 are held, 2 and 3 are free";
  EXPECT_EQ(st.jobs.size(), 3u);
}

TEST_F(CoreTest, ATypeOrMemoryNoNodeHasIsRefusedAtSubmit) {
  Register(H100s("n1", 2));
  api::JobSpec h200 = Spec(1, 1);
  h200.gpu_type = "h200";
  auto r = NewJob(state_, h200, now_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnsatisfiable);
  EXPECT_EQ(r.error().message, "job asks for GPU type 'h200' but no node has it (the cluster has: h100 x 2)");
  api::JobSpec mig = Spec(1, 1);
  mig.gpu_type = "1g.10gb";
  EXPECT_FALSE(NewJob(state_, mig, now_));
  api::JobSpec big = Half();
  big.gpu_memory_mib = 100 * 1024;
  r = NewJob(state_, big, now_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "job asks for 102400MiB of GPU memory per task but the largest GPU has 81920MiB");
  api::JobSpec h100 = Spec(1, 2);
  h100.gpu_type = "h100";
  EXPECT_TRUE(NewJob(state_, h100, now_));
}

// topology: required makes a gang wait for one switch with its nodes; a gang larger than
// every switch would wait forever, so it is refused at submit naming the switches.
TEST_F(CoreTest, ARequiredGangNoSwitchCanHoldIsRefusedAtSubmit) {
  for (auto [name, sw] : {std::pair{"n1", "s1"}, {"n2", "s1"}, {"n3", "s2"}}) {
    api::Registration r = H100s(name, 4);
    r.labels = {{"rack", "r1"}, {"switch", sw}};
    Register(r);
  }
  api::JobSpec three = Spec(1, 1);
  three.nodes = 3;
  three.topology = api::Topology::kRequired;
  auto r = NewJob(state_, three, now_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnsatisfiable);
  EXPECT_EQ(r.error().message,
            "topology required: job needs 3 nodes with 1 free GPU under one switch, but at most 2 under one switch "
            "could host one (s1: 2, s2: 1)");
  api::JobSpec two = three;
  two.nodes = 2;
  EXPECT_TRUE(NewJob(state_, two, now_));          // s1 holds two
  three.topology = api::Topology::kPreferred;
  EXPECT_TRUE(NewJob(state_, three, now_));        // preferred never waits for a switch
  three.topology = api::Topology::kRequired;
  three.min_nodes = 2;
  EXPECT_TRUE(NewJob(state_, three, now_));        // elastic: its smallest gang fits s1
}

// gpu_memory_enforce: kill judges a task's part of a shared GPU; on whole GPUs it would
// silently do nothing, so submit refuses it (a stored job with it still loads).
TEST_F(CoreTest, KillingOverTheMemoryShareNeedsAShareAtSubmit) {
  Register(H100s("n1", 2));
  api::JobSpec whole = Spec(1, 1);
  whole.gpu_memory_enforce = "kill";
  auto r = NewJob(state_, whole, now_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().field, "gpu_memory_enforce");
  EXPECT_EQ(r.error().message,
            "gpu_memory_enforce: 'kill' stops a task over its part of a shared GPU, but this job asks for no part "
            "(give gpus_per_task 0.25-0.75 or gpu_memory); whole GPUs and MIG instances are never judged");
  EXPECT_TRUE(api::ValidateJobSpec(whole));  // what the store checks when it loads a job
  api::JobSpec half = Half();
  half.gpu_memory_enforce = "kill";
  EXPECT_TRUE(NewJob(state_, half, now_));
}

// A cancelled half-GPU job's task may outlive the cancel (its kill grace). Its part is
// held until the agent says it is gone, and a restart of the head, which keeps no
// record of such tasks, must not hand the part out before the node's first heartbeat.
TEST_F(CoreTest, AfterARestartADyingTasksPartIsNotGivenAwayBeforeTheNodeReports) {
  Register(H100s("n1", 1));
  const api::JobId a = Submit(Half());
  const api::JobId b = Submit(Half());
  ASSERT_EQ(Pass(), 2);
  ASSERT_TRUE(Cancel(state_, ctx_, a, now_).has_value());
  const api::JobId c = Submit(Half());
  Beat("n1", {Running(a, 0, 0, {0}), Running(b, 0, 0, {0})});  // a still shutting down
  EXPECT_EQ(Pass(), 0);

  // The head restarts: every record through its stored form.
  std::vector<api::Job> jobs;
  for (const auto& [id, job] : state_.jobs) jobs.push_back(*api::JobFromJson(api::ToJson(job)));
  std::vector<api::Node> nodes;
  for (const auto& [name, node] : state_.nodes) nodes.push_back(node);
  state_ = LoadState(std::move(nodes), std::move(jobs), now_);
  Advance(100);
  EXPECT_EQ(Pass(), 0) << "n1 has not said which tasks still run there";
  EXPECT_EQ(Job(c).state, JobState::kPending);
  EXPECT_EQ(state_.pending_reasons.at(c),
            "needs 1 node with 0.5 of a free GPU; 0 available (1 node unheard since the head restarted)");
  Beat("n1", {Running(a, 0, 0, {0}), Running(b, 0, 0, {0})});
  EXPECT_EQ(Pass(), 0) << "a's task still holds the GPU";
  EXPECT_EQ(Job(c).state, JobState::kPending);
  Beat("n1", {Running(b, 0, 0, {0})});  // a's task is gone
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(c).state, JobState::kRunning);
}

TEST_F(CoreTest, MigInstancesAreScheduledByProfileAndNamedByUuid) {
  api::Registration r = H100s("n1", 3);
  for (int i = 0; i < 2; ++i) {
    r.gpus[static_cast<size_t>(i)].mig_profile = "1g.10gb";
    r.gpus[static_cast<size_t>(i)].mig_parent = 0;
    r.gpus[static_cast<size_t>(i)].uuid = "MIG-n1-" + std::to_string(i);
    r.gpus[static_cast<size_t>(i)].memory_bytes = int64_t{10} << 30;
  }
  Register(r);
  api::JobSpec spec = Spec(1, 2);
  spec.gpu_type = "1g.10gb";
  const api::JobId mig = Submit(spec);
  const api::JobId plain = Submit(Spec(1, 1));  // the one whole GPU, never an instance
  EXPECT_EQ(Pass(), 2);
  EXPECT_EQ(Job(mig).state, JobState::kRunning);
  EXPECT_EQ(Job(plain).allocation.nodes[0].gpus, std::vector<int>{2});
  EXPECT_FALSE(NewJob(state_, Spec(1, 2), now_)) << "two whole GPUs: the node has one";
  const api::TaskPlacement& t = Job(mig).allocation.nodes[0].tasks[0];
  EXPECT_EQ(t.gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(t.devices, (std::vector<std::string>{"MIG-n1-0", "MIG-n1-1"}));
  const auto tasks = DesiredTasks(state_, ctx_, "n1", now_);
  EXPECT_EQ(tasks[0].env.at("CUDA_VISIBLE_DEVICES"), "MIG-n1-0,MIG-n1-1");
}

TEST_F(CoreTest, ATeamsQuarterGpuJobsStopAtItsQuotaAndAccrueQuarterGpuSeconds) {
  Register(H100s("n1", 2));
  api::Team ml;
  ml.name = "ml";
  ml.quota_gpus = 1;
  ml.borrow_limit_gpus = 0;
  ASSERT_TRUE(CreateTeam(state_, ctx_, ml, now_).has_value());
  std::vector<api::JobId> ids;
  for (int i = 0; i < 5; ++i) {
    api::JobSpec s = Spec(1, 0);
    s.gpu_share = 1;
    s.team = "ml";
    ids.push_back(Submit(s));
  }
  EXPECT_EQ(Pass(), 4) << "four quarters are the team's one GPU";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Job(ids[static_cast<size_t>(i)]).state, JobState::kRunning) << i;
  EXPECT_EQ(Job(ids[4]).state, JobState::kPending);
  EXPECT_EQ(state_.pending_reasons.at(ids[4]),
            "team ml is at its limit: 1 of 1 GPUs in use (quota 1 + borrow limit 0); this job needs 0.25");
  EXPECT_EQ(TeamUnitsInUse(state_, "ml"), api::kGpuShareUnits);
  const api::SharesReport report = Shares(state_, ctx_, now_);
  const auto row = std::find_if(report.teams.begin(), report.teams.end(), [](const auto& t) { return t.name == "ml"; });
  ASSERT_NE(row, report.teams.end());
  EXPECT_DOUBLE_EQ(row->gpus_in_use, 1);
  EXPECT_DOUBLE_EQ(row->borrowed_gpus, 0);
  // A quota below the quarters it holds is refused, in GPUs with their fraction.
  api::TeamPatch lower;
  lower.quota_gpus = 0;
  const auto refused = UpdateTeam(state_, ctx_, "ml", lower, now_);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("quota.gpus: 0 is below the 1 GPUs team 'ml' holds now"), std::string::npos)
      << refused.error().message;
  // Four quarters for 100 s are 100 GPU-seconds (decay over 100 s of a long half-life aside).
  Advance(100'000);
  const double used = UsageAsOf(state_, ctx_, now_.unix_ms).at("ml");
  EXPECT_NEAR(used, 100, 0.5);
  EXPECT_LE(used, 100);
  // One ends: its quarter is free again for the fifth, and the usage rebuilt from the
  // history (as on a head restart) counts quarters too.
  std::vector<api::TaskReport> reports = {Exited(ids[0], 0, 0, 0)};
  for (int i = 1; i < 4; ++i) {
    const api::JobId id = ids[static_cast<size_t>(i)];
    reports.push_back(Running(id, 0, 0, Job(id).allocation.nodes[0].tasks[0].gpus));
  }
  Beat("n1", reports);
  ASSERT_TRUE(IsTerminal(Job(ids[0]).state));
  EXPECT_EQ(Pass(), 1);
  EXPECT_EQ(Job(ids[4]).state, JobState::kRunning);
  Advance(100'000);
  const double accrued = UsageAsOf(state_, ctx_, now_.unix_ms).at("ml");
  RebuildUsage(state_, ctx_, now_);
  EXPECT_NEAR(state_.shares.usage.at("ml"), accrued, 1e-6 * accrued);
  EXPECT_NEAR(accrued, 200, 1);
}

}  // namespace
}  // namespace cohort::head::core::testing
