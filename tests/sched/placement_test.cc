// Pack vs spread: which nodes, in which rank order, and which GPU indices.
#include "sched/placement.h"

#include <gtest/gtest.h>

#include <random>

#include "sched/node_pool.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr Placement kPack = Placement::kPack;
constexpr Placement kSpread = Placement::kSpread;

struct PlaceCase {
  std::string name;
  std::vector<NodeView> nodes;
  JobRequest job;
  std::string where;

  friend void PrintTo(const PlaceCase& c, std::ostream* os) { *os << c.name; }
};

class PlacementTest : public ::testing::TestWithParam<PlaceCase> {};

TEST_P(PlacementTest, ChoosesNodesAndGpus) {
  const PlaceCase& c = GetParam();
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = c.nodes;
  snap.pending = {c.job};
  EXPECT_EQ(Where(Schedule(snap), c.job.id), c.where);
}

std::vector<NodeView> Mixed() {
  return {IdleNode("a", 8), Node("b", 8, {0, 1, 2}), Node("c", 8, {6, 7}),
          Node("d", 8, {0, 1, 4, 5})};
}

std::vector<NodeView> SameGpusDifferentCpus() {
  return {Node("a", 8, Range(4), 64, 32), Node("b", 8, Range(4), 64, 16),
          Node("c", 8, Range(4), 64, 16)};
}

std::vector<NodeView> Five() {
  return {IdleNode("a", 8), Node("b", 8, {2, 3}), Node("c", 8, {0, 1, 2, 3}),
          Node("d", 8, {0, 1, 2, 3, 4, 5}), Node("e", 8, {4, 5, 6, 7})};
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PlacementTest,
    ::testing::Values(
        // Best fit: the node with the fewest free GPUs that still fit.
        PlaceCase{"PackFewestFreeGpusThatFit", Mixed(), GpuJob(1, 1, 3, kPack), "b:0,1,2"},
        PlaceCase{"PackSkipsNodesTooSmall", Mixed(), GpuJob(1, 1, 4, kPack), "d:0,1,4,5"},
        PlaceCase{"SpreadMostFreeGpus", Mixed(), GpuJob(1, 1, 3, kSpread), "a:0,1,2"},
        PlaceCase{"PackTieFewestCpusThenId", SameGpusDifferentCpus(), GpuJob(1, 1, 2, kPack),
                  "b:0,1"},
        PlaceCase{"SpreadTieMostCpus", SameGpusDifferentCpus(), GpuJob(1, 1, 2, kSpread), "a:0,1"},
        PlaceCase{"SpreadTieOnCpusThenLowestId",
                  {Node("y", 8, Range(4), 64, 16), Node("x", 8, Range(4), 64, 16)},
                  GpuJob(1, 2, 1, kSpread),
                  "x:0 y:0"},
        PlaceCase{"IdTiesUseStringOrder",
                  {IdleNode("n9", 8), IdleNode("n10", 8)},
                  GpuJob(1, 1, 1, kPack),
                  "n10:0"},
        // Multi-node: nodes listed in preference order (node rank 0 first).
        PlaceCase{"PackMultiNodeRankOrder", Five(), GpuJob(1, 3, 2, kPack), "b:2,3 c:0,1 e:4,5"},
        PlaceCase{"SpreadMultiNodeRankOrder", Five(), GpuJob(1, 3, 2, kSpread),
                  "a:0,1 d:0,1 c:0,1"},
        // Within a node: pack takes a contiguous run (the shortest that fits).
        PlaceCase{"PackContiguousPair",
                  {Node("a", 8, {0, 2, 3, 5, 6, 7})},
                  GpuJob(1, 1, 2, kPack),
                  "a:2,3"},
        PlaceCase{"PackContiguousTriple",
                  {Node("a", 8, {0, 2, 3, 5, 6, 7})},
                  GpuJob(1, 1, 3, kPack),
                  "a:5,6,7"},
        PlaceCase{"PackNoRunTakesLowest",
                  {Node("a", 8, {0, 2, 3, 5, 6, 7})},
                  GpuJob(1, 1, 4, kPack),
                  "a:0,2,3,5"},
        PlaceCase{"SpreadTakesLowest",
                  {Node("a", 8, {0, 2, 3, 5, 6, 7})},
                  GpuJob(1, 1, 2, kSpread),
                  "a:0,2"}),
    [](const auto& info) { return info.param.name; });

struct GpuCase {
  std::vector<int> free;
  int count;
  Placement policy;
  std::vector<int> want;
};

TEST(ChooseGpus, Table) {
  const std::vector<GpuCase> cases = {
      {{0, 1, 2, 3, 4, 5, 6, 7}, 4, kPack, {0, 1, 2, 3}},
      {{0, 1, 2, 3, 5}, 1, kPack, {5}},  // the lone GPU, keeping 0-3 whole
      {{0, 1, 2, 3, 5}, 1, kSpread, {0}},
      {{1, 2, 4, 5, 6, 7}, 2, kPack, {1, 2}},
      {{0, 2, 4, 6}, 2, kPack, {0, 2}},
      {{0, 2, 4, 6}, 0, kPack, {}},
      {{3, 4, 5}, 3, kSpread, {3, 4, 5}},
  };
  for (const GpuCase& c : cases) {
    EXPECT_EQ(ChooseGpus(c.free, c.count, c.policy), c.want)
        << "count " << c.count << " policy " << static_cast<int>(c.policy);
  }
}

TEST(Placement, SuccessivePackJobsFillOneNodeContiguously) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("a", 8), IdleNode("b", 8)};
  snap.pending = {GpuJob(1, 1, 4), GpuJob(2, 1, 2), GpuJob(3, 1, 2), GpuJob(4, 1, 8)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:0,1,2,3");
  EXPECT_EQ(Where(d, 2), "a:4,5");
  EXPECT_EQ(Where(d, 3), "a:6,7");
  EXPECT_EQ(Where(d, 4), "b:0,1,2,3,4,5,6,7");  // the big hole stayed whole
}

TEST(Placement, SuccessiveSpreadJobsBalance) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("a", 8), IdleNode("b", 8)};
  snap.pending = {GpuJob(1, 1, 2, kSpread), GpuJob(2, 1, 2, kSpread), GpuJob(3, 1, 2, kSpread)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:0,1");
  EXPECT_EQ(Where(d, 2), "b:0,1");
  EXPECT_EQ(Where(d, 3), "a:2,3");
}

// The pool's indexed walk must agree with the PlacesBefore order it claims to follow.
TEST(Placement, PoolVisitOrderMatchesPlacesBefore) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<NodeView> nodes;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      std::vector<int> free;
      for (int g = 0; g < 8; ++g) {
        if (rng() % 2) free.push_back(g);
      }
      NodeView node =
          Node("n" + std::to_string(rng() % 1000), 8, free, 32, static_cast<int>(rng() % 5) * 4);
      if (rng() % 10 == 0) node.unavailable = "down";
      nodes.push_back(node);
    }
    NodePool pool(nodes);
    for (Placement policy : {kPack, kSpread}) {
      const int gpus = static_cast<int>(rng() % 4);
      const int64_t cpus = static_cast<int64_t>(rng() % 3) * 4;
      std::vector<int> visited;
      pool.VisitHosts(gpus, cpus, policy, [&](int node) {
        visited.push_back(node);
        return true;
      });
      std::vector<int> expected;
      for (int i = 0; i < pool.size(); ++i) {
        if (pool.CanHost(i, gpus, cpus)) expected.push_back(i);
      }
      std::sort(expected.begin(), expected.end(),
                [&](int a, int b) { return PlacesBefore(policy, pool.free(a), pool.free(b)); });
      ASSERT_EQ(visited, expected) << "round " << round;
      EXPECT_EQ(pool.CountHosts(gpus, cpus), static_cast<int>(expected.size()));
    }
  }
}

}  // namespace
}  // namespace cohort::sched
