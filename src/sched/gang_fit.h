// Gang fit: place all members of one job at once, or none.
//
// A job asks for `nodes` distinct nodes, each with `gpus_per_node` free GPUs and
// `cpus_per_task × tasks_per_node` free CPUs. Gang fit either finds that many schedulable
// nodes in placement order (see placement.h) together with the GPU indices each member
// takes, or reports that the job does not fit now; it never returns a partial gang and
// never puts two members on one node. Because members are interchangeable, a job fits
// exactly when the number of nodes able to host one member reaches `nodes`, which is also
// the "available" figure in pending reasons. Pure functions over a NodePool.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/error.h"
#include "sched/node_pool.h"
#include "sched/snapshot.h"

namespace cohort::sched {

// What one job needs: `nodes` distinct nodes, each with `gpus` GPUs and `cpus` CPUs.
struct GangDemand {
  int nodes = 1;
  int gpus = 0;
  int64_t cpus = 0;

  bool operator==(const GangDemand&) const = default;

  // True if every component of this demand is at least that of `other`.
  bool Covers(const GangDemand& other) const {
    return nodes >= other.nodes && gpus >= other.gpus && cpus >= other.cpus;
  }
};

// The demand of `job`. Returns InvalidArgument (naming the field) if `nodes` or
// `tasks_per_node` is below 1, or `gpus_per_node` or `cpus_per_task` is negative.
Result<GangDemand> DemandOf(const JobRequest& job);

// A gang's place: node indices in node-rank order and, for each, the GPU indices taken.
struct GangFit {
  std::vector<int> nodes;
  std::vector<std::vector<int>> gpus;
  std::vector<std::vector<GpuSlice>> slices = {};  // a sharing job's (gpu_fit.h); else empty
};

// Places `demand` on the free resources of `pool` under `policy`, never on a node listed
// in `excluded`. Returns nullopt if fewer than `demand.nodes` nodes can host a member. The
// pool is not changed; the caller takes the resources.
std::optional<GangFit> FitGang(const NodePool& pool, const GangDemand& demand, Placement policy,
                               std::span<const int> excluded = {});

// Number of schedulable nodes that could host one member of `demand` now.
int CountHosts(const NodePool& pool, const GangDemand& demand);

}  // namespace cohort::sched
