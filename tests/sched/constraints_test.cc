// Node constraints: host lists, memory sizes, feature expressions, and whole passes with
// --nodelist, --exclude, --constraint and --mem (sched/constraints.h).
#include "sched/constraints.h"

#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

std::vector<std::string> Hosts(std::string_view text) {
  auto r = ExpandHostList(text, "--nodelist");
  EXPECT_TRUE(r.has_value()) << r.error().message;
  return r.value_or(std::vector<std::string>{});
}

std::string HostError(std::string_view text) {
  auto r = ExpandHostList(text, "--nodelist");
  return r ? std::string("(parsed)") : r.error().message;
}

TEST(HostList, ExpandsSlurmRangesKeepingPaddingAndOrder) {
  EXPECT_EQ(Hosts("node[1-3,7]"), (std::vector<std::string>{"node1", "node2", "node3", "node7"}));
  EXPECT_EQ(Hosts("n[08-10]"), (std::vector<std::string>{"n08", "n09", "n10"}));
  EXPECT_EQ(Hosts("gpu-a,n[1-2]x,gpu-a"), (std::vector<std::string>{"gpu-a", "n1x", "n2x"}));
  EXPECT_EQ(Hosts("a"), std::vector<std::string>{"a"});
}

TEST(HostList, BadSyntaxNamesTheFlagAndTheText) {
  EXPECT_EQ(HostError("node[1-3"), "--nodelist 'node[1-3': '[' without ']'");
  EXPECT_EQ(HostError("node[3-1]"), "--nodelist 'node[3-1]': range '3-1' runs backwards");
  EXPECT_EQ(HostError("a,,b"), "--nodelist 'a,,b': an empty name between commas");
  EXPECT_EQ(HostError("n[x]"), "--nodelist 'n[x]': 'x' is not a number or a range like 1-4");
  EXPECT_EQ(HostError("n[1-99999999]"), "--nodelist 'n[1-99999999]': more than 65536 names");
  EXPECT_EQ(HostError("bad/name"), "--nodelist 'bad/name': 'bad/name' is not a host name (letters, digits, '.', '_', '-')");
  EXPECT_EQ(HostError(""), "--nodelist '': the host list is empty");
}

TEST(Memory, ParsesSlurmSizesInMiB) {
  EXPECT_EQ(ParseMemoryMb("512", "--mem").value(), 512);
  EXPECT_EQ(ParseMemoryMb("1500M", "--mem").value(), 1500);
  EXPECT_EQ(ParseMemoryMb("64G", "--mem").value(), 64 * 1024);
  EXPECT_EQ(ParseMemoryMb("64gb", "--mem").value(), 64 * 1024);
  EXPECT_EQ(ParseMemoryMb("1TiB", "--mem").value(), 1024 * 1024);
  EXPECT_EQ(ParseMemoryMb("2048K", "--mem").value(), 2);
  EXPECT_EQ(ParseMemoryMb("12X", "--mem").error().message,
            "--mem: '12X' is not a memory size; use MiB or a K/M/G/T suffix (512, 1500M, 64G, 1T)");
  EXPECT_FALSE(ParseMemoryMb("G", "--mem").has_value());
  EXPECT_FALSE(ParseMemoryMb("-5G", "--mem").has_value());
  EXPECT_EQ(FormatMemoryMb(64 * 1024), "64G");
  EXPECT_EQ(FormatMemoryMb(1500), "1500M");
}

bool Match(std::string_view expr, std::vector<std::string> features) {
  auto e = FeatureExpr::Parse(expr);
  EXPECT_TRUE(e.has_value()) << e.error().message;
  return e && e->Matches(features);
}

TEST(FeatureExpr, AndBindsTighterThanOrAndParenthesesGroup) {
  EXPECT_TRUE(Match("a100", {"a100", "ib"}));
  EXPECT_FALSE(Match("h100", {"a100", "ib"}));
  EXPECT_TRUE(Match("a100&ib", {"a100", "ib"}));
  EXPECT_FALSE(Match("a100&ib", {"a100"}));
  EXPECT_TRUE(Match("h100|a100", {"a100"}));
  EXPECT_TRUE(Match("h100|a100&ib", {"h100"}));    // h100 | (a100 & ib)
  EXPECT_FALSE(Match("(h100|a100)&ib", {"h100"}));
  EXPECT_TRUE(Match("(h100|a100)&ib", {"a100", "ib"}));
  EXPECT_FALSE(Match("x", {}));
}

TEST(FeatureExpr, BadSyntaxSaysWhereAndWhat) {
  EXPECT_EQ(FeatureExpr::Parse("a100&").error().message,
            "--constraint 'a100&': a feature name is missing after '&' at offset 5");
  EXPECT_EQ(FeatureExpr::Parse("(a|b").error().message, "--constraint '(a|b': '(' without ')' at offset 4");
  EXPECT_EQ(FeatureExpr::Parse("a)").error().message, "--constraint 'a)': unexpected ')' at offset 1");
  EXPECT_EQ(FeatureExpr::Parse("").error().message, "--constraint '': a feature name is missing at offset 0");
}

TEST(ConstraintSyntax, NodelistMustFitTheGangAndNotBeExcluded) {
  JobRequest job = GpuJob(1, 2, 1);
  job.nodelist = "n[1-3]";
  EXPECT_EQ(CheckConstraintSyntax(job).error().message,
            "--nodelist names 3 nodes but the job has 2 (--nodes); every listed node is a member");
  job.nodelist = "n1";
  job.exclude = "n[1-2]";
  EXPECT_EQ(CheckConstraintSyntax(job).error().message, "--nodelist and --exclude both name n1");
  job.exclude = "n2";
  EXPECT_TRUE(CheckConstraintSyntax(job).has_value());
}

Snapshot Snap(std::vector<NodeView> nodes, std::vector<JobRequest> pending) {
  Snapshot snap;
  snap.now_ms = kNow;
  snap.nodes = std::move(nodes);
  snap.pending = std::move(pending);
  return snap;
}

NodeView Featured(NodeView n, std::vector<std::string> features, int64_t memory_mb = 65536) {
  n.features = std::move(features);
  n.memory_mb = memory_mb;
  n.free_memory_mb = memory_mb;
  return n;
}

TEST(ConstrainedPass, ConstraintPicksOnlyMatchingNodesAndNamesWhatBlocks) {
  const std::vector<NodeView> nodes = {Featured(IdleNode("a", 4), {"h100"}), Featured(IdleNode("b", 4), {"a100", "ib"}),
                                       Featured(IdleNode("c", 4), {"a100"})};
  JobRequest one = GpuJob(1, 1, 2);
  one.constraint = "a100&ib";
  JobRequest two = GpuJob(2, 2, 1);
  two.constraint = "a100&ib";
  const Decision d = Schedule(Snap(nodes, {one, two}));
  EXPECT_EQ(Where(d, 1), "b:0,1");  // pack would prefer a: same free GPUs, lower id
  EXPECT_EQ(Reason(d, 2), "needs 2 nodes with 1 free GPU; 1 available; --constraint 'a100&ib' matches 1 of 3 schedulable nodes");
}

TEST(ConstrainedPass, ExcludeAndNodelistSteerTheGang) {
  std::vector<NodeView> nodes = {IdleNode("n1", 2), IdleNode("n2", 2), IdleNode("n3", 2), IdleNode("n4", 2)};
  JobRequest ex = GpuJob(1, 2, 2);
  ex.exclude = "n[1-2]";
  Decision d = Schedule(Snap(nodes, {ex}));
  EXPECT_EQ(Where(d, 1), "n3:0,1 n4:0,1");

  JobRequest listed = GpuJob(2, 2, 2);
  listed.nodelist = "n4";  // n4 first (NODE_RANK 0), the other from the rest
  d = Schedule(Snap(nodes, {listed}));
  EXPECT_EQ(Where(d, 2), "n4:0,1 n1:0,1");

  nodes[3] = Unavailable(nodes[3], "draining");
  d = Schedule(Snap(nodes, {listed}));
  EXPECT_EQ(Reason(d, 2), "needs 2 nodes with 2 free GPUs; 3 available (1 node draining); --nodelist: n4 is draining");
}

TEST(ConstrainedPass, MemoryIsReservedAcrossTheJobsOfAPass) {
  const std::vector<NodeView> nodes = {Featured(IdleNode("a", 0, 64), {}, 100 * 1024)};
  JobRequest first = CpuJob(1, 1, 1, 1);
  first.mem_per_node_mb = 64 * 1024;
  JobRequest second = CpuJob(2, 1, 1, 1);
  second.mem_per_node_mb = 64 * 1024;
  JobRequest small = CpuJob(3, 1, 1, 1);
  small.mem_per_node_mb = 32 * 1024;
  JobRequest huge = CpuJob(4, 1, 1, 1);
  huge.mem_per_node_mb = 200 * 1024;
  const Decision d = Schedule(Snap(nodes, {first, second, small, huge}));
  EXPECT_EQ(Where(d, 1), "a:");
  EXPECT_EQ(Where(d, 3), "a:");  // 36G are left after job 1: 32G fit, after job 2 waits
  EXPECT_EQ(Reason(d, 2),
            "needs 1 node with 1 free CPU and 64G free memory; 0 available; --mem 64G: the nodes with the free "
            "GPUs and CPUs have 36G unreserved at most; reserved on a, start unknown (waiting on jobs without a "
            "time limit)");
  EXPECT_EQ(Reason(d, 4),
            "needs 1 node with 1 free CPU and 200G free memory; 0 available; --mem 200G: 0 of 1 eligible node has "
            "that much memory");
}

TEST(ConstrainedPass, UnconstrainedJobsIgnoreMemoryAndFeatures) {
  const std::vector<NodeView> nodes = {Featured(IdleNode("a", 2), {"x"}, 0)};
  const Decision d = Schedule(Snap(nodes, {GpuJob(1, 1, 2)}));
  EXPECT_EQ(Where(d, 1), "a:0,1");
}

std::vector<NodeCapacity> Cluster() {
  return {{"n1", 8, 64, {"a100", "ib"}, 256 * 1024}, {"n2", 8, 64, {"a100"}, 256 * 1024},
          {"n3", 4, 64, {"h100"}, 512 * 1024}};
}

std::string Infeasible(JobRequest job) {
  auto r = CheckConstraintsFeasible(Cluster(), job);
  return r ? std::string("(feasible)") : r.error().message;
}

TEST(ConstraintFeasibility, NamesTheConstraintThatCanNeverBeMet) {
  JobRequest j = GpuJob(1, 1, 4);
  j.nodelist = "n9";
  EXPECT_EQ(Infeasible(j), "--nodelist names n9, which is not in the cluster");
  j.nodelist = "";
  j.constraint = "v100";
  EXPECT_EQ(Infeasible(j), "--constraint 'v100' matches no node (features in the cluster: a100, h100, ib)");
  j = GpuJob(1, 2, 8);
  j.constraint = "a100&ib";
  EXPECT_EQ(Infeasible(j),
            "job needs 2 nodes with 8 GPUs and 1 CPU each, but --constraint 'a100&ib' leaves 1 node that has them");
  j = GpuJob(1, 1, 8);
  j.mem_per_node_mb = 300 * 1024;
  EXPECT_EQ(Infeasible(j), "--mem 300G per node on 1 node, but no eligible node has that much (the largest has 256G)");
  j.exclude = "n[1-2]";
  j.mem_per_node_mb = 0;
  EXPECT_EQ(Infeasible(j), "job needs 1 node with 8 GPUs and 1 CPU each, but --exclude leaves 0 nodes that have them");
  j = GpuJob(1, 1, 4);
  j.mem_per_node_mb = 300 * 1024;
  EXPECT_EQ(Infeasible(j), "(feasible)");  // n3 has 4 GPUs and 512G
}

}  // namespace
}  // namespace cohort::sched
