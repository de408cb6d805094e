// Feasibility: can a job ever run on this cluster, however long it waits?
//
// A job is feasible when at least `nodes` nodes each have, in full capacity, the job's
// per-node GPUs and CPUs; node state (down, draining) and current usage are ignored, so a
// feasible job may still wait. The head calls this at submit time to reject jobs that
// would otherwise pend forever. Pure function.
#pragma once

#include <vector>

#include "common/error.h"
#include "sched/snapshot.h"

namespace cohort::sched {

// Returns success if `job` fits on `capacity` once nothing else runs. Returns
// Unsatisfiable with a message naming the shortfall, e.g.
//   "job needs 3 nodes with 8 GPUs each but only 2 nodes in the cluster have 8 or more GPUs"
//   "job needs 1 node with 16 GPUs but the largest node has 8"
//   "job needs 4 CPUs per node (2 tasks x 2 CPUs) but the largest node has 2"
//   "no nodes have registered yet"                      (empty `capacity`)
// Returns InvalidArgument if the request itself is malformed (see DemandOf).
Result<void> CheckFeasible(const std::vector<NodeCapacity>& capacity, const JobRequest& job);

}  // namespace cohort::sched
