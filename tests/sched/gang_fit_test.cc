// Gang fit: all members of a job on distinct nodes at once, or none.
#include "sched/gang_fit.h"

#include <gtest/gtest.h>

#include "sched/node_pool.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

// The head job's reason once reserved on `nodes` with a start that waits on jobs without a
// time limit.
std::string UnknownStart(const std::string& nodes) {
  return "; reserved on " + nodes + ", start unknown (waiting on jobs without a time limit)";
}

struct GangCase {
  std::string name;
  std::vector<NodeView> nodes;
  JobRequest job;
  std::string where;   // Where() of the job, "" if it must not start
  std::string reason;  // pending reason when it does not start

  friend void PrintTo(const GangCase& c, std::ostream* os) { *os << c.name; }
};

class GangFitTest : public ::testing::TestWithParam<GangCase> {};

TEST_P(GangFitTest, PlacesWholeGangOrNothing) {
  const GangCase& c = GetParam();
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = c.nodes;
  snap.pending = {c.job};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, c.job.id), c.where);
  EXPECT_EQ(Reason(d, c.job.id), c.reason);
  EXPECT_EQ(d.start.size() + d.pending_reasons.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GangFitTest,
    ::testing::Values(
        GangCase{"TwoNodeJobWithOneFittingNodeWaits",
                 {IdleNode("a", 8), Node("b", 8, {0, 1})},
                 GpuJob(1, 2, 4),
                 "",
                 "needs 2 nodes with 4 free GPUs; 1 available" + UnknownStart("a, b")},
        GangCase{"TwoNodeJobWithTwoFittingNodesStarts",
                 {IdleNode("a", 8), Node("b", 8, {0, 1, 2, 3})},
                 GpuJob(1, 2, 4),
                 "b:0,1,2,3 a:0,1,2,3",
                 ""},
        GangCase{"NeverTwoMembersOnOneNode",
                 {IdleNode("a", 8)},
                 GpuJob(1, 2, 1),
                 "",
                 "needs 2 nodes with 1 free GPU; 1 available"},
        GangCase{"SingleGpu", {Node("a", 8, {3, 5})}, GpuJob(1, 1, 1), "a:3", ""},
        GangCase{"SingleGpuNoneFree",
                 {Node("a", 8, {}), Node("b", 4, {})},
                 GpuJob(1, 1, 1),
                 "",
                 "needs 1 node with 1 free GPU; 0 available" + UnknownStart("b")},
        GangCase{
            "CpuOnlyOnGpulessNode", {Node("cpu", 0, {}, 16, 16)}, CpuJob(1, 1, 2, 2), "cpu:", ""},
        GangCase{"CpuOnlyNeedsTasksTimesCpus",
                 {Node("cpu", 0, {}, 16, 6)},
                 CpuJob(1, 1, 4, 2),
                 "",
                 "needs 1 node with 8 free CPUs; 0 available" + UnknownStart("cpu")},
        GangCase{"GpuJobAlsoNeedsCpus",
                 {Node("a", 8, Range(8), 64, 1), Node("b", 8, Range(2), 64, 64)},
                 [] {
                   JobRequest j = GpuJob(1, 2, 2);
                   j.cpus_per_task = 2;
                   return j;
                 }(),
                 "",
                 "needs 2 nodes with 2 free GPUs and 2 free CPUs; 1 available" + UnknownStart("a, b")},
        GangCase{"ZeroCpuJobNeedsOnlyASchedulableNode",
                 {Node("a", 0, {}, 4, 0)},
                 CpuJob(1, 1, 1, 0),
                 "a:",
                 ""},
        GangCase{"ZeroDemandMultiNodeCountsNodes",
                 {Node("a", 0, {}, 4, 0), Node("b", 0, {}, 4, 0)},
                 CpuJob(1, 3, 1, 0),
                 "",
                 "needs 3 nodes; 2 available"}),
    [](const auto& info) { return info.param.name; });

TEST(GangFit, AllOrNothingLeavesResourcesForLaterJobs) {
  // Job 1 (2 x 8) fails; it must not hold node a's GPUs, so job 2 (1 x 8, with a time
  // limit, so it cannot delay job 1) gets them.
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("a", 8), Node("b", 8, {0, 1, 2, 3})};
  snap.pending = {GpuJob(1, 2, 8), GpuJob(2, 1, 8, Placement::kPack, 60'000)};
  snap.pending[0].priority = 1;
  snap.running = {Running(9, kNever, {{"b", 4, 4}})};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "");
  EXPECT_EQ(Where(d, 2), "a:0,1,2,3,4,5,6,7");
}

TEST(GangFit, ResourcesTakenEarlierInThePassAreGone) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("a", 8, 16)};
  snap.pending = {GpuJob(1, 1, 6), GpuJob(2, 1, 2), GpuJob(3, 1, 1), CpuJob(4, 1, 1, 15)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:0,1,2,3,4,5");
  EXPECT_EQ(Where(d, 2), "a:6,7");
  EXPECT_EQ(Where(d, 3), "");
  // Jobs 1 and 2 hold 8 GPUs and 2 CPUs; job 3 has nothing left; job 4 needs 15 of 14.
  EXPECT_EQ(Reason(d, 3), "needs 1 node with 1 free GPU; 0 available" + UnknownStart("a"));
  EXPECT_EQ(Reason(d, 4), "needs 1 node with 15 free CPUs; 0 available");
  ASSERT_NE(Find(d, 1), nullptr);
  EXPECT_EQ(Find(d, 1)->nodes[0].cpus, 1);
}

TEST(GangFit, FitGangHonoursExcludedNodes) {
  const std::vector<NodeView> nodes = {IdleNode("a", 8), IdleNode("b", 8), IdleNode("c", 8)};
  NodePool pool(nodes);
  const GangDemand two{2, 4, 1};
  const std::vector<int> exclude_a = {0};
  const auto fit = FitGang(pool, two, Placement::kPack, exclude_a);
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->nodes, (std::vector<int>{1, 2}));
  const std::vector<int> exclude_ab = {0, 1};
  EXPECT_FALSE(FitGang(pool, two, Placement::kPack, exclude_ab).has_value());
}

TEST(GangFit, CountHostsSeesBothGpusAndCpus) {
  const std::vector<NodeView> nodes = {
      Node("a", 8, Range(8), 64, 2), Node("b", 8, Range(4), 64, 64), Node("c", 8, Range(1), 64, 64),
      Unavailable(IdleNode("d", 8), "down")};
  NodePool pool(nodes);
  EXPECT_EQ(CountHosts(pool, {1, 0, 0}), 3);
  EXPECT_EQ(CountHosts(pool, {1, 1, 0}), 3);
  EXPECT_EQ(CountHosts(pool, {1, 2, 0}), 2);
  EXPECT_EQ(CountHosts(pool, {1, 2, 4}), 1);
  EXPECT_EQ(CountHosts(pool, {1, 8, 0}), 1);
  EXPECT_EQ(CountHosts(pool, {1, 9, 0}), 0);
  EXPECT_EQ(CountHosts(pool, {1, 0, 65}), 0);
  pool.Take(1, std::vector<int>{0, 1}, 60);
  EXPECT_EQ(CountHosts(pool, {1, 2, 4}), 1);  // b keeps 2 GPUs and 4 CPUs
  EXPECT_EQ(CountHosts(pool, {1, 2, 5}), 0);
  EXPECT_EQ(pool.free_gpus(1).size(), 2u);
  EXPECT_EQ(pool.free_gpus(1)[0], 2);
}

TEST(GangFit, PoolNormalisesUnsortedFreeLists) {
  const std::vector<NodeView> nodes = {Node("a", 4, {3, 1, 1, 0}, 8, 8)};
  NodePool pool(nodes);
  EXPECT_EQ(std::vector<int>(pool.free_gpus(0).begin(), pool.free_gpus(0).end()),
            (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(CountHosts(pool, {1, 3, 0}), 1);
  EXPECT_EQ(CountHosts(pool, {1, 4, 0}), 0);
}

TEST(GangFit, DemandOfRejectsMalformedRequests) {
  JobRequest job = GpuJob(1, 2, 4);
  job.tasks_per_node = 4;
  job.cpus_per_task = 3;
  const auto demand = DemandOf(job);
  ASSERT_TRUE(demand.has_value());
  EXPECT_EQ(demand->nodes, 2);
  EXPECT_EQ(demand->gpus, 4);
  EXPECT_EQ(demand->cpus, 12);

  job.nodes = 0;
  const auto bad = DemandOf(job);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().field, "nodes");
  EXPECT_EQ(bad.error().message, "nodes: must be at least 1, got 0");

  Snapshot snap;
  snap.nodes = {IdleNode("a", 8)};
  snap.pending = {job};
  EXPECT_EQ(Reason(Schedule(snap), 1), "invalid request: nodes: must be at least 1, got 0");
}

}  // namespace
}  // namespace cohort::sched
