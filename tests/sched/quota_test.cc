// Quotas counted in GPU share units (sched/quota.h, gpu_units.h; issue 17 over issue 18's
// sharing): a team's quarter- and half-GPU jobs count their parts of GPUs against its quota
// and borrow limit, borrowers' sharing jobs are reclaimed for a team within its quota, and
// a memory-only job counts the units its slice takes on the device it gets.
#include <gtest/gtest.h>

#include <algorithm>

#include "detail_cluster.h"
#include "sched/fair_share.h"
#include "sched/gpu_units.h"
#include "sched/quota.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr int64_t kMinute = 60'000;
constexpr int64_t kT = 1'000 * kMinute;

TeamView Team(std::string name, int64_t quota, int64_t borrow = -1) {
  TeamView t;
  t.name = std::move(name);
  t.quota_gpus = quota;
  t.borrow_limit_gpus = borrow;
  return t;
}

// A job of `team` asking for `share` units of one GPU per task.
JobRequest Part(int64_t id, std::string team, int share, int priority = 0) {
  JobRequest j = GpuJob(id, 1, 0);
  j.team = std::move(team);
  j.gpu_share = share;
  j.priority = priority;
  j.submit_ms = kT - 1000 + id;
  return j;
}

JobRequest WholeGpus(int64_t id, std::string team, int gpus) {
  JobRequest j = GpuJob(id, 1, gpus);
  j.team = std::move(team);
  j.submit_ms = kT - 1000 + id;
  return j;
}

// A running job of `team` holding `usage`, started two hours ago.
RunningJob Held(int64_t id, std::string team, std::vector<Usage> usage, int64_t lost_minutes = 10) {
  RunningJob r;
  r.id = id;
  r.team = std::move(team);
  r.usage = std::move(usage);
  r.start_ms = kT - 120 * kMinute;
  r.checkpoint_ms = kT - lost_minutes * kMinute;
  return r;
}

Snapshot On(const std::vector<DetailNode>& nodes, std::vector<RunningJob> running, std::vector<TeamView> teams) {
  Snapshot s = DetailSnapshot(kT, nodes, std::move(running));
  s.shares.emplace();
  s.shares->teams = std::move(teams);
  s.shares->preemption.min_runtime_ms = 10 * kMinute;
  return s;
}

std::vector<int64_t> Started(const Decision& d) {
  std::vector<int64_t> ids;
  for (const JobPlacement& p : d.start) ids.push_back(p.job_id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<int64_t> Victims(const Decision& d) {
  std::vector<int64_t> ids;
  for (const Preemption& p : d.preempt) ids.push_back(p.victim);
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST(GpuUnits, CountWholeGpusSlicesAndMemoryAsTheFitWould) {
  EXPECT_EQ(UnitsOfGpus(3), 12);
  EXPECT_EQ(FormatGpus(15), "3.75");
  EXPECT_EQ(FormatGpus(8), "2");
  EXPECT_EQ(FormatGpus(2), "0.5");
  EXPECT_EQ(ShareForMemory(20 * 1024, 80 * 1024), 1);
  EXPECT_EQ(ShareForMemory(30 * 1024, 80 * 1024), 2) << "rounded up to a unit";
  EXPECT_EQ(ShareForMemory(90 * 1024, 80 * 1024), 0) << "does not fit the device";
  EXPECT_EQ(ShareForMemory(1024, 0), 0) << "memory unknown";
  const RunningJob r = Held(1, "ml", {Whole("a", {0, 1}), Slice("b", 0, 1), Slice("b", 1, 2)});
  EXPECT_EQ(HeldUnits(r), 2 * 4 + 1 + 2);

  const std::vector<DetailNode> nodes = {{"a", {Dev(0, "a100", -1, 40 * 1024)}}, {"b", Devs(1, "h100")}};
  const Snapshot s = DetailSnapshot(kT, nodes, {});
  const RequestUnits units(s.nodes);
  JobRequest quarters = Part(1, "ml", 1);
  quarters.nodes = 2;
  quarters.tasks_per_node = 3;
  EXPECT_EQ(units.Of(quarters), 2 * 3 * 1);
  EXPECT_EQ(units.Of(WholeGpus(2, "ml", 4)), 16);
  JobRequest memory = Part(3, "ml", 0);
  memory.gpu_memory_mib = 20 * 1024;
  EXPECT_EQ(units.Of(memory), 1) << "counted at the fewest units: on the largest device, an 80 GiB h100";
  memory.gpu_type = "a100";
  EXPECT_EQ(units.Of(memory), 2) << "an a100 of 40 GiB: half of it";
  EXPECT_EQ(units.Of(CpuJob(4, 1, 1, 1)), 0);
}

TEST(QuotaUnits, ABookCountsRunningSlicesAndPrintsGpusWithFractions) {
  const std::vector<TeamView> teams = {Team("ml", 2, 2)};
  const std::vector<RunningJob> running = {Held(1, "ml", {Whole("a", {0, 1})}), Held(2, "ml", {Slice("a", 2, 3)}),
                                           Held(3, "ml", {Slice("a", 2, 1), Slice("a", 3, 2)})};
  const QuotaBook q(teams, running);
  EXPECT_EQ(q.used("ml"), 8 + 3 + 3);
  EXPECT_EQ(q.quota("ml"), 8);
  EXPECT_EQ(q.limit("ml"), 16);
  EXPECT_TRUE(q.borrowing("ml"));
  EXPECT_TRUE(q.Admits("ml", 2));
  EXPECT_FALSE(q.Admits("ml", 3));
  EXPECT_EQ(q.LimitReason("ml", 3),
            "team ml is at its limit: 3.5 of 4 GPUs in use (quota 2 + borrow limit 2); this job needs 0.75");
}

// A job larger than its team's quota + borrow limit waits for no job to end: the reason
// says so, and what would let it start (it used to read like any job waiting its turn).
TEST(QuotaUnits, AJobAboveTheTeamsLimitIsToldItMayNeverStart) {
  Snapshot s = On({{"a", Devs(4, "h100")}, {"b", Devs(4, "h100")}}, {}, {Team("ml", 4, 2)});
  s.pending.push_back(WholeGpus(1, "ml", 4));
  s.pending.push_back(WholeGpus(2, "ml", 4));
  s.pending.back().nodes = 2;
  const Decision d = Schedule(s);
  EXPECT_EQ(Started(d), (std::vector<int64_t>{1}));
  EXPECT_EQ(d.pending_reasons.at(2),
            "team ml may never hold this job: it needs 8 GPUs, above the team's limit of 6 (quota 4 + borrow limit "
            "2); an admin may raise it (cohort team set ml --quota/--borrow-limit)");
}

TEST(QuotaUnits, ATeamOfQuotaOneRunsFourQuarterJobsAndTheFifthWaitsAtItsLimit) {
  const std::vector<DetailNode> nodes = {{"a", Devs(4, "h100")}};
  Snapshot s = On(nodes, {}, {Team("ml", 1, 0)});
  for (int64_t id = 1; id <= 5; ++id) s.pending.push_back(Part(id, "ml", 1));
  const Decision d = Schedule(s);
  EXPECT_EQ(Started(d), (std::vector<int64_t>{1, 2, 3, 4})) << "four quarters are the team's one GPU";
  EXPECT_EQ(d.pending_reasons.at(5),
            "team ml is at its limit: 1 of 1 GPUs in use (quota 1 + borrow limit 0); this job needs 0.25");
  // With a borrow limit of 1 the fifth borrows; a whole GPU beyond it does not fit the limit.
  s.shares->teams = {Team("ml", 1, 1)};
  s.pending.push_back(WholeGpus(6, "ml", 1));
  const Decision borrow = Schedule(s);
  EXPECT_EQ(Started(borrow), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(borrow.pending_reasons.at(6),
            "team ml is at its limit: 1.25 of 2 GPUs in use (quota 1 + borrow limit 1); this job needs 1");
}

TEST(QuotaUnits, RunningWholeAndFractionalJobsCountTogether) {
  const std::vector<DetailNode> nodes = {{"a", Devs(4, "h100")}};
  // ml holds 1.75 GPUs of its quota 1 + borrow limit 1: a half does not fit, a quarter does.
  Snapshot s = On(nodes, {Held(1, "ml", {Whole("a", {0})}), Held(2, "ml", {Slice("a", 1, 3, 60 * 1024)})},
                  {Team("ml", 1, 1)});
  s.pending = {Part(10, "ml", 2), Part(11, "ml", 1)};
  const Decision d = Schedule(s);
  EXPECT_EQ(Started(d), std::vector<int64_t>{11});
  EXPECT_EQ(d.pending_reasons.at(10),
            "team ml is at its limit: 1.75 of 2 GPUs in use (quota 1 + borrow limit 1); this job needs 0.5");
  // Ranked: within quota only while the team's parts stay within its one GPU.
  Snapshot fresh = On(nodes, {Held(2, "ml", {Slice("a", 1, 3)})}, {Team("ml", 1, 1)});
  fresh.pending = {Part(10, "ml", 2), Part(11, "ml", 1)};
  const QuotaBook book(fresh.shares->teams, fresh.running);
  for (const RankedJob& r : RankQueue(fresh, book)) {
    EXPECT_EQ(r.queue_class, r.job->id == 11 ? QueueClass::kWithinQuota : QueueClass::kBorrowing) << r.job->id;
  }
}

TEST(QuotaUnits, AMemoryOnlyJobCountsTheUnitsItsSliceTakes) {
  // 30 GiB of an 80 GiB GPU reserves 2 units: two such jobs fill a quota of 1.
  const std::vector<DetailNode> nodes = {{"a", Devs(2, "h100")}};
  Snapshot s = On(nodes, {}, {Team("ml", 1, 0)});
  for (int64_t id = 1; id <= 3; ++id) {
    JobRequest j = Part(id, "ml", 0);
    j.gpu_memory_mib = 30 * 1024;
    s.pending.push_back(j);
  }
  Decision d = Schedule(s);
  EXPECT_EQ(Started(d), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(d.pending_reasons.at(3),
            "team ml is at its limit: 1 of 1 GPUs in use (quota 1 + borrow limit 0); this job needs 0.5");
  // Counted at 1 unit (on the largest device, an idle-less h100) it is admitted, but the
  // a100 it gets takes 2 of its 40 GiB: the limit refuses that slice.
  const std::vector<DetailNode> mixed = {{"h", Devs(1, "h100")}, {"x", {Dev(0, "a100", -1, 40 * 1024)}}};
  s = On(mixed, {Held(1, "ml", {Slice("h", 0, 3)}), Held(2, "other", {Slice("h", 0, 1)})}, {Team("ml", 1, 0)});
  JobRequest small = Part(10, "ml", 0);
  small.gpu_memory_mib = 20 * 1024;
  s.pending = {small};
  d = Schedule(s);
  EXPECT_TRUE(d.start.empty());
  EXPECT_EQ(d.pending_reasons.at(10),
            "team ml is at its limit: 0.75 of 1 GPUs in use (quota 1 + borrow limit 0); this job needs 0.5");
}

TEST(QuotaUnits, ABorrowersHalfGpuJobsAreReclaimedForATeamWithinItsQuota) {
  // cv has no quota and borrows two GPUs in halves; ml owns one GPU and asks for it.
  const std::vector<DetailNode> nodes = {{"a", Devs(2, "h100")}};
  const std::vector<RunningJob> halves = {
      Held(1, "cv", {Slice("a", 0, 2, 40 * 1024)}, 5), Held(2, "cv", {Slice("a", 0, 2, 40 * 1024)}, 10),
      Held(3, "cv", {Slice("a", 1, 2, 40 * 1024)}, 20), Held(4, "cv", {Slice("a", 1, 2, 40 * 1024)}, 25)};
  Snapshot s = On(nodes, halves, {Team("ml", 1), Team("cv", 0)});
  s.pending = {WholeGpus(10, "ml", 1)};
  Decision d = Schedule(s);
  EXPECT_EQ(Victims(d), (std::vector<int64_t>{1, 2})) << "GPU 0's halves lose 15 min; GPU 1's 45";
  ASSERT_FALSE(d.preempt.empty());
  EXPECT_EQ(d.preempt[0].kind, PreemptKind::kReclaim);
  EXPECT_NE(d.preempt[0].reason.find("needs 1 GPUs within the team's quota of 1 (0 in use); team cv borrows 2 "
                                     "beyond its quota of 0"),
            std::string::npos)
      << d.preempt[0].reason;
  // A half-GPU job of ml reclaims one half: the cheapest.
  s.pending = {Part(11, "ml", 2)};
  d = Schedule(s);
  EXPECT_EQ(Victims(d), std::vector<int64_t>{1});
  ASSERT_FALSE(d.preempt.empty());
  EXPECT_EQ(d.preempt[0].kind, PreemptKind::kReclaim);
  // Without a quota of its own ml only borrows: nothing is reclaimed for it.
  s.shares->teams = {Team("ml", 0), Team("cv", 0)};
  EXPECT_TRUE(Schedule(s).preempt.empty());
}

TEST(QuotaUnits, AFractionalBorrowerIsReclaimedOnlyWhatItBorrows) {
  // cv (quota 1) holds five quarters: it borrows one. GPU 1's other three quarters are
  // team other's, within its quota. ml (quota 1) may take back cv's borrowed quarter, but
  // not two of them: the second would be cv's guaranteed GPU.
  const std::vector<DetailNode> nodes = {{"a", Devs(2, "h100")}};
  std::vector<RunningJob> running;
  for (int64_t id = 1; id <= 4; ++id) running.push_back(Held(id, "cv", {Slice("a", 0, 1)}, 10 + id));
  running.push_back(Held(5, "cv", {Slice("a", 1, 1)}, 2));
  running.push_back(Held(6, "other", {Slice("a", 1, 3)}, 1));
  Snapshot s = On(nodes, running, {Team("ml", 1), Team("cv", 1), Team("other", 1)});
  s.pending = {Part(10, "ml", 1)};
  Decision d = Schedule(s);
  EXPECT_EQ(Victims(d), std::vector<int64_t>{5});
  s.pending = {Part(11, "ml", 2)};
  d = Schedule(s);
  EXPECT_TRUE(d.preempt.empty()) << "two of cv's quarters would take it below its quota of 1";
  // Once cv holds only its quota, it is no borrower at all.
  running[4] = Held(7, "other", {Slice("a", 1, 1)}, 2);
  s = On(nodes, running, {Team("ml", 1), Team("cv", 1), Team("other", 1)});
  s.pending = {Part(10, "ml", 1)};
  d = Schedule(s);
  EXPECT_TRUE(d.preempt.empty());
  EXPECT_TRUE(d.start.empty());
}

TEST(QuotaUnits, AWithinQuotaSharingJobReclaimsFromAWholeGpuBorrower) {
  const std::vector<DetailNode> nodes = {{"a", Devs(1, "h100")}};
  Snapshot s = On(nodes, {Held(1, "cv", {Whole("a", {0})})}, {Team("ml", 1), Team("cv", 0)});
  s.pending = {Part(10, "ml", 1)};
  const Decision d = Schedule(s);
  EXPECT_EQ(Victims(d), std::vector<int64_t>{1});
  EXPECT_NE(d.preempt[0].reason.find("job 10 of team ml needs 0.25 GPUs"), std::string::npos) << d.preempt[0].reason;
}

TEST(QuotaUnits, TheSizeFactorCountsParts) {
  SharePolicy p;
  p.weights.size = 100;
  const PriorityModel m(p, kT, 4);
  EXPECT_DOUBLE_EQ(m.Of(Part(1, "ml", 2), 2).size, 0.125) << "half a GPU of a cluster of 4";
  EXPECT_DOUBLE_EQ(m.Of(WholeGpus(2, "ml", 2), UnitsOfGpus(2)).size, 0.5);
}

}  // namespace
}  // namespace cohort::sched
