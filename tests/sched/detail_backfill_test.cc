// EASY backfill in detail (sched/detail_backfill.h): typed, topology-bound, sharing and
// constrained head jobs get a reservation, and later jobs that outlast its start are kept
// off what it needs there: the devices it needs (not just their count), its memory, its
// --nodelist nodes. Each case fails with the reservation of the old scheduler (none for
// these jobs): the small job would start where the head job must.
#include <gtest/gtest.h>

#include "detail_cluster.h"
#include "sched/detail_backfill.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr int64_t kMinute = 60'000;
constexpr int64_t kT = 1'000 * kMinute;
const std::string kWaiting10 = "waiting for job 10 (higher priority; its resources are reserved)";

RunningJob Until(int64_t id, int64_t end_ms, std::vector<Usage> usage) {
  RunningJob r;
  r.id = id;
  r.end_ms = end_ms;
  r.start_ms = kT - kMinute;
  r.usage = std::move(usage);
  return r;
}

JobRequest Typed(int64_t id, int gpus, std::string type, int64_t time_limit_ms = 0) {
  JobRequest j = GpuJob(id, 1, gpus, Placement::kPack, time_limit_ms);
  j.gpu_type = std::move(type);
  return j;
}

const Reservation& ReservationOf(const Decision& d) {
  EXPECT_TRUE(d.reservation.has_value());
  static const Reservation none;
  return d.reservation ? *d.reservation : none;
}

TEST(DetailBackfill, ATypedJobIsReservedForAndLongSmallJobsKeepOffItsNode) {
  // a: 8 h100, 4 held until T+5m. b: 8 a100, free.
  const std::vector<DetailNode> nodes = {{"a", Devs(8, "h100")}, {"b", Devs(8, "a100")}};
  Snapshot s = DetailSnapshot(kT, nodes, {Until(1, kT + 5 * kMinute, {Whole("a", {0, 1, 2, 3})})});
  s.pending = {Typed(10, 8, "h100"), Typed(11, 2, "h100"), Typed(12, 2, "h100", 5 * kMinute),
               GpuJob(13, 1, 2)};
  const Decision d = Schedule(s);
  EXPECT_EQ(Reason(d, 10), "needs 1 node with 8 free h100 GPUs; 0 available; reserved to start in 5m00s on a");
  EXPECT_EQ(ReservationOf(d).job_id, 10);
  EXPECT_EQ(ReservationOf(d).start_ms, kT + 5 * kMinute);
  EXPECT_EQ(ReservationOf(d).nodes, std::vector<std::string>{"a"});
  EXPECT_EQ(Where(d, 11), "") << "no time limit: it would hold a's h100s past T+5m";
  EXPECT_EQ(Reason(d, 11), kWaiting10);
  EXPECT_NE(Where(d, 12), "") << "it ends by T+5m";
  EXPECT_TRUE(Find(d, 12) && Find(d, 12)->backfilled);
  EXPECT_EQ(Where(d, 13).substr(0, 2), "b:") << "an untyped job takes b's a100s, never a";
}

TEST(DetailBackfill, TheGuardKeepsTheConnectedGpusTheHeadJobNeeds) {
  // a: two NVLink islands of 4; job 1 holds 0,1 until T+5m, job 2 holds 4 with no limit.
  // The head job needs 4 connected GPUs: island 0 once job 1 ends. A 1-GPU job packs onto
  // a (fewer free GPUs than b) and there takes GPU 2 (island 0, the best fit), which the
  // head job needs: it is fitted again off a.
  // b has one GPU of each island held with no limit.
  const std::vector<DetailNode> nodes = {{"a", Devs(8, "h100", 4)}, {"b", Devs(8, "h100", 4)}};
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Until(1, kT + 5 * kMinute, {Whole("a", {0, 1})}), Until(2, kNever, {Whole("a", {4})}),
                               Until(3, kNever, {Whole("b", {0, 4})})});
  JobRequest head = GpuJob(10, 1, 4);
  head.topology_required = true;
  s.pending = {head, GpuJob(11, 1, 1), GpuJob(12, 1, 1, Placement::kPack, 5 * kMinute)};
  const Decision d = Schedule(s);
  EXPECT_EQ(ReservationOf(d).job_id, 10);
  EXPECT_EQ(ReservationOf(d).start_ms, kT + 5 * kMinute);
  EXPECT_EQ(ReservationOf(d).nodes, std::vector<std::string>{"a"});
  EXPECT_EQ(Where(d, 11).substr(0, 2), "b:") << "a's island 0 is the head job's at T+5m";
  EXPECT_EQ(Where(d, 12), "a:2") << "it ends by T+5m";
}

TEST(DetailBackfill, ASharingHeadJobKeepsItsShareOfTheDevice) {
  // One h100: job 1 holds a quarter until T+5m and job 2 half with no limit. The head job
  // needs half: the free quarter and job 1's at T+5m. A quarter job with no limit would
  // leave it a quarter.
  const std::vector<DetailNode> nodes = {{"a", Devs(1, "h100")}};
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Until(1, kT + 5 * kMinute, {Slice("a", 0, 1)}), Until(2, kNever, {Slice("a", 0, 2)})});
  JobRequest head = GpuJob(10, 1, 0);
  head.gpu_share = 2;
  JobRequest quarter = GpuJob(11, 1, 0);
  quarter.gpu_share = 1;
  JobRequest short_quarter = quarter;
  short_quarter.id = 12;
  short_quarter.time_limit_ms = 2 * kMinute;
  s.pending = {head, quarter, short_quarter};
  const Decision d = Schedule(s);
  EXPECT_EQ(Reason(d, 10), "needs 1 node with 0.5 of a free GPU; 0 available; reserved to start in 5m00s on a");
  EXPECT_EQ(Where(d, 11), "");
  EXPECT_EQ(Reason(d, 11), kWaiting10);
  EXPECT_EQ(Where(d, 12), "a:0") << "it ends before the head job starts";
}

TEST(DetailBackfill, AConstrainedJobIsReservedForOnTheNodesItMayUseAndItsMemory) {
  // a and b carry 'ib', c does not; all 8 GPUs, 128G. Job 1 holds 4 GPUs and 64G of a
  // until T+10m, job 2 all of b with no limit. The head job needs 8 GPUs and 96G on an
  // 'ib' node: a at T+10m.
  std::vector<DetailNode> nodes = {{"a", Devs(8, "h100")}, {"b", Devs(8, "h100")}, {"c", Devs(8, "h100")}};
  for (DetailNode& n : nodes) n.memory_mb = 128 * 1024;
  nodes[0].features = nodes[1].features = {"ib"};
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Until(1, kT + 10 * kMinute, {Whole("a", {0, 1, 2, 3}, 1, 64 * 1024)}),
                               Until(2, kNever, {Whole("b", {0, 1, 2, 3, 4, 5, 6, 7})})});
  JobRequest head = GpuJob(10, 1, 8);
  head.constraint = "ib";
  head.mem_per_node_mb = 96 * 1024;
  JobRequest gpus = GpuJob(11, 1, 2);  // packs onto a (fewest free GPUs) unless kept off
  JobRequest short_gpus = GpuJob(12, 1, 4, Placement::kPack, 10 * kMinute);
  JobRequest memory = CpuJob(13, 1, 1, 1);
  memory.mem_per_node_mb = 48 * 1024;  // a keeps 128G at T+10m: 80G left would not do
  JobRequest little_memory = CpuJob(14, 1, 1, 1);
  little_memory.mem_per_node_mb = 16 * 1024;
  little_memory.nodelist = "a";
  s.pending = {head, gpus, short_gpus, memory, little_memory};
  const Decision d = Schedule(s);
  EXPECT_EQ(Reason(d, 10).substr(0, 40), "needs 1 node with 8 free GPUs and 96G fr") << Reason(d, 10);
  EXPECT_NE(Reason(d, 10).find("; reserved to start in 10m00s on a"), std::string::npos) << Reason(d, 10);
  EXPECT_EQ(ReservationOf(d).nodes, std::vector<std::string>{"a"});
  EXPECT_EQ(Where(d, 11).substr(0, 2), "c:");
  EXPECT_EQ(Where(d, 12).substr(0, 2), "a:") << "it ends by T+10m";
  EXPECT_EQ(Where(d, 13), "b:") << "48G of a at T+10m would leave the head job 80G";
  EXPECT_EQ(Where(d, 14), "a:") << "16G leaves it 112G";
}

TEST(DetailBackfill, ANodelistJobIsReservedOnItsNodes) {
  // The head job names b and c; c is busy until T+3m. a is free but not named.
  const std::vector<DetailNode> nodes = {{"a", Devs(4, "h100")}, {"b", Devs(4, "h100")}, {"c", Devs(4, "h100")}};
  Snapshot s = DetailSnapshot(kT, nodes, {Until(1, kT + 3 * kMinute, {Whole("c", {0})})});
  JobRequest head = GpuJob(10, 2, 4);
  head.nodelist = "c,b";
  s.pending = {head, GpuJob(11, 1, 1), GpuJob(12, 1, 1)};
  const Decision d = Schedule(s);
  EXPECT_EQ(ReservationOf(d).nodes, (std::vector<std::string>{"c", "b"})) << "its --nodelist nodes, in list order";
  EXPECT_EQ(ReservationOf(d).start_ms, kT + 3 * kMinute);
  EXPECT_EQ(Where(d, 11), "a:0");
  EXPECT_EQ(Where(d, 12), "a:1") << "b is the head job's";
}

TEST(DetailBackfill, AGangThatRequiresOneSwitchIsReservedUnderOne) {
  // s1: a, b; s2: c, d. a and c are free; b until T+2m, d until T+1m. The gang of two
  // with topology required starts at T+1m on s2 (c, d), not at T on a and c.
  std::vector<DetailNode> nodes = {{"a", Devs(4, "h100"), "s1"}, {"b", Devs(4, "h100"), "s1"},
                                   {"c", Devs(4, "h100"), "s2"}, {"d", Devs(4, "h100"), "s2"}};
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Until(1, kT + 2 * kMinute, {Whole("b", {0})}), Until(2, kT + kMinute, {Whole("d", {0})})});
  JobRequest gang = GpuJob(10, 2, 4);
  gang.topology_required = true;
  s.pending = {gang, GpuJob(11, 1, 4)};
  const Decision d = Schedule(s);
  EXPECT_EQ(ReservationOf(d).start_ms, kT + kMinute);
  EXPECT_EQ(ReservationOf(d).nodes, (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(Where(d, 11), "a:0,1,2,3") << "a is outside the reservation";
}

TEST(DetailBackfill, AJobThatCannotFitEvenOnEmptyNodesIsNotReservedFor) {
  // The only h100 node is down: the typed job cannot run whatever ends, so the next
  // blocked job is the head job instead.
  const std::vector<DetailNode> nodes = {{"a", Devs(8, "h100")}, {"b", Devs(8, "a100")}};
  Snapshot s = DetailSnapshot(kT, nodes, {Until(1, kT + kMinute, {Whole("b", {0})})});
  s.nodes[0].unavailable = "down";
  s.pending = {Typed(10, 8, "h100"), Typed(11, 8, "a100")};
  const Decision d = Schedule(s);
  EXPECT_EQ(Reason(d, 10), "needs 1 node with 8 free h100 GPUs; 0 available (1 node down)");
  EXPECT_EQ(ReservationOf(d).job_id, 11);
}

TEST(DetailBackfill, ASharingJobBehindAPlainHeadJobCountsTheGpusItsSlicesMakeNotWhole) {
  // The plain head job (counts, backfill.h) needs 4 GPUs of a at T+5m. A quarter of GPU 2
  // with no limit takes no whole GPU by its demand, but GPU 2 is no longer whole at T+5m.
  const std::vector<DetailNode> nodes = {{"a", Devs(4, "h100")}};
  Snapshot s = DetailSnapshot(kT, nodes, {Until(1, kT + 5 * kMinute, {Whole("a", {0, 1})})});
  JobRequest quarter = GpuJob(11, 1, 0);
  quarter.gpu_share = 1;
  s.pending = {GpuJob(10, 1, 4), quarter};
  const Decision d = Schedule(s);
  EXPECT_EQ(ReservationOf(d).start_ms, kT + 5 * kMinute);
  EXPECT_EQ(Where(d, 11), "");
  EXPECT_EQ(Reason(d, 11), kWaiting10);
}

TEST(DetailBackfill, PlanningCountsReleasesWithoutDeviceIndicesAsUntypedGpus) {
  // A node without device detail: releases count whole GPUs.
  Snapshot s;
  s.now_ms = kT;
  s.nodes = {Node("a", 8, {6, 7})};
  s.nodes[0].features = {"ib"};
  s.running = {Running(1, kT + kMinute, {Usage{"a", 6, 6}})};
  JobRequest head = GpuJob(10, 1, 8);
  head.constraint = "ib";
  s.pending = {head};
  const Decision d = Schedule(s);
  EXPECT_EQ(ReservationOf(d).start_ms, kT + kMinute);
  EXPECT_EQ(ReservationOf(d).nodes, std::vector<std::string>{"a"});
}

}  // namespace
}  // namespace cohort::sched
