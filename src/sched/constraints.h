// Node constraints: which nodes a job may use beyond free GPUs and CPUs, as Slurm's
// --nodelist, --exclude, --constraint and --mem say it.
//
// Syntax (checked at submit; every error names the flag and the offending text):
//   host list    "node[1-4,07],gpu-a": comma-separated names; a name may carry one
//                bracketed list of numbers and ranges, zero padding kept ("n[08-10]" is
//                n08, n09, n10); at most kMaxHostListNames names in all.
//   constraint   "a100&ib|h100": feature names ([A-Za-z0-9._:-]) joined by '&' (and) and
//                '|' (or), '&' binding tighter, with parentheses; a node matches when its
//                features (`cohort agent --features`) satisfy the expression.
//   memory       "64G", "1500M", "1T", "512" (MiB, Slurm's default unit), K/M/G/T suffixes
//                with an optional "B"/"iB"; stored as MiB.
// Semantics, per node of the gang:
//   nodelist     every named node is a member (Slurm: "the job will contain all of these
//                hosts"); a job with more nodes than names takes the others from the
//                remaining eligible nodes. Naming more nodes than the job has is an error.
//   exclude      none of these nodes.
//   constraint   the node's features match.
//   mem          the node has this many MiB not reserved by the jobs running there (its
//                memory, reported by the agent, less their --mem). A job without --mem
//                reserves none. The scheduler fits it; the task shim does not enforce it.
// A constrained job that waits first gets the EASY-backfill reservation, planned on the
// nodes it may use with its memory (detail_backfill.h); it may preempt jobs on nodes it
// may use (preempt.h, with the memory their --mem frees).
// Pure functions and one pass-local book; not thread-safe (one pass owns one book).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "sched/gang_fit.h"
#include "sched/node_pool.h"
#include "sched/snapshot.h"

namespace cohort::sched {

inline constexpr size_t kMaxHostListNames = 65'536;
inline constexpr int64_t kMaxMemoryMb = int64_t{1} << 40;  // 1 EiB in MiB

// Expands a host list; kInvalidArgument naming `flag` ("--nodelist: ...") on bad syntax.
// Duplicates are dropped, first occurrence kept.
Result<std::vector<std::string>> ExpandHostList(std::string_view text, std::string_view flag);

// Parses a memory size into MiB; kInvalidArgument naming `flag` otherwise. "0" is 0.
Result<int64_t> ParseMemoryMb(std::string_view text, std::string_view flag);

// "64G" when a whole number of GiB, else "1500M".
std::string FormatMemoryMb(int64_t mb);

// A parsed --constraint expression.
class FeatureExpr {
 public:
  // kInvalidArgument naming --constraint, e.g. "--constraint 'a100&': a feature name is
  // missing after '&' at offset 5".
  static Result<FeatureExpr> Parse(std::string_view text);

  bool Matches(std::span<const std::string> features) const;
  const std::string& text() const { return text_; }

 private:
  // Postfix program: feature indices (>= 0), kAnd, kOr.
  static constexpr int kAnd = -1;
  static constexpr int kOr = -2;
  std::string text_;
  std::vector<std::string> names_;
  std::vector<int> program_;
};

// True if the job asks for any of --nodelist, --exclude, --constraint or --mem.
bool IsConstrained(const JobRequest& job);

// Syntax of a request's constraints (the nodelist fits in `nodes`): kInvalidArgument
// naming the flag.
Result<void> CheckConstraintSyntax(const JobRequest& job);

// Can the job ever run, whatever else runs? Checked at submit for a constrained job
// after CheckFeasible. Unsatisfiable naming the constraint, e.g.
//   "--nodelist names node9, which is not in the cluster"
//   "--constraint 'a100&ib' matches no node (features in the cluster: a100, h100)"
//   "job needs 2 nodes with 4 GPUs each, but --constraint 'a100' leaves 1 node that has them"
//   "--mem 512G per node, but the largest eligible node has 256G"
Result<void> CheckConstraintsFeasible(std::span<const NodeCapacity> capacity, const JobRequest& job);

struct ConstraintFilter;  // a request's parsed constraints (constraints.cc)

// The constraint side of one scheduling pass: the nodes' features, names and unreserved
// memory, shrunk as the pass starts jobs.
class ConstraintBook {
 public:
  explicit ConstraintBook(std::span<const NodeView> nodes);

  // Places a constrained job's gang of `demand.nodes` on `pool` under `placement`, never
  // on a node in `blocked`: the --nodelist nodes first (in list order), then eligible
  // nodes in placement order. nullopt if it does not fit now (or the job's constraints
  // do not parse).
  std::optional<GangFit> Fit(const NodePool& pool, const JobRequest& job, const GangDemand& demand,
                             std::span<const int> blocked) const;

  // Reserves `mb` of memory on node `node` (an index into the snapshot's nodes).
  void Take(int node, int64_t mb);

  // Number of nodes that could host a member of the job now, ignoring --nodelist's
  // obligation (its nodes count like any other).
  int CountHosts(const NodePool& pool, const JobRequest& job, const GangDemand& demand) const;

  // Why the constrained job waits: ResourceReason's shape, memory named when asked for,
  // then the --nodelist nodes that cannot take a member now, or else how many schedulable
  // nodes --constraint/--exclude leave (whenever they leave out some) and what --mem
  // leaves when memory is what is short, e.g.
  //   "needs 2 nodes with 4 free GPUs; 1 available; --constraint 'a100' matches 1 of 6 nodes"
  //   "needs 1 node with 64G free memory; 0 available; --mem 64G: 2 eligible nodes have 16G free at most"
  //   "needs 2 nodes; 1 available; --nodelist: n3 is draining"
  std::string Reason(const NodePool& pool, const JobRequest& job, const GangDemand& demand,
                     std::string_view unavailable_suffix) const;

  // For preemption (preempt.h): which nodes a constrained job may use by name and
  // features (`allowed`, by node index), its --nodelist nodes (each must be a member) and
  // the unreserved memory each member needs. nullopt if its constraints do not parse or
  // name a node not in the snapshot.
  struct Rules {
    std::vector<bool> allowed;
    std::vector<int> listed;
    int64_t mem_mb = 0;
  };
  std::optional<Rules> RulesFor(const JobRequest& job) const;

  // MiB of `node`'s memory that no job of the snapshot or of this pass reserves.
  int64_t free_mb(int node) const { return free_mb_[static_cast<size_t>(node)]; }

 private:
  bool Eligible(const NodePool& pool, int node, const ConstraintFilter& f, const GangDemand& d) const;

  std::span<const NodeView> nodes_;
  std::vector<int64_t> free_mb_;
  std::unordered_map<std::string_view, int> index_;
};

}  // namespace cohort::sched
