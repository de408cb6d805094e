// EASY backfill in detail: the reservation for a head job that needs devices in detail (a
// GPU type, MIG instances, parts of GPUs, connected GPUs, one switch: gpu_fit.h) or has node
// constraints (--nodelist/--exclude/--constraint/--mem: constraints.h), and the guard that
// keeps later jobs from delaying it. backfill.h does the same on counts for plain jobs.
//
// `PlanDetailedReservation` projects, node by node, the nodes the head job may use:
// schedulable, allowed by its --exclude and --constraint, not held for another job, with the
// CPUs and memory once empty. Each starts from what the pass has left free (its devices with
// their free shares and memory, its CPUs, its unreserved memory) and gets back, in end order,
// what each release gives: whole devices (a release without device indices gives untyped
// whole GPUs), slices, CPUs and --mem. The start T is the earliest time at which the gang
// fits: a member fits a node when FitMember (gpu_fit.h) accepts its devices (a plain
// constrained job: enough free whole GPUs) and the CPUs and memory suffice; the --nodelist
// nodes are all members; a gang over switch-labelled nodes takes one switch when one has
// enough hosts (the fewest that do), else, topology required, waits for one. When only jobs
// without a time limit would free enough, T is kNever and the gang is chosen on the full
// capacity of those nodes; nullopt when it does not fit even then.
//
// `DetailGuard` keeps each reserved node's projected state at T. A later job that ends by T
// may take anything. One that outlasts T is kept off (`BlockedNodes`, before it is fitted)
// the reserved nodes where the member it would get now (FitMember on the node's devices as
// the pass left them, the choice gang fits make node by node) would leave the head's member
// unable to fit at T, or where it cannot fit now at all; once fitted, `Breaks` checks the
// devices it was actually given the same way (the scheduler blocks the nodes it names and
// fits it again), and `Commit` records what it still holds at T. Pure values; not
// thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sched/constraints.h"
#include "sched/gang_fit.h"
#include "sched/node_pool.h"
#include "sched/snapshot.h"

namespace cohort::sched {

// What a job gives back on one node when it ends. `devices`/`slices` view the caller's
// storage, which must outlive the planning call.
struct DeviceRelease {
  int64_t end_ms = kNever;
  int node = 0;                       // index into the pool
  int gpus = 0;                       // whole GPUs; used when `devices` is empty
  std::span<const int> devices = {};  // whole devices by index
  std::span<const GpuSlice> slices = {};
  int64_t cpus = 0;
  int64_t memory_mb = 0;  // its --mem
};

// One node as the head job would find it.
struct NodeState {
  std::vector<GpuView> devices;  // sorted by index
  int64_t cpus = 0;
  int64_t memory_mb = 0;  // unreserved
};

struct DetailPlan {
  int64_t start_ms = kNever;   // kNever when unknown
  std::vector<int> nodes;      // pool indices: --nodelist nodes first, then placement order
  std::vector<NodeState> at_start;  // each reserved node at start_ms, before the head starts
};

// Whether one member of `job` (`demand` per node) fits `state`.
bool MemberFitsState(const NodeState& state, const JobRequest& job, const GangDemand& demand);

// The reservation for `job` (its gang `demand`), or nullopt when it cannot fit on the full
// capacity of the nodes it may use. `excluded`: nodes held for other jobs.
std::optional<DetailPlan> PlanDetailedReservation(const NodePool& pool, const ConstraintBook& constraints,
                                                  std::span<const NodeView> nodes,
                                                  std::span<const DeviceRelease> releases, const JobRequest& job,
                                                  const GangDemand& demand, std::span<const int> excluded,
                                                  int64_t now_ms);

class DetailGuard {
 public:
  DetailGuard(const JobRequest& head, const GangDemand& demand, DetailPlan plan, int64_t now_ms);

  int64_t head_job() const { return head_.id; }
  const DetailPlan& plan() const { return plan_; }

  // True if a job of `time_limit_ms` ends by the reserved start (it may take anything).
  bool EndsByStart(int64_t time_limit_ms) const;

  // Replaces `*blocked` with the reserved nodes that a member of `job` (`demand` per node)
  // must not take now: where it does not fit on `pool`, or where what it would take there
  // leaves the head's member unable to fit at the start.
  void BlockedNodes(const JobRequest& job, const GangDemand& demand, const NodePool& pool,
                    std::vector<int>* blocked) const;

  // Replaces `*broken` with the reserved nodes of `fit` (as the pool stands before the job
  // takes it) where the head's member would no longer fit at the start.
  void Breaks(const JobRequest& job, const GangDemand& demand, const GangFit& fit, std::vector<int>* broken) const;

  // Records that `job` started with `fit`, which Breaks accepted.
  void Commit(const JobRequest& job, const GangDemand& demand, const GangFit& fit);

 private:
  int Reserved(int node) const;  // index into plan_.nodes, -1 if not reserved
  // What the member of `job` on fit node `k` holds of `state`.
  static void Apply(NodeState& state, const JobRequest& job, const GangDemand& demand, const GangFit& fit, size_t k);

  JobRequest head_;
  GangDemand demand_;
  DetailPlan plan_;  // at_start shrinks as outlasting jobs backfill
  int64_t now_ms_;
};

}  // namespace cohort::sched
