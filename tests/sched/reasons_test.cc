// Pending reason texts: exact shapes, because people and tools read them.
#include "sched/reasons.h"

#include <gtest/gtest.h>

#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

struct ReasonCase {
  GangDemand demand;
  int available;
  int available_for_gpus;
  std::string suffix;
  std::string want;
};

TEST(Reasons, ResourceReasonTable) {
  const std::vector<ReasonCase> cases = {
      {{2, 4, 0}, 1, 1, "", "needs 2 nodes with 4 free GPUs; 1 available"},
      {{1, 1, 0}, 0, 0, "", "needs 1 node with 1 free GPU; 0 available"},
      {{1, 0, 4}, 0, 3, "", "needs 1 node with 4 free CPUs; 0 available"},
      {{1, 0, 1}, 0, 0, "", "needs 1 node with 1 free CPU; 0 available"},
      // CPUs keep a node with the GPUs out: they are named.
      {{2, 4, 8}, 1, 2, "", "needs 2 nodes with 4 free GPUs and 8 free CPUs; 1 available"},
      // Every node with the GPUs has the CPUs too: only GPUs are short.
      {{2, 4, 8}, 1, 1, "", "needs 2 nodes with 4 free GPUs; 1 available"},
      {{3, 0, 0}, 2, 2, "", "needs 3 nodes; 2 available"},
      {{2, 4, 0},
       1,
       1,
       " (2 nodes draining, 1 down)",
       "needs 2 nodes with 4 free GPUs; 1 available (2 nodes draining, 1 down)"},
  };
  for (const ReasonCase& c : cases) {
    EXPECT_EQ(ResourceReason(c.demand, c.available, c.available_for_gpus, c.suffix), c.want);
  }
}

TEST(Reasons, UnavailableSuffixTable) {
  const NodeView up = IdleNode("up", 8);
  const NodeView draining = Unavailable(IdleNode("d", 8), "draining");
  const NodeView down = Unavailable(IdleNode("x", 8), "down");
  EXPECT_EQ(UnavailableSuffix(std::vector<NodeView>{up, up}), "");
  EXPECT_EQ(UnavailableSuffix(std::vector<NodeView>{}), "");
  EXPECT_EQ(UnavailableSuffix(std::vector<NodeView>{up, down}), " (1 node down)");
  EXPECT_EQ(UnavailableSuffix(std::vector<NodeView>{draining, draining}), " (2 nodes draining)");
  EXPECT_EQ(UnavailableSuffix(std::vector<NodeView>{down, draining, up, draining}),
            " (2 nodes draining, 1 down)");
  EXPECT_EQ(UnavailableSuffix(std::vector<NodeView>{draining, down}),
            " (1 node down, 1 draining)");  // equal counts: by text
}

TEST(Reasons, WaitingAndReserved) {
  EXPECT_EQ(WaitingForReason(12),
            "waiting for job 12 (higher priority; its resources are reserved)");
  EXPECT_EQ(ReservedSuffix(kNow + 125'000, kNow), "; reserved to start in 2m05s");
  EXPECT_EQ(ReservedSuffix(kNever, kNow),
            "; reserved, start unknown (waiting on jobs without a time limit)");
  EXPECT_EQ(ReservedSuffix(kNow, kNow), "; reserved to start once jobs past their time limit end");
  EXPECT_EQ(InvalidReason("nodes: must be at least 1, got 0"),
            "invalid request: nodes: must be at least 1, got 0");
}

}  // namespace
}  // namespace cohort::sched
