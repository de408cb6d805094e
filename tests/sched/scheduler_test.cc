// Whole passes: unavailable nodes, reasons for every waiting job, determinism.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

TEST(Scheduler, DrainingAndDownNodesGetNothingAndShowInReasons) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Unavailable(IdleNode("a", 8), "draining"), Unavailable(IdleNode("b", 8), "down"),
                Unavailable(IdleNode("c", 8), "draining"), Node("d", 8, {0, 1})};
  snap.running = {Running(100, kNever, {{"d", 6, 6}})};
  snap.pending = {GpuJob(1, 1, 8), GpuJob(2, 1, 1, Placement::kSpread), CpuJob(3, 1, 1, 2)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Reason(d, 1),
            "needs 1 node with 8 free GPUs; 0 available (2 nodes draining, 1 down); reserved on d, "
            "start unknown (waiting on jobs without a time limit)");
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->nodes, std::vector<std::string>{"d"});
  // Job 2 has no time limit and d is reserved for all 8 GPUs: it must wait although two
  // are free. Job 3 takes no GPU and leaves the head job's CPU: it may start.
  EXPECT_EQ(Reason(d, 2), "waiting for job 1 (higher priority; its resources are reserved)");
  EXPECT_EQ(Where(d, 3), "d:");
  for (const JobPlacement& p : d.start) {
    for (const NodeAssignment& a : p.nodes) EXPECT_EQ(a.node, "d");
  }
}

// After the reservation a waiting job's reason is worked out once per demand and reused
// until a job starts: a start in between must give the next job of the same demand a
// fresh reason.
TEST(Scheduler, AReasonFollowsThePoolAfterABackfilledStart) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Node("n", 4, {3})};
  snap.running = {Running(100, kNow + 100'000, {{"n", 3, 3}})};
  snap.pending = {GpuJob(1, 1, 4, Placement::kPack, 3'600'000), GpuJob(2, 1, 1),
                  GpuJob(3, 1, 1, Placement::kPack, 10'000), GpuJob(4, 1, 1)};
  const Decision d = Schedule(snap);
  ASSERT_TRUE(d.reservation.has_value());
  EXPECT_EQ(d.reservation->job_id, 1);
  // Job 2 could use the free GPU but would outlast the reservation; job 3 ends before it
  // and takes that GPU; then nothing is free for job 4.
  EXPECT_EQ(Reason(d, 2), "waiting for job 1 (higher priority; its resources are reserved)");
  EXPECT_EQ(Where(d, 3), "n:3");
  EXPECT_EQ(Reason(d, 4), "needs 1 node with 1 free GPU; 0 available");
}

TEST(Scheduler, UnavailableNodesAreSkippedEvenWhenIdle) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {Unavailable(IdleNode("a", 8), "down"), IdleNode("z", 2)};
  snap.pending = {GpuJob(1, 1, 1), GpuJob(2, 2, 1)};
  const Decision d = Schedule(snap);
  EXPECT_EQ(Where(d, 1), "z:0");
  EXPECT_EQ(Reason(d, 2), "needs 2 nodes with 1 free GPU; 1 available (1 node down)");
  EXPECT_FALSE(d.reservation.has_value());  // one schedulable node can never host 2 members
}

TEST(Scheduler, EveryWaitingJobHasAReasonAndStartedJobsHaveNone) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("a", 4), IdleNode("b", 4)};
  for (int64_t id = 1; id <= 6; ++id) snap.pending.push_back(GpuJob(id, 1, 3));
  const Decision d = Schedule(snap);
  ASSERT_EQ(d.start.size(), 2u);
  EXPECT_EQ(d.pending_reasons.size(), 4u);
  for (const JobPlacement& p : d.start) EXPECT_FALSE(d.pending_reasons.contains(p.job_id));
  EXPECT_EQ(Reason(d, 4), "needs 1 node with 3 free GPUs; 0 available");
}

TEST(Scheduler, ElasticJobTakesTheLargestGangThatFitsDownToMinNodes) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("a", 1), IdleNode("b", 1), Unavailable(IdleNode("c", 1), "down"),
                Unavailable(IdleNode("d", 1), "down")};
  JobRequest elastic = GpuJob(1, 4, 1);
  elastic.min_nodes = 2;
  JobRequest rigid = GpuJob(2, 4, 1);
  snap.pending = {elastic, rigid};
  Decision d = Schedule(snap);
  const JobPlacement* p = Find(d, 1);
  ASSERT_NE(p, nullptr) << Reason(d, 1);
  EXPECT_EQ(p->nodes.size(), 2u);  // 4 wanted, 2 free: starts on 2
  EXPECT_FALSE(d.start.size() > 1);
  EXPECT_EQ(Reason(d, 2), "needs 4 nodes with 1 free GPU; 0 available (2 nodes down)");

  // Below min_nodes it waits, with the full size in its reason.
  snap.nodes[1] = Unavailable(IdleNode("b", 1), "down");
  d = Schedule(snap);
  EXPECT_EQ(Find(d, 1), nullptr);
  EXPECT_NE(Reason(d, 1).find("needs 4 nodes with 1 free GPU; 1 available"), std::string::npos) << Reason(d, 1);

  // With every node up it takes all four.
  snap.nodes = {IdleNode("a", 1), IdleNode("b", 1), IdleNode("c", 1), IdleNode("d", 1)};
  snap.pending = {elastic};
  d = Schedule(snap);
  ASSERT_NE(Find(d, 1), nullptr);
  EXPECT_EQ(Find(d, 1)->nodes.size(), 4u);
}

TEST(Scheduler, EmptySnapshot) {
  const Decision d = Schedule(Snapshot{});
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.pending_reasons.empty());
  EXPECT_FALSE(d.reservation.has_value());

  Snapshot no_nodes;
  no_nodes.pending = {GpuJob(1, 1, 1)};
  EXPECT_EQ(Reason(Schedule(no_nodes), 1), "needs 1 node with 1 free GPU; 0 available");
}

TEST(Scheduler, SameSnapshotSameDecision) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("b", 8), Node("a", 8, {1, 2, 5}), IdleNode("c", 4)};
  snap.pending = {GpuJob(3, 1, 2), GpuJob(1, 2, 4, Placement::kSpread), GpuJob(2, 1, 1)};
  const Decision first = Schedule(snap);
  std::reverse(snap.pending.begin(), snap.pending.end());
  const Decision second = Schedule(snap);
  ASSERT_EQ(first.start.size(), second.start.size());
  for (size_t i = 0; i < first.start.size(); ++i) {
    EXPECT_EQ(Where(first, first.start[i].job_id), Where(second, second.start[i].job_id));
  }
  EXPECT_EQ(first.pending_reasons, second.pending_reasons);
  EXPECT_EQ(Where(first, 1), "b:0,1,2,3 c:0,1,2,3");
  EXPECT_EQ(Where(first, 2), "a:5");
  EXPECT_EQ(Where(first, 3), "a:1,2");
}

}  // namespace
}  // namespace cohort::sched
