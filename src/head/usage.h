// Usage accounting: GPU-hours per job and per user (the values are api/usage.h's, the
// reply of GET /v1/usage).
//
// A job's GPU time is the sum over its attempts of (GPUs the attempt held) x (its wall
// time): from the attempt's start to its end, or to now while it runs. Attempts are the
// job's stored history (api::AttemptRecord, which records its GPU count), so the figures
// survive head restarts. A window [since, until) counts only the part of each attempt
// inside it. Pure functions over plain values; any thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "api/types.h"
#include "api/usage.h"
#include "api/views.h"

namespace cohort::head {

using api::JobUsage;
using api::UsageReport;
using api::UsageWindow;
using api::UserUsage;

// GPUs an attempt held: its record's count, or, for records stored before the count
// was kept, nodes x gpus_per_node of the job's spec.
int AttemptGpus(const api::Job& job, const api::AttemptRecord& attempt);

// The job's GPU-seconds inside `window`, counting a running attempt up to `now_ms`.
double JobGpuSeconds(const api::Job& job, int64_t now_ms, UsageWindow window = {});

// Usage of `jobs` (only `user`'s when not empty) in `window` as of `now_ms`.
UsageReport ComputeUsage(const std::vector<api::Job>& jobs, int64_t now_ms, UsageWindow window,
                         std::string_view user = {});

// A job with its accounting, as GET /v1/jobs shows it: its GPU-seconds so far and, for a
// RUNNING job, its tasks' resource use from `tasks` (may be null: none reported yet).
api::JobStatus JobStatusAt(const api::Job& job, int64_t now_ms, const std::vector<api::TaskUsage>* tasks);

}  // namespace cohort::head
