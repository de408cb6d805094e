// EASY backfill: one reservation for the first blocked job; later jobs start only if they
// cannot delay it.
#include "sched/backfill.h"

#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr int64_t kSecond = 1000;
constexpr Placement kPack = Placement::kPack;
const std::string kWaiting = "waiting for job 1 (higher priority; its resources are reserved)";

JobRequest Head(int64_t id, int nodes, int gpus) {
  JobRequest job = GpuJob(id, nodes, gpus);
  job.priority = 10;
  return job;
}

// Node a: 4 of 8 GPUs free, the other 4 freed at now+90s. Node b: full, no end known.
// Head job 1 (1 x 8) can start on a at now+90s.
Snapshot HalfFreeA() {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Node("a", 8, {4, 5, 6, 7}, 64, 60), Node("b", 8, {}, 64, 56)};
  snap.running = {Running(100, kNow + 90 * kSecond, {{"a", 4, 4}}),
                  Running(101, kNever, {{"b", 8, 8}})};
  snap.pending = {Head(1, 1, 8)};
  return snap;
}

struct BackfillCase {
  std::string name;
  JobRequest job;
  std::string where;   // "" if it must wait
  std::string reason;  // when it waits

  friend void PrintTo(const BackfillCase& c, std::ostream* os) { *os << c.name; }
};

class BackfillTest : public ::testing::TestWithParam<BackfillCase> {};

TEST_P(BackfillTest, HeadJobIsNotDelayed) {
  const BackfillCase& c = GetParam();
  Snapshot snap = HalfFreeA();
  snap.pending.push_back(c.job);
  const Decision d = Schedule(snap);

  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->job_id, 1);
  EXPECT_EQ(d.reservation->start_ms, kNow + 90 * kSecond);
  EXPECT_EQ(d.reservation->nodes, std::vector<std::string>{"a"});
  EXPECT_EQ(Reason(d, 1), "needs 1 node with 8 free GPUs; 0 available; reserved to start in 1m30s on a");

  EXPECT_EQ(Where(d, c.job.id), c.where);
  EXPECT_EQ(Reason(d, c.job.id), c.reason);
  if (!c.where.empty()) {
    EXPECT_TRUE(Find(d, c.job.id)->backfilled);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BackfillTest,
    ::testing::Values(
        BackfillCase{"ShortJobEndsBeforeReservation", GpuJob(2, 1, 4, kPack, 60 * kSecond),
                     "a:4,5,6,7", ""},
        BackfillCase{"JobEndingExactlyAtReservationStarts", GpuJob(2, 1, 4, kPack, 90 * kSecond),
                     "a:4,5,6,7", ""},
        BackfillCase{"LongJobWouldTakeReservedGpus", GpuJob(2, 1, 4, kPack, 91 * kSecond), "",
                     kWaiting},
        BackfillCase{"UnlimitedJobWouldTakeReservedGpus", GpuJob(2, 1, 1), "", kWaiting},
        BackfillCase{"ShortJobThatDoesNotFitNowWaitsForResources",
                     GpuJob(2, 1, 8, kPack, 10 * kSecond), "",
                     "needs 1 node with 8 free GPUs; 0 available"},
        BackfillCase{"UnlimitedJobNeedingNothingStarts", CpuJob(2, 1, 1, 0), "b:", ""}),
    [](const auto& info) { return info.param.name; });

TEST(Backfill, JobOnNodesOutsideTheReservationMayStart) {
  Snapshot snap = HalfFreeA();
  snap.nodes.push_back(Node("c", 8, {0, 1, 2, 3}, 64, 60));
  snap.running.push_back(Running(102, kNever, {{"c", 4, 4}}));
  snap.pending.push_back(GpuJob(2, 1, 4));  // unlimited: must stay off node a
  const Decision d = Schedule(snap);
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->nodes, std::vector<std::string>{"a"});
  EXPECT_EQ(Where(d, 2), "c:0,1,2,3");
  EXPECT_TRUE(Find(d, 2)->backfilled);
}

TEST(Backfill, OutlastingJobsMayUseWhatTheHeadLeavesOver) {
  // Head job 1 needs 7 GPUs; node a has 8 at now+100s. One unlimited 1-GPU job fits in
  // the leftover, a second would not; a short one still may.
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Node("a", 8, {0, 1, 2, 3, 4, 5}, 64, 62), Node("b", 8, {}, 64, 56)};
  snap.running = {Running(100, kNow + 100 * kSecond, {{"a", 2, 2}}),
                  Running(101, kNever, {{"b", 8, 8}})};
  snap.pending = {Head(1, 1, 7), GpuJob(2, 1, 1), GpuJob(3, 1, 1),
                  GpuJob(4, 1, 1, kPack, 50 * kSecond)};
  const Decision d = Schedule(snap);
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->start_ms, kNow + 100 * kSecond);
  EXPECT_EQ(Where(d, 2), "a:0");
  EXPECT_EQ(Where(d, 3), "");
  EXPECT_EQ(Reason(d, 3), kWaiting);
  EXPECT_EQ(Where(d, 4), "a:1");
}

TEST(Backfill, CpusAreReservedToo) {
  // CPU-only head needs 60 CPUs on node a: 40 free now, 64 at now+10s.
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Node("a", 0, {}, 64, 40)};
  snap.running = {Running(100, kNow + 10 * kSecond, {{"a", 0, 24}})};
  JobRequest head = CpuJob(1, 1, 1, 60);
  head.priority = 10;
  snap.pending = {head, CpuJob(2, 1, 1, 8), CpuJob(3, 1, 2, 2)};
  const Decision d = Schedule(snap);
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->start_ms, kNow + 10 * kSecond);
  EXPECT_EQ(Reason(d, 1),
            "needs 1 node with 60 free CPUs; 0 available; reserved to start in 10.0s on a");
  EXPECT_EQ(Reason(d, 2), kWaiting);  // 64 - 8 < 60
  EXPECT_EQ(Where(d, 3), "a:");       // 64 - 4 >= 60
}

TEST(Backfill, UnknownStartReservesOnCapacity) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Node("a", 8, {6, 7}, 64, 58), Node("b", 8, {}, 32, 24)};
  snap.running = {Running(100, kNever, {{"a", 6, 6}}), Running(101, kNever, {{"b", 8, 8}})};
  snap.pending = {Head(1, 1, 8), GpuJob(2, 1, 2, kPack, 3600 * kSecond), GpuJob(3, 1, 1)};
  const Decision d = Schedule(snap);
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->start_ms, kNever);
  EXPECT_EQ(d.reservation->nodes, std::vector<std::string>{"b"});  // pack: fewer CPUs
  EXPECT_EQ(Reason(d, 1),
            "needs 1 node with 8 free GPUs; 0 available; reserved on b, start unknown (waiting on "
            "jobs without a time limit)");
  // A job with a time limit ends before "unknown"; an unlimited one may not touch b, but
  // b is full anyway and a is not reserved.
  EXPECT_EQ(Where(d, 2), "a:6,7");
  EXPECT_EQ(Where(d, 3), "");
  EXPECT_EQ(Reason(d, 3), "needs 1 node with 1 free GPU; 0 available");
}

TEST(Backfill, JobThatCanNeverFitDoesNotHoldTheQueue) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Node("a", 8, {}, 64, 56), Node("b", 8, {0, 1}, 64, 58)};
  snap.running = {Running(100, kNow + 5 * kSecond, {{"a", 8, 8}}),
                  Running(101, kNever, {{"b", 6, 6}})};
  JobRequest huge = GpuJob(1, 1, 16);
  huge.priority = 20;
  snap.pending = {huge, Head(2, 1, 8), GpuJob(3, 1, 2)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Reason(d, 1), "needs 1 node with 16 free GPUs; 0 available");
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->job_id, 2);
  EXPECT_EQ(d.reservation->start_ms, kNow + 5 * kSecond);
  EXPECT_EQ(d.reservation->nodes, std::vector<std::string>{"a"});
  EXPECT_EQ(Where(d, 3), "b:0,1");  // b is not reserved
  EXPECT_TRUE(Find(d, 3)->backfilled);
}

TEST(Backfill, JobsStartedEarlierInThePassCountInTheProjection) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("a", 8)};
  JobRequest first = GpuJob(1, 1, 8, kPack, 300 * kSecond);
  first.priority = 2;
  JobRequest second = GpuJob(2, 1, 8);
  second.priority = 1;
  snap.pending = {first, second, GpuJob(3, 1, 8)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "a:0,1,2,3,4,5,6,7");
  EXPECT_FALSE(Find(d, 1)->backfilled);
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->job_id, 2);
  EXPECT_EQ(d.reservation->start_ms, kNow + 300 * kSecond);
  EXPECT_EQ(Reason(d, 2), "needs 1 node with 8 free GPUs; 0 available; reserved to start in 5m00s on a");
  // Only one reservation: job 3 gets a plain resource reason.
  EXPECT_EQ(Reason(d, 3), "needs 1 node with 8 free GPUs; 0 available");
}

TEST(Backfill, UnschedulableNodesAreNeverReserved) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Unavailable(IdleNode("a", 8), "draining"), Node("b", 8, {}, 64, 56)};
  snap.running = {Running(100, kNow + kSecond, {{"b", 8, 8}})};
  snap.pending = {GpuJob(1, 1, 8)};
  const Decision d = Schedule(snap);
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->nodes, std::vector<std::string>{"b"});
  EXPECT_EQ(Reason(d, 1),
            "needs 1 node with 8 free GPUs; 0 available (1 node draining); reserved to start in "
            "1.0s on b");
}

TEST(Backfill, OverdueJobsCountAsEndingNow) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Node("a", 8, {}, 64, 56)};
  snap.running = {Running(100, kNow - 5 * kSecond, {{"a", 8, 8}})};
  snap.pending = {GpuJob(1, 1, 8), GpuJob(2, 1, 1, kPack, 10 * kSecond)};
  const Decision d = Schedule(snap);
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->start_ms, kNow);
  EXPECT_EQ(Reason(d, 1),
            "needs 1 node with 8 free GPUs; 0 available; reserved on a to start once jobs past their "
            "time limit end");
}

TEST(Backfill, PlanReservationWalksReleasesInEndOrder) {
  // Two nodes must have 4 GPUs: a gets there at t=20 (two releases), b at t=30.
  const std::vector<NodeView> nodes = {Node("a", 8, {0, 1}), Node("b", 8, {0}), Node("c", 4, {})};
  NodePool pool(nodes);
  const std::vector<Release> releases = {
      {kNow + 30, 1, 3, 0}, {kNow + 10, 0, 1, 0}, {kNow + 20, 0, 1, 0}, {kNever, 2, 4, 0}};
  const auto plan = PlanReservation(pool, releases, GangDemand{2, 4, 0}, kPack, kNow);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->start_ms, kNow + 30);
  EXPECT_EQ(plan->nodes, (std::vector<int>{0, 1}));  // a has 4, b has 4: tie, id order
  EXPECT_EQ(plan->free_at_start[0].gpus, 4);
  EXPECT_EQ(plan->free_at_start[1].gpus, 4);

  EXPECT_FALSE(PlanReservation(pool, releases, GangDemand{4, 1, 0}, kPack, kNow).has_value());
  const auto later = PlanReservation(pool, releases, GangDemand{3, 4, 0}, kPack, kNow);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->start_ms, kNever);
}

TEST(Backfill, EndOfSaturates) {
  EXPECT_EQ(EndOf(kNow, 0), kNever);
  EXPECT_EQ(EndOf(kNow, 5), kNow + 5);
  EXPECT_EQ(EndOf(kNow, kNever), kNever);
}

}  // namespace
}  // namespace cohort::sched
