// Fair share (sched/fair_share.h): usage decay, the fair-share factor, multifactor
// priority and the queue's classes; quotas with borrowing (sched/quota.h).
#include "sched/fair_share.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sched/gpu_units.h"
#include "sched/quota.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr int64_t kHour = 3'600'000;

TeamView Team(std::string name, int64_t weight, double usage = 0, int64_t quota = 0, int64_t borrow = -1) {
  TeamView t;
  t.name = std::move(name);
  t.weight = weight;
  t.usage_gpu_s = usage;
  t.quota_gpus = quota;
  t.borrow_limit_gpus = borrow;
  return t;
}

JobRequest TeamJob(int64_t id, std::string team, int gpus, int priority = 0, int64_t submit_ms = 0) {
  JobRequest j = GpuJob(id, 1, gpus);
  j.team = std::move(team);
  j.priority = priority;
  j.submit_ms = submit_ms;
  return j;
}

TEST(FairShare, UsageHalvesEveryHalfLife) {
  EXPECT_DOUBLE_EQ(DecayUsage(100, kHour, kHour), 50);
  EXPECT_DOUBLE_EQ(DecayUsage(100, 2 * kHour, kHour), 25);
  EXPECT_DOUBLE_EQ(DecayUsage(100, 0, kHour), 100);
  EXPECT_DOUBLE_EQ(DecayUsage(100, kHour, 0), 100) << "no half-life: no decay";
}

TEST(FairShare, DecayedGpuSecondsAddUpOverSplitIntervals) {
  // Without decay: GPUs x seconds.
  EXPECT_DOUBLE_EQ(DecayedGpuSeconds(4, 0, 10'000, 10'000, 0), 40);
  // With decay, accruing in two steps (decaying the first part) equals one step.
  const int64_t h = kHour;
  const double whole = DecayedGpuSeconds(8, 0, 3 * kHour, 3 * kHour, h);
  const double first = DecayedGpuSeconds(8, 0, kHour, kHour, h);
  const double then = DecayUsage(first, 2 * kHour, h) + DecayedGpuSeconds(8, kHour, 3 * kHour, 3 * kHour, h);
  EXPECT_NEAR(whole, then, 1e-6 * whole);
  // An hour's worth, an hour ago, is worth less than the last hour's.
  EXPECT_LT(DecayedGpuSeconds(1, 0, kHour, 2 * kHour, h), DecayedGpuSeconds(1, kHour, 2 * kHour, 2 * kHour, h));
  EXPECT_EQ(DecayedGpuSeconds(1, 5, 5, 10, h), 0);
}

TEST(FairShare, FactorIsTwoToTheMinusUsageOverShare) {
  const std::vector<TeamView> teams = {Team("a", 1, 100), Team("b", 2, 100), Team("c", 1, 0)};
  const auto s = FairShares(teams);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_DOUBLE_EQ(s[0].share, 0.25);
  EXPECT_DOUBLE_EQ(s[1].share, 0.5);
  EXPECT_DOUBLE_EQ(s[0].usage_fraction, 0.5);
  EXPECT_DOUBLE_EQ(s[0].factor, std::exp2(-0.5 / 0.25));  // used twice its share
  EXPECT_DOUBLE_EQ(s[1].factor, 0.5);                      // used exactly its share
  EXPECT_DOUBLE_EQ(s[2].factor, 1);                        // used nothing
  for (const auto& t : FairShares(std::vector<TeamView>{Team("x", 1), Team("y", 3)})) {
    EXPECT_DOUBLE_EQ(t.factor, 1) << "no usage at all: every team gets 1";
  }
}

TEST(FairShare, PriorityFactorsAndTheirWeights) {
  SharePolicy p;
  p.teams = {Team("a", 1, 300), Team("b", 1, 100)};
  p.weights.fair_share = 1000;
  p.weights.age = 100;
  p.weights.size = 10;
  p.weights.job = 2000;
  p.weights.max_age_ms = 10 * kHour;
  const PriorityModel m(p, 10 * kHour, 64);
  const JobRequest j = TeamJob(1, "b", 16, 500, 5 * kHour);
  const PriorityFactors f = m.Of(j, UnitsOfGpus(16));
  EXPECT_DOUBLE_EQ(f.fair_share, std::exp2(-0.25 / 0.5));
  EXPECT_DOUBLE_EQ(f.age, 0.5);
  EXPECT_DOUBLE_EQ(f.size, 0.25);
  EXPECT_DOUBLE_EQ(f.job, 0.75);
  EXPECT_DOUBLE_EQ(f.total, 1000 * f.fair_share + 100 * 0.5 + 10 * 0.25 + 2000 * 0.75);
  EXPECT_DOUBLE_EQ(m.Of(TeamJob(2, "b", 1, 0, 0), UnitsOfGpus(1)).age, 1) << "age is capped at max_age";
  EXPECT_DOUBLE_EQ(m.Of(TeamJob(3, "unlisted", 1), UnitsOfGpus(1)).fair_share, 1);
}

TEST(FairShare, TheTeamBelowItsShareGoesFirst) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("n1", 8)};
  snap.shares.emplace();
  snap.shares->teams = {Team("heavy", 1, 5000), Team("light", 1, 100)};
  // heavy's job is older and has the same priority: fair share decides.
  snap.pending = {TeamJob(1, "heavy", 8, 0, kNow - 1000), TeamJob(2, "light", 8, 0, kNow)};
  Decision d = Schedule(snap);
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].job_id, 2);
  // A job's own priority still outranks fair share with the default weights.
  snap.pending[0].priority = 1;
  d = Schedule(snap);
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].job_id, 1);
}

TEST(Quota, JobsWithinTheirQuotaComeBeforeBorrowers) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("n1", 8), IdleNode("n2", 8)};
  snap.shares.emplace();
  // "free" used nothing (factor 1) but has no quota; "owner" has a quota of 8.
  snap.shares->teams = {Team("free", 1, 0), Team("owner", 1, 9000, 8)};
  snap.pending = {TeamJob(1, "free", 8), TeamJob(2, "free", 8), TeamJob(3, "owner", 8)};
  const QuotaBook quotas(snap.shares->teams, snap.running);
  const auto ranked = RankQueue(snap, quotas);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0].job->id, 3);
  EXPECT_EQ(ranked[0].queue_class, QueueClass::kWithinQuota);
  EXPECT_EQ(ranked[1].queue_class, QueueClass::kBorrowing);
  const Decision d = Schedule(snap);
  EXPECT_NE(Find(d, 3), nullptr);
  EXPECT_NE(Find(d, 1), nullptr);
  EXPECT_EQ(Find(d, 2), nullptr);
}

TEST(Quota, BorrowingStopsAtTheBorrowLimit) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("n1", 8), IdleNode("n2", 8), IdleNode("n3", 8)};
  snap.shares.emplace();
  snap.shares->teams = {Team("ml", 1, 0, 8, 4)};  // at most 12 GPUs
  snap.pending = {TeamJob(1, "ml", 8), TeamJob(2, "ml", 4), TeamJob(3, "ml", 2)};
  const Decision d = Schedule(snap);
  EXPECT_NE(Find(d, 1), nullptr);
  EXPECT_NE(Find(d, 2), nullptr);
  EXPECT_EQ(Find(d, 3), nullptr) << "8 + 4 + 2 GPUs exceed quota 8 + borrow limit 4";
  EXPECT_EQ(d.pending_reasons.at(3),
            "team ml is at its limit: 12 of 12 GPUs in use (quota 8 + borrow limit 4); this job needs 2");
}

TEST(Quota, AnUnlistedTeamBorrowsWithoutLimit) {
  const QuotaBook q(std::vector<TeamView>{Team("ml", 1, 0, 8, 0)}, std::vector<RunningJob>{});
  EXPECT_TRUE(q.Admits("anyone", UnitsOfGpus(1'000'000)));
  EXPECT_FALSE(q.WithinQuota("anyone", 1));
  EXPECT_TRUE(q.WithinQuota("ml", UnitsOfGpus(8)));
  EXPECT_FALSE(q.WithinQuota("ml", UnitsOfGpus(8) + 1)) << "a quarter beyond the quota";
  EXPECT_FALSE(q.WithinQuota("ml", 0)) << "a CPU-only job is never within a GPU quota";
  EXPECT_FALSE(q.Admits("ml", UnitsOfGpus(9)));
}

TEST(Quota, WithoutSharesTheQueueRunsByPriorityAlone) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = {IdleNode("n1", 8)};
  snap.pending = {TeamJob(1, "a", 8, 0, 0), TeamJob(2, "b", 8, 5, 10)};
  const Decision d = Schedule(snap);
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].job_id, 2);
  EXPECT_TRUE(d.preempt.empty());
}

}  // namespace
}  // namespace cohort::sched
