// Queue order: priority descending, then submit time, then id.
#include "sched/priority.h"

#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

JobRequest Queued(int64_t id, int priority, int64_t submit_ms) {
  JobRequest job = GpuJob(id, 1, 8);
  job.priority = priority;
  job.submit_ms = submit_ms;
  return job;
}

std::vector<int64_t> Ids(const std::vector<const JobRequest*>& order) {
  std::vector<int64_t> ids;
  for (const JobRequest* j : order) ids.push_back(j->id);
  return ids;
}

struct OrderCase {
  std::string name;
  std::vector<JobRequest> pending;
  std::vector<int64_t> order;

  friend void PrintTo(const OrderCase& c, std::ostream* os) { *os << c.name; }
};

class QueueOrderTest : public ::testing::TestWithParam<OrderCase> {};

TEST_P(QueueOrderTest, OrdersQueue) {
  EXPECT_EQ(Ids(OrderQueue(GetParam().pending)), GetParam().order);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, QueueOrderTest,
    ::testing::Values(
        OrderCase{"PriorityDescending",
                  {Queued(1, 0, 10), Queued(2, 5, 20), Queued(3, -1, 0), Queued(4, 2, 30)},
                  {2, 4, 1, 3}},
        OrderCase{"SubmitOrderBreaksPriorityTies",
                  {Queued(1, 1, 300), Queued(2, 1, 100), Queued(3, 1, 200)},
                  {2, 3, 1}},
        OrderCase{"IdBreaksSubmitTies",
                  {Queued(9, 1, 100), Queued(3, 1, 100), Queued(5, 1, 100), Queued(4, 2, 500)},
                  {4, 3, 5, 9}},
        OrderCase{"Empty", {}, {}}),
    [](const auto& info) { return info.param.name; });

TEST(Priority, RunsBeforeIsStrict) {
  const JobRequest a = Queued(1, 3, 100);
  const JobRequest b = Queued(2, 3, 100);
  EXPECT_TRUE(RunsBefore(a, b));
  EXPECT_FALSE(RunsBefore(b, a));
  EXPECT_FALSE(RunsBefore(a, a));
}

TEST(Priority, HigherPriorityTakesTheOnlySlotEvenIfSubmittedLater) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("a", 8)};
  snap.pending = {Queued(1, 0, 100), Queued(2, 1, 900)};
  const Decision d = Schedule(snap);
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].job_id, 2);
  EXPECT_FALSE(d.start[0].backfilled);
  EXPECT_TRUE(d.pending_reasons.contains(1));
}

TEST(Priority, EarlierSubmitWinsAmongEqualPriorities) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("a", 8), IdleNode("b", 8)};
  snap.pending = {Queued(1, 0, 300), Queued(2, 0, 100), Queued(3, 0, 200)};
  const Decision d = Schedule(snap);
  ASSERT_EQ(d.start.size(), 2u);
  EXPECT_EQ(d.start[0].job_id, 2);
  EXPECT_EQ(d.start[1].job_id, 3);
  EXPECT_EQ(Where(d, 2), "a:0,1,2,3,4,5,6,7");
  EXPECT_EQ(Where(d, 3), "b:0,1,2,3,4,5,6,7");
  EXPECT_EQ(Where(d, 1), "");
}

}  // namespace
}  // namespace cohort::sched
