// Issue 18 in the scheduler: shared GPUs in exact share units, gpu_memory packing, typed
// devices and MIG instances, NVLink islands inside a node, switches across nodes.
#include "sched/gpu_fit.h"

#include <gtest/gtest.h>

#include <set>

#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr int64_t kGiB = 1024;  // MiB

GpuView Device(int index, std::string type = "h100", int64_t memory_mib = 80 * kGiB) {
  GpuView d;
  d.index = index;
  d.type = std::move(type);
  d.mig = d.type.find("g.") != std::string::npos;
  d.memory_mib = memory_mib;
  d.free_memory_mib = memory_mib;
  return d;
}

// A node whose devices are given; the whole, non-MIG, unshared ones are free_gpus.
NodeView DetailNode(std::string id, std::vector<GpuView> devices, std::string network_switch = "") {
  NodeView v = IdleNode(std::move(id), 0);
  for (const GpuView& d : devices) {
    if (d.mig) continue;
    ++v.total_gpus;
    if (d.free_share == kGpuShareUnits) v.free_gpus.push_back(d.index);
  }
  v.gpus = std::move(devices);
  v.network_switch = std::move(network_switch);
  return v;
}

NodeView H100Node(std::string id, int n, std::string network_switch = "") {
  std::vector<GpuView> devices;
  for (int i = 0; i < n; ++i) devices.push_back(Device(i));
  return DetailNode(std::move(id), std::move(devices), std::move(network_switch));
}

JobRequest ShareJob(int64_t id, int share, int64_t memory_mib = 0, int tasks = 1) {
  JobRequest job = GpuJob(id, 1, 0);
  job.gpu_share = share;
  job.gpu_memory_mib = memory_mib;
  job.tasks_per_node = tasks;
  return job;
}

JobRequest TypedJob(int64_t id, int nodes, int gpus, std::string type) {
  JobRequest job = GpuJob(id, nodes, gpus);
  job.gpu_type = std::move(type);
  return job;
}

TEST(GpuShare, TwoHalvesShareOneGpuAndAThirdWaits) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {H100Node("a", 1)};
  snap.pending = {ShareJob(1, 2), ShareJob(2, 2), ShareJob(3, 2)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:0");
  EXPECT_EQ(Where(d, 2), "a:0");
  EXPECT_EQ(Where(d, 3), "");
  EXPECT_EQ(Reason(d, 3), "needs 1 node with 0.5 of a free GPU; 0 available"
            "; reserved on a, start unknown (waiting on jobs without a time limit)");
  const JobPlacement* p = Find(d, 1);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->nodes[0].slices.size(), 1u);
  EXPECT_EQ(p->nodes[0].slices[0].share, 2);
  EXPECT_EQ(p->nodes[0].slices[0].memory_mib, 40 * kGiB);  // the share's part of 80GiB
}

TEST(GpuShare, QuartersAddUpExactlyAndAWholeGpuJobNeverTakesASharedGpu) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {H100Node("a", 2)};
  // 0.25 + 0.75 fill GPU 0 (packed onto the shared GPU, not spread); a whole-GPU job
  // takes GPU 1; one more quarter finds nothing.
  snap.pending = {ShareJob(1, 1), ShareJob(2, 3), GpuJob(3, 1, 1), ShareJob(4, 1), GpuJob(5, 1, 1)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:0");
  EXPECT_EQ(Where(d, 2), "a:0");
  EXPECT_EQ(Where(d, 3), "a:1");
  EXPECT_EQ(Where(d, 4), "");
  EXPECT_EQ(Where(d, 5), "");
}

TEST(GpuShare, AWholeGpuJobSkipsAGpuThatTasksShare) {
  Snapshot snap;
  snap.now_ms = kNow;
  std::vector<GpuView> devices = {Device(0), Device(1)};
  devices[0].free_share = 3;  // a running quarter
  devices[0].free_memory_mib = 60 * kGiB;
  snap.nodes = {DetailNode("a", devices)};
  snap.pending = {GpuJob(1, 1, 1), GpuJob(2, 1, 1)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:1");
  EXPECT_EQ(Where(d, 2), "");
}

TEST(GpuShare, MemoryRequestsPackByMemoryAndCountTheirShare) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {H100Node("a", 2)};
  // 30GiB of an 80GiB GPU is 2 units (rounded up); two fit on GPU 0 by share (4 units) and
  // by memory (60 of 80GiB); the third goes to GPU 1. 50GiB then fits nowhere by memory.
  snap.pending = {ShareJob(1, 0, 30 * kGiB), ShareJob(2, 0, 30 * kGiB), ShareJob(3, 0, 30 * kGiB),
                  ShareJob(4, 0, 50 * kGiB)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:0");
  EXPECT_EQ(Where(d, 2), "a:0");
  EXPECT_EQ(Where(d, 3), "a:1");
  EXPECT_EQ(Where(d, 4), "");
  EXPECT_EQ(Reason(d, 4), "needs 1 node with a shareable GPU with 50GiB of its memory; 0 available"
            "; reserved on a, start unknown (waiting on jobs without a time limit)");
  EXPECT_EQ(Find(d, 1)->nodes[0].slices[0].share, 2);
  EXPECT_EQ(Find(d, 1)->nodes[0].slices[0].memory_mib, 30 * kGiB);
}

TEST(GpuShare, AShareAndMemoryMustBothFit) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {H100Node("a", 1)};
  // A quarter with 70GiB leaves 10GiB: another quarter with 20GiB has share but not memory.
  snap.pending = {ShareJob(1, 1, 70 * kGiB), ShareJob(2, 1, 20 * kGiB), ShareJob(3, 1, 10 * kGiB)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:0");
  EXPECT_EQ(Where(d, 2), "");
  EXPECT_EQ(Where(d, 3), "a:0");
}

TEST(GpuShare, TasksOfOneJobShareLikeJobs) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {H100Node("a", 2)};
  // Four tasks of a half each: two GPUs, two tasks on each, in task order.
  snap.pending = {ShareJob(1, 2, 0, 4)};
  const Decision d = Schedule(snap);
  const JobPlacement* p = Find(d, 1);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->nodes[0].slices.size(), 4u);
  std::multiset<int> gpus(p->nodes[0].gpus.begin(), p->nodes[0].gpus.end());
  EXPECT_EQ(gpus.count(0), 2u);
  EXPECT_EQ(gpus.count(1), 2u);
}

TEST(GpuType, ATypedJobTakesOnlyItsModelAndWaitsNamingIt) {
  Snapshot snap;
  snap.now_ms = kNow;
  std::vector<GpuView> a100 = {Device(0, "a100", 40 * kGiB), Device(1, "a100", 40 * kGiB)};
  snap.nodes = {DetailNode("a", a100), H100Node("b", 2)};
  snap.pending = {TypedJob(1, 1, 2, "h100"), TypedJob(2, 1, 1, "h100"), TypedJob(3, 1, 2, "a100")};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "b:0,1");
  EXPECT_EQ(Where(d, 2), "");
  EXPECT_EQ(Reason(d, 2), "needs 1 node with 1 free h100 GPU; 0 available"
            "; reserved on b, start unknown (waiting on jobs without a time limit)");
  EXPECT_EQ(Where(d, 3), "a:0,1");
}

TEST(GpuType, MigInstancesAreDevicesOfTheirOwnAndPlainJobsNeverGetThem) {
  Snapshot snap;
  snap.now_ms = kNow;
  // A GPU in MIG mode: three 1g.10gb and one 3g.40gb instances (indices 0-3), and one whole GPU (4).
  snap.nodes = {DetailNode("a", {Device(0, "1g.10gb", 10 * kGiB), Device(1, "1g.10gb", 10 * kGiB),
                                 Device(2, "1g.10gb", 10 * kGiB), Device(3, "3g.40gb", 40 * kGiB), Device(4)})};
  snap.pending = {TypedJob(1, 1, 2, "1g.10gb"), TypedJob(2, 1, 2, "1g.10gb"), GpuJob(3, 1, 2),
                  GpuJob(4, 1, 1), TypedJob(5, 1, 1, "3g.40gb")};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:0,1");
  EXPECT_EQ(Where(d, 2), "");
  EXPECT_EQ(Reason(d, 2), "needs 1 node with 2 free 1g.10gb MIG instances; 0 available"
            "; reserved on a, start unknown (waiting on jobs without a time limit)");
  EXPECT_EQ(Where(d, 3), "");  // one whole GPU only: MIG instances are not GPUs to plain jobs
  EXPECT_EQ(Where(d, 4), "a:4");
  EXPECT_EQ(Where(d, 5), "a:3");
}

TEST(GpuType, SubmitRejectsATypeOrMemoryNoNodeHasAndAcceptsWhatFits) {
  std::vector<NodeDevices> capacity = {{"a", 64, {Device(0), Device(1)}},
                                       {"b", 64, {Device(0, "1g.10gb", 10 * kGiB)}}};
  auto r = CheckGpuFeasible(capacity, TypedJob(1, 1, 1, "h200"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnsatisfiable);
  EXPECT_EQ(r.error().message, "job asks for GPU type 'h200' but no node has it (the cluster has: 1g.10gb x 1, h100 x 2)");
  r = CheckGpuFeasible(capacity, TypedJob(2, 1, 2, "2g.20gb"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("'2g.20gb'"), std::string::npos);
  r = CheckGpuFeasible(capacity, TypedJob(3, 1, 3, "h100"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "job needs 3 h100 GPUs on one node but the most any node has is 2");
  r = CheckGpuFeasible(capacity, ShareJob(4, 2, 100 * kGiB));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "job asks for 102400MiB of GPU memory per task but the largest GPU has 81920MiB");
  EXPECT_TRUE(CheckGpuFeasible(capacity, TypedJob(5, 1, 1, "1g.10gb")));
  EXPECT_TRUE(CheckGpuFeasible(capacity, ShareJob(6, 2, 20 * kGiB)));
  EXPECT_FALSE(CheckGpuFeasible(capacity, TypedJob(7, 2, 1, "h100")));  // two nodes: only one has h100s
}

TEST(Topology, SubmitRejectsARequiredGangLargerThanEverySwitch) {
  std::vector<NodeDevices> capacity = {{"a", 64, {Device(0), Device(1)}, "s1"},
                                       {"b", 64, {Device(0), Device(1)}, "s1"},
                                       {"c", 64, {Device(0), Device(1), Device(2), Device(3)}, "s2"},
                                       {"d", 64, {Device(0)}}};  // no switch label: a switch of its own
  JobRequest three = GpuJob(1, 3, 1);
  three.topology_required = true;
  auto r = CheckGpuFeasible(capacity, three);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnsatisfiable);
  EXPECT_EQ(r.error().message, "topology required: job needs 3 nodes with 1 free GPU under one switch, but at most 2 "
                               "under one switch could host one (s1: 2, s2: 1)");
  JobRequest two = GpuJob(2, 2, 2);
  two.topology_required = true;
  EXPECT_TRUE(CheckGpuFeasible(capacity, two));  // a and b under s1
  JobRequest four = GpuJob(3, 2, 4);
  four.topology_required = true;
  r = CheckGpuFeasible(capacity, four);  // only c has 4: the node count decides first
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "job needs 2 nodes with 4 free GPUs connected (topology required) but only 1 node "
                               "in the cluster could host one");
  three.topology_required = false;
  EXPECT_TRUE(CheckGpuFeasible(capacity, three));  // preferred: any three nodes
  // Without switch labels a required gang only needs its GPUs connected on each node.
  std::vector<NodeDevices> unlabelled = {{"a", 64, {Device(0)}}, {"b", 64, {Device(0)}}, {"c", 64, {Device(0)}}};
  three.topology_required = true;
  EXPECT_TRUE(CheckGpuFeasible(unlabelled, three));
}

// 8 GPUs in two NVLink islands of 4.
NodeView IslandNode(std::string id, std::vector<int> busy) {
  std::vector<GpuView> devices;
  for (int i = 0; i < 8; ++i) {
    GpuView d = Device(i);
    d.nvlink_island = i / 4;
    if (std::find(busy.begin(), busy.end(), i) != busy.end()) d.free_share = 0;
    devices.push_back(d);
  }
  return DetailNode(std::move(id), std::move(devices));
}

TEST(Topology, AFourGpuTaskNeverStraddlesIslandsWhenOneHasFourFree) {
  Snapshot snap;
  snap.now_ms = kNow;
  // Island 0 has 0,1 busy (2 free); island 1 is free. Contiguous-run packing alone would
  // take 2,3,4,5 (straddling); the best-connected choice is 4-7.
  snap.nodes = {IslandNode("a", {0, 1})};
  snap.pending = {GpuJob(1, 1, 4)};
  Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:4,5,6,7");
  // Two GPUs go to the smallest island that holds them (best fit), keeping island 1 whole.
  snap.pending = {GpuJob(2, 1, 2), GpuJob(3, 1, 4)};
  d = Schedule(snap);
  EXPECT_EQ(Where(d, 2), "a:2,3");
  EXPECT_EQ(Where(d, 3), "a:4,5,6,7");
}

TEST(Topology, RequiredWaitsForOneIslandPreferredTakesTheFewestIslands) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IslandNode("a", {0, 1, 4})};  // island 0: 2,3 free; island 1: 5,6,7 free
  JobRequest required = GpuJob(1, 1, 4);
  required.topology_required = true;
  snap.pending = {required};
  Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "");
  EXPECT_EQ(Reason(d, 1), "needs 1 node with 4 free GPUs connected (topology required); 0 available"
            "; reserved on a, start unknown (waiting on jobs without a time limit)");
  snap.pending = {GpuJob(2, 1, 4)};
  d = Schedule(snap);
  EXPECT_EQ(Where(d, 2), "a:2,5,6,7");  // the 3-free island first, then one more
}

TEST(Topology, AGangTakesOneSwitchWhenOneHasRoom) {
  Snapshot snap;
  snap.now_ms = kNow;
  // Switch s1: 6 nodes (first in id order); s2: 10 nodes. An 8-node gang fits only s2.
  for (int i = 0; i < 16; ++i) {
    snap.nodes.push_back(H100Node(fmt::format("n{:02d}", i), 8, i < 6 ? "s1" : "s2"));
  }
  snap.pending = {GpuJob(1, 8, 8)};
  Decision d = Schedule(snap);
  const JobPlacement* p = Find(d, 1);
  ASSERT_NE(p, nullptr);
  for (const NodeAssignment& a : p->nodes) EXPECT_GE(a.node, "n06") << a.node;
  // Preferred (the default) never waits: 12 nodes span both switches, the fewest possible.
  snap.pending = {GpuJob(2, 12, 8)};
  d = Schedule(snap);
  EXPECT_NE(Find(d, 2), nullptr);
  // Required waits, and says why.
  JobRequest required = GpuJob(3, 12, 8);
  required.topology_required = true;
  snap.pending = {required};
  d = Schedule(snap);
  EXPECT_EQ(Find(d, 3), nullptr);
  EXPECT_EQ(Reason(d, 3),
            "topology required: needs 12 nodes with 8 free GPUs under one switch; at most 10 under one switch now");
}

TEST(Topology, ASmallerGangTakesTheSwitchItFillsBest) {
  Snapshot snap;
  snap.now_ms = kNow;
  for (int i = 0; i < 12; ++i) snap.nodes.push_back(H100Node(fmt::format("n{:02d}", i), 8, i < 8 ? "s1" : "s2"));
  snap.pending = {GpuJob(1, 4, 8), GpuJob(2, 8, 8)};
  const Decision d = Schedule(snap);
  // Job 1 fills s2 (best fit), leaving s1's 8 nodes whole for job 2.
  for (const NodeAssignment& a : Find(d, 1)->nodes) EXPECT_GE(a.node, "n08");
  ASSERT_NE(Find(d, 2), nullptr);
  for (const NodeAssignment& a : Find(d, 2)->nodes) EXPECT_LT(a.node, "n08");
}

}  // namespace
}  // namespace cohort::sched
