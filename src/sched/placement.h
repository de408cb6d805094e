// Placement policies: which nodes a job prefers, and which GPUs it takes on a node.
//
// `kPack` is best fit: among the nodes that can host a gang member it prefers the one
// with the fewest free GPUs, then the fewest free CPUs, so that large holes stay whole for
// large jobs. `kSpread` balances load: it prefers the most free GPUs, then the most free
// CPUs. Both break the remaining ties by node id (string order), so choices are
// deterministic. Within a node, `kPack` takes a contiguous run of GPU indices when one
// exists (the shortest run that fits, keeping longer runs whole) and otherwise the lowest
// free indices; `kSpread` takes the lowest free indices. Pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sched/snapshot.h"

namespace cohort::sched {

// A node's free resources as the placement order sees them. `rank` is the position of
// the node's id in string order among all nodes of the snapshot.
struct NodeFree {
  int gpus = 0;
  int64_t cpus = 0;
  int rank = 0;
};

// True if `policy` prefers node `a` over node `b` (a strict weak order; total when ranks
// differ).
bool PlacesBefore(Placement policy, const NodeFree& a, const NodeFree& b);

// The `count` GPU indices a gang member takes from `free_gpus` (sorted ascending), sorted
// ascending. Requires 0 <= count <= free_gpus.size().
std::vector<int> ChooseGpus(std::span<const int> free_gpus, int count, Placement policy);

}  // namespace cohort::sched
