// EASY backfill: one reservation for the first blocked job, and the rule that keeps later
// jobs from delaying it.
//
// `PlanReservation` projects the cluster forward: starting from the free resources now,
// it adds back what each job releases when it ends (`Release`, in end order) and stops at
// the earliest time T at which the blocked job (the head job) fits, choosing its nodes
// there with the job's own placement policy. Projection works on counts (GPUs, CPUs per
// node), not GPU indices. If the head job fits only once jobs without a time limit end, T
// is kNever and the nodes are chosen on full capacity.
//
// `BackfillGuard` then answers, for each later job, which reserved nodes it must not use
// now: none if the job ends by T; otherwise each reserved node whose projected resources
// at T, less this job's use and that of earlier backfilled jobs that outlast T, would no
// longer cover the head job's per-node demand. Nodes outside the reservation are free
// for anyone. A sharing job's demand counts no whole GPUs, but each GPU it takes a slice of
// that is whole now is not whole at T: `BlockedNodes` counts those of the member it would
// get on each reserved node now (FitMember, gpu_fit.h), `Breaks` checks the slices it was
// given once it is fitted, and `Commit` counts them. Pure values; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sched/gang_fit.h"
#include "sched/node_pool.h"
#include "sched/placement.h"
#include "sched/snapshot.h"

namespace cohort::sched {

// What a job gives back on one node when it ends. `end_ms` is kNever if unknown.
struct Release {
  int64_t end_ms = kNever;
  int node = 0;  // index into the pool
  int gpus = 0;
  int64_t cpus = 0;
};

// When a job with `time_limit_ms` (0 = unlimited) started at `now_ms` ends.
int64_t EndOf(int64_t now_ms, int64_t time_limit_ms);

struct ReservationPlan {
  int64_t start_ms = kNever;  // earliest projected start; kNever when unknown
  std::vector<int> nodes;     // pool indices, in node-rank order
  // Projected free GPUs/CPUs on each reserved node at `start_ms`, before the head starts.
  std::vector<NodeFree> free_at_start;
};

// The earliest time at or after `now_ms` at which `head` fits on `pool`'s schedulable
// nodes once `releases` (ends before now count as now) have returned their resources.
// Returns nullopt if it does not fit even on the full capacity of the schedulable nodes.
std::optional<ReservationPlan> PlanReservation(const NodePool& pool,
                                               std::span<const Release> releases,
                                               const GangDemand& head, Placement policy,
                                               int64_t now_ms);

class BackfillGuard {
 public:
  BackfillGuard(int64_t head_job, const GangDemand& head, ReservationPlan plan, int64_t now_ms);

  int64_t head_job() const { return head_job_; }
  const ReservationPlan& plan() const { return plan_; }

  // True if a job of `time_limit_ms` ends by the reserved start (it may take anything).
  bool EndsByStart(int64_t time_limit_ms) const;

  // Replaces `*blocked` with the reserved nodes that `job` (`demand` per node) must not
  // use now because the head job would start later; a sharing job's are worked out on
  // `pool` as it stands.
  void BlockedNodes(const JobRequest& job, const GangDemand& demand, const NodePool& pool,
                    std::vector<int>* blocked) const;

  // Replaces `*broken` with the reserved nodes of `fit` (on `pool` before the job takes
  // it) where what the job takes, its slices' GPUs that are whole now included, would
  // leave the head job too few whole GPUs or CPUs at the start.
  void Breaks(const GangDemand& demand, int64_t time_limit_ms, const GangFit& fit, const NodePool& pool,
              std::vector<int>* broken) const;

  // Records that a job of `demand` and `time_limit_ms` started with `fit` (on `pool`
  // before it takes it; no blocked or broken nodes), so that later jobs see what is left
  // at the reserved start.
  void Commit(const GangDemand& demand, int64_t time_limit_ms, const GangFit& fit, const NodePool& pool);

 private:
  int Reserved(int node) const;  // index into plan_.nodes, -1 if not reserved

  int64_t head_job_;
  GangDemand head_;
  ReservationPlan plan_;  // free_at_start shrinks as outlasting jobs backfill
  int64_t now_ms_;
};

}  // namespace cohort::sched
