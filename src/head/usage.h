// Usage accounting: GPU-hours per job and per user.
//
// A job's GPU time is the sum over its attempts of (GPUs the attempt held) x (its wall
// time): from the attempt's start to its end, or to now while it runs. Attempts are the
// job's stored history (api::AttemptRecord, which records its GPU count), so the figures
// survive head restarts. A window [since, until) counts only the part of each attempt
// inside it. Pure functions over plain values; any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "api/types.h"
#include "common/json.h"
#include "head/cluster.h"

namespace cohort::head {

struct UsageWindow {
  int64_t since_ms = 0;                                    // inclusive, Unix ms
  int64_t until_ms = std::numeric_limits<int64_t>::max();  // exclusive
};

// GPUs an attempt held: its record's count, or, for records stored before the count
// was kept, nodes x gpus_per_node of the job's spec.
int AttemptGpus(const api::Job& job, const api::AttemptRecord& attempt);

// The job's GPU-seconds inside `window`, counting a running attempt up to `now_ms`.
double JobGpuSeconds(const api::Job& job, int64_t now_ms, UsageWindow window = {});

struct JobUsage {
  api::JobId id = 0;
  std::string name;
  std::string user;
  api::JobState state = api::JobState::kPending;
  int gpus = 0;      // GPUs of the latest attempt in the window
  int attempts = 0;  // attempts that overlap the window
  double gpu_seconds = 0;
};

struct UserUsage {
  std::string user;
  double gpu_seconds = 0;
  int jobs = 0;
};

struct UsageReport {
  UsageWindow window;
  int64_t now_ms = 0;
  double total_gpu_seconds = 0;
  std::vector<UserUsage> users;  // most GPU time first, then by name
  std::vector<JobUsage> jobs;    // jobs with an attempt in the window, by id
};

// Usage of `jobs` (only `user`'s when not empty) in `window` as of `now_ms`.
UsageReport ComputeUsage(const std::vector<api::Job>& jobs, int64_t now_ms, UsageWindow window,
                         std::string_view user = {});

// {"since_ms", "until_ms" (null when open), "now_ms", "total_gpu_seconds", "total_gpu_hours",
//  "users": [{"user", "gpu_seconds", "gpu_hours", "jobs"}],
//  "jobs": [{"id", "name", "user", "state", "gpus", "attempts", "gpu_seconds", "gpu_hours"}]}
json ToJson(const UsageReport& r);

// Adds a job's accounting to its API JSON: "gpu_seconds" (so far), and for a RUNNING job
// "tasks_usage": [{"rank", "node", "cpu_seconds", "rss_bytes"}] from `tasks` (may be null).
void AddJobUsageJson(json& out, const api::Job& job, int64_t now_ms, const std::vector<TaskUsage>* tasks);

}  // namespace cohort::head
