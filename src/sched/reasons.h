// Pending reasons: the one-line texts that tell a person why a job has not started.
//
// Shapes (exact; tools and tests match on them):
//   "needs 2 nodes with 4 free GPUs; 1 available"
//   "needs 1 node with 4 free CPUs; 0 available"                (CPU-only)
//   "needs 2 nodes with 4 free GPUs and 8 free CPUs; 1 available"
//   "needs 3 nodes; 2 available"                                (no GPUs, no CPUs)
//   ... + " (2 nodes draining, 1 down)" when some nodes are not schedulable
//   "waiting for job 12 (higher priority; its resources are reserved)"
//   the head job's: "needs 2 nodes with 8 free GPUs; 1 available; reserved to start in 5m00s on n3, n4"
// "available" counts the schedulable nodes that could host one gang member now. A GPU
// job's CPUs appear only when they are what is short. Pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "sched/gang_fit.h"
#include "sched/snapshot.h"

namespace cohort::sched {

// " (2 nodes draining, 1 down)": the unschedulable nodes grouped by their `unavailable`
// text, largest group first (then by text); "" if every node is schedulable.
std::string UnavailableSuffix(std::span<const NodeView> nodes);

// "needs 2 nodes with 4 free GPUs; 1 available" followed by `unavailable_suffix`.
// `available` counts the nodes that could host one member; `available_for_gpus` those that
// have the GPUs, whatever their CPUs. CPUs are named only when they matter: for a job
// without GPUs, or when they keep some node that has the GPUs from qualifying
// (available < available_for_gpus).
std::string ResourceReason(const GangDemand& demand, int available, int available_for_gpus,
                           std::string_view unavailable_suffix);

// "waiting for job 12 (higher priority; its resources are reserved)".
std::string WaitingForReason(int64_t head_job);

// What the head job's reason gains: where and when it is reserved to start, the first
// kReservedNodesShown of its nodes named: "; reserved to start in 12m00s on n3, n4", or,
// when the start depends on jobs without a time limit, "; reserved on n3, n4, start unknown
// (waiting on jobs without a time limit)", or "; reserved on n3 to start once jobs past
// their time limit end"; more nodes end in " and 12 more".
inline constexpr size_t kReservedNodesShown = 4;
std::string ReservedSuffix(int64_t start_ms, int64_t now_ms, std::span<const std::string> nodes = {});

// "invalid request: nodes: must be at least 1, got 0".
std::string InvalidReason(std::string_view message);

}  // namespace cohort::sched
