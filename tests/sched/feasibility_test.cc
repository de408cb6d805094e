// CheckFeasible: can a job ever fit on the cluster's full capacity?
#include "sched/feasibility.h"

#include <gtest/gtest.h>

#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

JobRequest Shape(int nodes, int gpus, int tasks = 1, int cpus_per_task = 1) {
  JobRequest job = GpuJob(1, nodes, gpus);
  job.tasks_per_node = tasks;
  job.cpus_per_task = cpus_per_task;
  return job;
}

struct FeasibleCase {
  std::string name;
  std::vector<NodeCapacity> capacity;
  JobRequest job;
  std::string error;  // "" when feasible
  ErrorCode code = ErrorCode::kUnsatisfiable;

  friend void PrintTo(const FeasibleCase& c, std::ostream* os) { *os << c.name; }
};

class FeasibilityTest : public ::testing::TestWithParam<FeasibleCase> {};

TEST_P(FeasibilityTest, NamesTheShortfall) {
  const FeasibleCase& c = GetParam();
  const Result<void> r = CheckFeasible(c.capacity, c.job);
  if (c.error.empty()) {
    EXPECT_TRUE(r.has_value()) << r.error().ToString();
    return;
  }
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, c.code);
  EXPECT_EQ(r.error().message, c.error);
}

// A node's GPUs and CPUs (no features, memory unknown).
NodeCapacity Cap(std::string id, int gpus, int cpus) {
  NodeCapacity n;
  n.id = std::move(id);
  n.gpus = gpus;
  n.cpus = cpus;
  return n;
}

const std::vector<NodeCapacity> kMixed = {Cap("a", 8, 64), Cap("b", 8, 64), Cap("c", 4, 32), Cap("d", 0, 16)};

INSTANTIATE_TEST_SUITE_P(
    Cases, FeasibilityTest,
    ::testing::Values(
        FeasibleCase{"FitsExactly", kMixed, Shape(2, 8), ""},
        FeasibleCase{"CpuOnlyFitsAnywhere", kMixed, Shape(4, 0, 4, 4), ""},
        FeasibleCase{"NoNodes", {}, Shape(1, 1), "no nodes have registered yet"},
        FeasibleCase{"TooManyNodes", kMixed, Shape(5, 0),
                     "job needs 5 nodes but the cluster has 4"},
        FeasibleCase{"TooFewBigNodes", kMixed, Shape(3, 8),
                     "job needs 3 nodes with 8 GPUs each but only 2 nodes in the cluster have 8 "
                     "or more GPUs"},
        FeasibleCase{"OneBigNode",
                     {Cap("a", 8, 64), Cap("b", 2, 64)},
                     Shape(2, 4),
                     "job needs 2 nodes with 4 GPUs each but only 1 node in the cluster has 4 or "
                     "more GPUs"},
        FeasibleCase{"LargerThanLargestNode", kMixed, Shape(1, 16),
                     "job needs 1 node with 16 GPUs but the largest node has 8"},
        FeasibleCase{"MultiNodeLargerThanLargest", kMixed, Shape(2, 16),
                     "job needs 2 nodes with 16 GPUs each but the largest node has 8"},
        FeasibleCase{"MoreCpusThanLargestNode",
                     {Cap("a", 8, 2)},
                     Shape(1, 1, 2, 2),
                     "job needs 4 CPUs per node (2 tasks x 2 CPUs) but the largest node has 2"},
        FeasibleCase{"MoreCpusSingleTask",
                     {Cap("a", 8, 2)},
                     Shape(1, 1, 1, 3),
                     "job needs 3 CPUs per node but the largest node has 2"},
        FeasibleCase{"TooFewNodesWithCpus", kMixed, Shape(3, 0, 1, 48),
                     "job needs 3 nodes with 48 CPUs each but only 2 nodes in the cluster have "
                     "48 or more CPUs"},
        FeasibleCase{"GpusAndCpusOnDifferentNodes",
                     {Cap("a", 8, 8), Cap("b", 2, 64)},
                     Shape(1, 8, 1, 32),
                     "job needs 1 node with 8 GPUs and 32 CPUs but no node in the cluster has 8 "
                     "or more GPUs and 32 or more CPUs"},
        FeasibleCase{"InvalidRequest", kMixed, Shape(0, 1), "nodes: must be at least 1, got 0",
                     ErrorCode::kInvalidArgument}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace cohort::sched
