// Job limits in the head's core: how many jobs one user, and the whole cluster, may have
// open at once (Slurm's MaxSubmitJobsPerUser and MaxJobCount). Without them one token's
// script could submit at the rate limit for hours and grow the head's memory, its state
// store and every scheduling pass without bound.
//
// A job is open from the moment the head accepts it (before its commit: submissions in
// one commit round cannot overshoot together) until it ends; a failed commit gives its
// count back. An array is one record, and each element made from it counts too: elements
// are made only while their user has room (SettleArrays), so a large array at the limit
// waits, with that as its pending reason, instead of failing. ClusterState::open holds the
// counts; LoadState rebuilds them, FinishJob and DropNewJob (a failed commit) lower them.
// Pure functions on the state, single-threaded like the whole core.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"
#include "head/core/state.h"

namespace cohort::head::core {

// Adds `delta` (+1 or -1) to `user`'s open jobs and the cluster's.
void CountOpenJob(ClusterState& s, const std::string& user, int64_t delta);

// How many more jobs `user` may open now under both limits (>= 0; INT64_MAX without limits).
int64_t OpenJobRoom(const ClusterState& s, const JobLimits& limits, const std::string& user);

// Why `user` has no room for one more job, naming the user (or the cluster), the count,
// the limit and the head flag that sets it; "" when there is room.
std::string NoRoomReason(const ClusterState& s, const JobLimits& limits, const std::string& user);

// kResourceExhausted (HTTP 429) with NoRoomReason when `user` has no room for one more job.
Result<void> AdmitJob(const ClusterState& s, const JobLimits& limits, const std::string& user);

}  // namespace cohort::head::core
