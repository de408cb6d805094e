// Issue 18 through the head's core: two halves share one GPU and a third waits; their
// tasks carry their slices and MPS limits; a freed part is free again; a type or MIG
// profile no node has is refused at submit; MIG tasks see uuids.
#include "core_test_util.h"
#include "head/core/lifecycle.h"

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
  EXPECT_EQ(state_.pending_reasons.at(c), "needs 1 node with 0.5 of a free GPU; 0 available");
  const api::TaskPlacement& t = Job(a).allocation.nodes[0].tasks[0];
  EXPECT_EQ(t.gpus, std::vector<int>{0});
  EXPECT_EQ(t.gpu_share, 2);
  EXPECT_EQ(t.gpu_memory_mib, 40 * 1024);
  EXPECT_EQ(Job(a).allocation.nodes[0].gpu_sharing, "time-slicing");
  EXPECT_EQ(Job(a).history.back().gpu_share_units, 2);
  EXPECT_EQ(Job(a).history.back().gpus, 0);
  const auto tasks = DesiredTasks(state_, ctx_, "n1", {});
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
  const auto tasks = DesiredTasks(state_, ctx_, "n1", {});
  EXPECT_EQ(tasks[0].env.at("CUDA_VISIBLE_DEVICES"), "MIG-n1-0,MIG-n1-1");
}

}  // namespace
}  // namespace cohort::head::core::testing
