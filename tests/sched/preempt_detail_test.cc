// Preemption in device detail (sched/preempt.h, issues 17 and 18): victims that free an
// NVLink island for a job that needs connected GPUs, victims under one switch for a gang,
// typed, MIG and sharing jobs that preempt only jobs whose devices they can use,
// constrained jobs, and the nodes held for a nominated job. Each case also checks the
// property: once the victims are gone, the preemptor starts where they were.
#include <gtest/gtest.h>

#include <algorithm>

#include "detail_cluster.h"
#include "sched/preempt.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr int64_t kMinute = 60'000;
constexpr int64_t kT = 1'000 * kMinute;

// A low-priority job of team "t" holding `usage`, its last checkpoint `lost` minutes ago.
RunningJob Low(int64_t id, std::vector<Usage> usage, int64_t lost_minutes, int priority = 0) {
  RunningJob r;
  r.id = id;
  r.team = "t";
  r.priority = priority;
  r.usage = std::move(usage);
  r.start_ms = kT - 120 * kMinute;
  r.checkpoint_ms = kT - lost_minutes * kMinute;
  return r;
}

JobRequest High(int64_t id, int gpus, int nodes = 1) {
  JobRequest j = GpuJob(id, nodes, gpus);
  j.team = "t";
  j.priority = 5;
  j.submit_ms = kT - 1000;
  return j;
}

void WithShares(Snapshot& s) {
  s.shares.emplace();
  TeamView t;
  t.name = "t";
  t.quota_gpus = 1000;
  s.shares->teams = {t};
  s.shares->preemption.min_runtime_ms = 10 * kMinute;
}

std::vector<int64_t> SortedVictims(const Decision& d) {
  std::vector<int64_t> v;
  for (const Preemption& p : d.preempt) v.push_back(p.victim);
  std::sort(v.begin(), v.end());
  return v;
}

// The property: with the victims gone, the preemptor starts, and where.
std::string StartsOnceGone(const Snapshot& s, const std::vector<DetailNode>& nodes, const Decision& d, int64_t job) {
  Snapshot after = WithoutJobs(s, nodes, SortedVictims(d));
  after.shares.reset();  // placement alone
  const Decision next = Schedule(after);
  return Where(next, job);
}

// Two islands of four: GPUs 0-3 and 4-7. Free: 3 and 7. The cheapest victims for four
// GPUs (jobs 1 and 2, one GPU in each island) would leave them scattered over both.
std::vector<DetailNode> TwoIslands() { return {DetailNode{"a", Devs(8, "h100", 4)}}; }
std::vector<RunningJob> Scattered() {
  return {Low(1, {Whole("a", {0})}, 1), Low(2, {Whole("a", {4})}, 2), Low(3, {Whole("a", {1, 2})}, 10),
          Low(4, {Whole("a", {5, 6})}, 20)};
}

TEST(PreemptDetail, TopologyRequiredFreesOneIslandAtTheLeastWork) {
  const std::vector<DetailNode> nodes = TwoIslands();
  Snapshot s = DetailSnapshot(kT, nodes, Scattered());
  WithShares(s);
  JobRequest j = High(10, 4);
  j.topology_required = true;
  s.pending = {j};
  const Decision d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{1, 3})) << "island 0 for 1 + 20 GPU-min; island 1 costs 2 + 40";
  EXPECT_EQ(StartsOnceGone(s, nodes, d, 10), "a:0,1,2,3");
}

TEST(PreemptDetail, TopologyPreferredAlsoFreesAnIslandRatherThanScatteredGpus) {
  const std::vector<DetailNode> nodes = TwoIslands();
  Snapshot s = DetailSnapshot(kT, nodes, Scattered());
  WithShares(s);
  s.pending = {High(10, 4)};  // a plain job: connected GPUs preferred
  const Decision d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{1, 3})) << "jobs 1 and 2 lose less but leave 4 GPUs scattered";
  EXPECT_EQ(StartsOnceGone(s, nodes, d, 10), "a:0,1,2,3");
}

TEST(PreemptDetail, AtHigherVictimPriorityTheScatteredChoiceWins) {
  const std::vector<DetailNode> nodes = TwoIslands();
  std::vector<RunningJob> running = Scattered();
  running[2].priority = running[3].priority = 1;  // the island's jobs are of higher priority
  Snapshot s = DetailSnapshot(kT, nodes, running);
  WithShares(s);
  s.pending = {High(10, 4)};
  Decision d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{1, 2})) << "preferred: lower priority victims come first";
  s.pending[0].topology_required = true;
  d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{1, 3})) << "required: only a freed island will do";
}

TEST(PreemptDetail, ATypedJobPreemptsOnlyJobsOnItsType) {
  const std::vector<DetailNode> nodes = {{"a", Devs(4, "a100")}, {"b", Devs(4, "h100")}};
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Low(1, {Whole("a", {0, 1, 2, 3})}, 1), Low(2, {Whole("b", {0, 1})}, 30),
                               Low(3, {Whole("b", {2, 3})}, 40)});
  WithShares(s);
  JobRequest j = High(10, 2);
  j.gpu_type = "h100";
  s.pending = {j};
  const Decision d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{2})) << "job 1 loses least but holds a100s";
  EXPECT_EQ(StartsOnceGone(s, nodes, d, 10), "b:0,1");
}

TEST(PreemptDetail, ASharingJobPreemptsOneSliceNotTheWholeGpu) {
  const std::vector<DetailNode> nodes = {{"a", Devs(1, "h100")}};
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Low(1, {Slice("a", 0, 2, 40'960)}, 5), Low(2, {Slice("a", 0, 2, 40'960)}, 3)});
  WithShares(s);
  JobRequest half = High(10, 0);
  half.gpu_share = 2;
  s.pending = {half};
  Decision d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{2})) << "half a GPU: one half-GPU victim, the cheaper";
  EXPECT_EQ(StartsOnceGone(s, nodes, d, 10), "a:0");
  s.pending = {High(11, 1)};
  d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{1, 2})) << "a whole GPU: both sharing jobs";
  EXPECT_EQ(StartsOnceGone(s, nodes, d, 11), "a:0");
}

TEST(PreemptDetail, AMigJobPreemptsAMigJobOfItsProfileOnly) {
  std::vector<GpuView> devices = Devs(2, "h100");
  devices.push_back(Mig(2, "1g.10gb"));
  devices.push_back(Mig(3, "2g.20gb"));
  const std::vector<DetailNode> nodes = {{"a", devices}};
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Low(1, {Whole("a", {0, 1})}, 1), Low(2, {Whole("a", {3})}, 2),
                               Low(3, {Whole("a", {2})}, 30)});
  WithShares(s);
  JobRequest j = High(10, 1);
  j.gpu_type = "1g.10gb";
  s.pending = {j};
  const Decision d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{3}));
  EXPECT_EQ(StartsOnceGone(s, nodes, d, 10), "a:2");
}

TEST(PreemptDetail, NoVictimWhoseFreeingWouldNotLetItStart) {
  // Two h100s are needed on one node; only one may be preempted (the other runs at the
  // preemptor's priority).
  const std::vector<DetailNode> nodes = {{"a", Devs(2, "h100")}, {"b", Devs(2, "h100")}};
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Low(1, {Whole("a", {0})}, 1), Low(2, {Whole("a", {1})}, 1, 5),
                               Low(3, {Whole("b", {0})}, 1), Low(4, {Whole("b", {1})}, 1, 5)});
  WithShares(s);
  JobRequest j = High(10, 2);
  j.gpu_type = "h100";
  s.pending = {j};
  const Decision d = Schedule(s);
  EXPECT_TRUE(d.preempt.empty());
  EXPECT_NE(Reason(d, 10).find("needs 1 node with 2 free h100 GPUs"), std::string::npos) << Reason(d, 10);
}

TEST(PreemptDetail, AGangTakesNodesUnderOneSwitch) {
  const std::vector<DetailNode> nodes = {{"a", Devs(8, "h100"), "s1"}, {"b", Devs(8, "h100"), "s1"},
                                         {"c", Devs(8, "h100"), "s2"}, {"d", Devs(8, "h100"), "s2"}};
  // The cheapest nodes are a and c, under two switches; b and d cost more.
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Low(1, {Whole("a", Range(8))}, 1), Low(2, {Whole("b", Range(8))}, 9),
                               Low(3, {Whole("c", Range(8))}, 1), Low(4, {Whole("d", Range(8))}, 5)});
  WithShares(s);
  s.pending = {High(10, 8, 2)};
  Decision d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{3, 4})) << "s2 costs 6 GPU-min x 8, s1 10";
  ASSERT_FALSE(d.preempt.empty());
  EXPECT_EQ(d.preempt[0].nodes, (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(StartsOnceGone(s, nodes, d, 10), "c:0,1,2,3,4,5,6,7 d:0,1,2,3,4,5,6,7");
  // Required, with only one node of s2 preemptible: s1 it is.
  s.running[3].priority = 5;
  s.pending[0].topology_required = true;
  d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{1, 2}));
}

TEST(PreemptDetail, AConstrainedJobPreemptsOnlyOnNodesItMayUse) {
  const std::vector<DetailNode> nodes = {{"a", Devs(4, ""), "", {"ib"}, 65'536}, {"b", Devs(4, ""), "", {}, 65'536}};
  Snapshot s = DetailSnapshot(kT, nodes,
                              {Low(1, {Whole("a", Range(4), 1, 32'768)}, 30), Low(2, {Whole("b", Range(4))}, 1)});
  WithShares(s);
  JobRequest j = High(10, 4);
  j.constraint = "ib";
  j.mem_per_node_mb = 40'000;
  s.pending = {j};
  Decision d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{1})) << "job 2 is cheaper but on a node without 'ib'";
  EXPECT_EQ(StartsOnceGone(s, nodes, d, 10), "a:0,1,2,3") << "job 1's --mem is given back too";
  s.pending[0].constraint.clear();
  s.pending[0].nodelist = "a";
  d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{1})) << "--nodelist a";
  s.pending[0].nodelist.clear();
  s.pending[0].exclude = "b";
  d = Schedule(s);
  EXPECT_EQ(SortedVictims(d), (std::vector<int64_t>{1})) << "--exclude b";
}

TEST(PreemptDetail, NodesBeingFreedWaitForTheNominatedJob) {
  const std::vector<DetailNode> nodes = {{"a", Devs(8, "h100")}};
  std::vector<RunningJob> running = {Low(1, {Whole("a", {0, 1, 2, 3})}, 5)};
  running[0].preemptible = false;
  running[0].preempting_for = 10;
  Snapshot s = DetailSnapshot(kT, nodes, running);
  WithShares(s);
  JobRequest nominated = High(10, 8);
  nominated.gpu_type = "h100";
  nominated.nominated = true;
  nominated.nominated_nodes = {"a"};
  JobRequest small = High(11, 2);
  small.priority = 0;
  s.pending = {nominated, small};
  Decision d = Schedule(s);
  EXPECT_EQ(Where(d, 11), "") << "GPUs 4-7 wait for job 10";
  EXPECT_TRUE(d.preempt.empty());
  s.pending[0].nominated = false;  // nomination over: the node is anyone's again
  s.pending[0].nominated_nodes.clear();
  s.running[0].preempting_for = 0;
  d = Schedule(s);
  EXPECT_EQ(Reason(d, 11), "waiting for job 10 (higher priority; its resources are reserved)")
      << "job 10 is reserved for in detail, and job 11 has no time limit";
  s.pending[1].time_limit_ms = 60'000;  // ends before job 1 (no time limit) could
  d = Schedule(s);
  EXPECT_NE(Where(d, 11), "");
}

}  // namespace
}  // namespace cohort::sched
