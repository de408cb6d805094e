// Preemption (sched/preempt.h) through whole scheduling passes: reclaim and priority, the
// victims that lose the least work on the nodes the gang gets, the minimum runtime, no
// team pushed below its quota, no back-and-forth, nominated jobs that wait.
#include "sched/preempt.h"

#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr int64_t kMinute = 60'000;
constexpr int64_t kT = 1'000 * kMinute;  // "now" in these tests

TeamView Team(std::string name, int64_t quota, int64_t borrow = -1, int64_t weight = 1) {
  TeamView t;
  t.name = std::move(name);
  t.quota_gpus = quota;
  t.borrow_limit_gpus = borrow;
  t.weight = weight;
  return t;
}

// A running job of `team` holding `gpus` on each of `nodes`, started `ran` ago, its last
// checkpoint `since_checkpoint` ago.
RunningJob Holding(int64_t id, std::string team, std::vector<std::string> nodes, int gpus, int64_t ran = 60 * kMinute,
                   int64_t since_checkpoint = 30 * kMinute, int priority = 0) {
  RunningJob r;
  r.id = id;
  r.team = std::move(team);
  for (auto& n : nodes) r.usage.push_back({std::move(n), gpus, 1});
  r.start_ms = kT - ran;
  r.checkpoint_ms = kT - since_checkpoint;
  r.priority = priority;
  return r;
}

JobRequest Wants(int64_t id, std::string team, int nodes, int gpus, int priority = 0) {
  JobRequest j = GpuJob(id, nodes, gpus);
  j.team = std::move(team);
  j.priority = priority;
  j.submit_ms = kT - 1000;
  return j;
}

// A snapshot of `nodes` nodes of 8 GPUs (node-a, node-b, ...) with `running` on them.
Snapshot Cluster(int nodes, std::vector<RunningJob> running, std::vector<TeamView> teams) {
  Snapshot s;
  s.now_ms = kT;
  for (int i = 0; i < nodes; ++i) {
    const std::string id = std::string("node-") + char('a' + i);
    std::vector<bool> busy(8, false);
    int cpus = 0;
    for (const auto& r : running) {
      for (const auto& u : r.usage) {
        if (u.node != id) continue;
        int taken = 0;
        for (int g = 0; g < 8 && taken < u.gpus; ++g) {
          if (!busy[g]) busy[g] = true, ++taken;
        }
        cpus += u.cpus;
      }
    }
    std::vector<int> free;
    for (int g = 0; g < 8; ++g) {
      if (!busy[g]) free.push_back(g);
    }
    s.nodes.push_back(Node(id, 8, free, 64, 64 - cpus));
  }
  s.running = std::move(running);
  s.shares.emplace();
  s.shares->teams = std::move(teams);
  s.shares->preemption.min_runtime_ms = 10 * kMinute;
  return s;
}

std::vector<int64_t> Victims(const Decision& d) {
  std::vector<int64_t> v;
  for (const auto& p : d.preempt) v.push_back(p.victim);
  return v;
}

TEST(Preempt, OwnerReclaimsBorrowedGpusFromTheJobThatLosesLeastWork) {
  // "cv" (no quota) borrows both nodes; "ml" owns 8 GPUs and asks for them.
  Snapshot s = Cluster(2,
                       {Holding(1, "cv", {"node-a"}, 8, 60 * kMinute, 40 * kMinute),
                        Holding(2, "cv", {"node-b"}, 8, 60 * kMinute, 5 * kMinute)},
                       {Team("ml", 8), Team("cv", 0)});
  s.pending = {Wants(10, "ml", 1, 8)};
  const Decision d = Schedule(s);
  ASSERT_EQ(Victims(d), std::vector<int64_t>{2}) << "job 2 checkpointed 5 min ago, job 1 40 min ago";
  EXPECT_EQ(d.preempt[0].preemptor, 10);
  EXPECT_EQ(d.preempt[0].kind, PreemptKind::kReclaim);
  EXPECT_DOUBLE_EQ(d.preempt[0].work_at_risk_gpu_s, 5 * 60 * 8);
  EXPECT_NE(d.preempt[0].reason.find("reclaim: job 10 of team ml needs 8 GPUs within the team's quota of 8"),
            std::string::npos)
      << d.preempt[0].reason;
  EXPECT_EQ(d.pending_reasons.at(10), "preempting job(s) 2 (reclaim)");
  EXPECT_TRUE(d.start.empty());
}

TEST(Preempt, NoPreemptionWithoutAQuotaToReclaimOrWhenPreemptionIsOff) {
  Snapshot s = Cluster(1, {Holding(1, "cv", {"node-a"}, 8)}, {Team("ml", 0), Team("cv", 0)});
  s.pending = {Wants(10, "ml", 1, 8)};
  EXPECT_TRUE(Schedule(s).preempt.empty()) << "ml has no quota: it only borrows";
  s.shares->teams = {Team("ml", 8), Team("cv", 0)};
  s.shares->preemption.enabled = false;
  EXPECT_TRUE(Schedule(s).preempt.empty());
  s.shares->preemption.enabled = true;
  EXPECT_EQ(Victims(Schedule(s)), std::vector<int64_t>{1});
}

TEST(Preempt, AJobThatJustStartedIsProtected) {
  Snapshot s = Cluster(2,
                       {Holding(1, "cv", {"node-a"}, 8, 9 * kMinute, 9 * kMinute),
                        Holding(2, "cv", {"node-b"}, 8, 3 * kMinute, 3 * kMinute)},
                       {Team("ml", 8), Team("cv", 0)});
  s.pending = {Wants(10, "ml", 1, 8)};
  Decision d = Schedule(s);
  EXPECT_TRUE(d.preempt.empty()) << "both ran less than the 10 min minimum";
  EXPECT_EQ(d.pending_reasons.at(10).rfind("needs 1 node with 8 free GPUs; 0 available", 0), 0u)
      << d.pending_reasons.at(10);
  s.running[0].start_ms = kT - 10 * kMinute;
  d = Schedule(s);
  EXPECT_EQ(Victims(d), std::vector<int64_t>{1}) << "job 1 passed the minimum; job 2 has less work at risk but not";
}

TEST(Preempt, ReclaimNeverPushesATeamBelowItsQuota) {
  // cv has a quota of 8 and holds 16: 8 borrowed. ml may reclaim 8, not 16.
  Snapshot s = Cluster(2, {Holding(1, "cv", {"node-a"}, 8), Holding(2, "cv", {"node-b"}, 8)},
                       {Team("ml", 16), Team("cv", 8)});
  s.pending = {Wants(10, "ml", 2, 8)};
  EXPECT_TRUE(Schedule(s).preempt.empty());
  s.pending = {Wants(10, "ml", 1, 8)};
  EXPECT_EQ(Victims(Schedule(s)).size(), 1u);
}

TEST(Preempt, TheReclaimerMustStayWithinItsOwnQuota) {
  Snapshot s = Cluster(2, {Holding(1, "cv", {"node-a"}, 8), Holding(2, "ml", {"node-b"}, 8)},
                       {Team("ml", 8), Team("cv", 0)});
  s.pending = {Wants(10, "ml", 1, 8)};
  EXPECT_TRUE(Schedule(s).preempt.empty()) << "ml already uses its whole quota: it would borrow, not reclaim";
}

TEST(Preempt, PriorityPreemptsOnlyLowerPriorityJobsOfTheSameTeam) {
  Snapshot s = Cluster(2,
                       {Holding(1, "ml", {"node-a"}, 8, 60 * kMinute, 30 * kMinute, /*priority=*/5),
                        Holding(2, "cv", {"node-b"}, 8, 60 * kMinute, 1 * kMinute, /*priority=*/0)},
                       {Team("ml", 8), Team("cv", 8)});
  s.pending = {Wants(10, "ml", 1, 8, /*priority=*/5)};
  EXPECT_TRUE(Schedule(s).preempt.empty()) << "equal priority never preempts; cv is within its quota";
  s.pending[0].priority = 6;
  const Decision d = Schedule(s);
  ASSERT_EQ(Victims(d), std::vector<int64_t>{1});
  EXPECT_EQ(d.preempt[0].kind, PreemptKind::kPriority);
  EXPECT_EQ(d.preempt[0].reason, "priority: job 10 of team ml has priority 6, above this job's 5");
}

TEST(Preempt, NeverPreemptsTheJobThatPreemptedIt) {
  Snapshot s = Cluster(1, {Holding(1, "ml", {"node-a"}, 8, 60 * kMinute, 30 * kMinute, 1)}, {Team("ml", 8)});
  JobRequest back = Wants(10, "ml", 1, 8, 2);
  back.preempted_by = {1};
  s.pending = {back};
  EXPECT_TRUE(Schedule(s).preempt.empty());
}

TEST(Preempt, TheGangGetsWholeNodesAndOnlyTheirJobsArePreempted) {
  // A 2-node gang of 8 GPUs per node. node-a: one 8-GPU job (much work at risk); node-b:
  // two 4-GPU jobs; node-c: a 4-GPU job and 4 free GPUs; node-d: an 8-GPU job that
  // checkpointed a minute ago.
  Snapshot s = Cluster(4,
                       {Holding(1, "cv", {"node-a"}, 8, 120 * kMinute, 100 * kMinute),
                        Holding(2, "cv", {"node-b"}, 4, 60 * kMinute, 20 * kMinute),
                        Holding(3, "cv", {"node-b"}, 4, 60 * kMinute, 20 * kMinute),
                        Holding(4, "cv", {"node-c"}, 4, 60 * kMinute, 10 * kMinute),
                        Holding(5, "cv", {"node-d"}, 8, 60 * kMinute, 1 * kMinute)},
                       {Team("ml", 16), Team("cv", 0)});
  s.pending = {Wants(10, "ml", 2, 8)};
  const Decision d = Schedule(s);
  auto v = Victims(d);
  std::sort(v.begin(), v.end());
  EXPECT_EQ(v, (std::vector<int64_t>{4, 5})) << "node-c (10 min x 4 GPUs) and node-d (1 min x 8 GPUs) lose least";
}

TEST(Preempt, AMultiNodeVictimIsCountedOnceAndFreesBothNodes) {
  Snapshot s = Cluster(3,
                       {Holding(1, "cv", {"node-a", "node-b"}, 8, 60 * kMinute, 10 * kMinute),
                        Holding(2, "cv", {"node-c"}, 8, 60 * kMinute, 50 * kMinute)},
                       {Team("ml", 16), Team("cv", 0)});
  s.pending = {Wants(10, "ml", 2, 8)};
  EXPECT_EQ(Victims(Schedule(s)), std::vector<int64_t>{1});
}

TEST(Preempt, ANominatedJobWaitsForItsVictimsAndPreemptsNoMore) {
  Snapshot s = Cluster(2, {Holding(1, "cv", {"node-a"}, 8), Holding(2, "cv", {"node-b"}, 8)},
                       {Team("ml", 16), Team("cv", 0)});
  s.running[0].preemptible = false;
  s.running[0].preempting_for = 10;
  JobRequest j = Wants(10, "ml", 1, 8);
  j.nominated = true;
  s.pending = {j, Wants(11, "cv", 1, 8)};
  const Decision d = Schedule(s);
  EXPECT_TRUE(d.preempt.empty());
  EXPECT_EQ(d.pending_reasons.at(10).rfind("waiting for preempted job(s) 1 to checkpoint and stop; ", 0), 0u)
      << d.pending_reasons.at(10);
  ASSERT_TRUE(d.reservation.has_value()) << "the nominated job holds the nodes being freed";
  EXPECT_EQ(d.reservation->job_id, 10);
}

TEST(Preempt, TwoPreemptorsInOnePassNeverShareAVictim) {
  Snapshot s = Cluster(2, {Holding(1, "cv", {"node-a"}, 8), Holding(2, "cv", {"node-b"}, 8)},
                       {Team("ml", 8), Team("nlp", 8), Team("cv", 0)});
  s.pending = {Wants(10, "ml", 1, 8), Wants(11, "nlp", 1, 8)};
  const Decision d = Schedule(s);
  auto v = Victims(d);
  std::sort(v.begin(), v.end());
  EXPECT_EQ(v, (std::vector<int64_t>{1, 2}));
  EXPECT_NE(d.preempt[0].preemptor, d.preempt[1].preemptor);
}

TEST(Preempt, WorkAtRiskCountsFromTheLaterOfStartAndCheckpoint) {
  RunningJob r = Holding(1, "cv", {"node-a", "node-b"}, 2, 10 * kMinute, 30 * kMinute);
  EXPECT_DOUBLE_EQ(WorkAtRiskGpuSeconds(r, kT), 10 * 60 * 4) << "a checkpoint before its start counts as the start";
  r.checkpoint_ms = kT - kMinute;
  EXPECT_DOUBLE_EQ(WorkAtRiskGpuSeconds(r, kT), 60 * 4);
}

}  // namespace
}  // namespace cohort::sched
