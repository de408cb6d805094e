// The usage view: the reply of GET /v1/usage, GPU time per team, per user and per job
// over a window. The head computes it (src/head/usage.h, ComputeUsage); `cohort usage` decodes
// and renders it. FromJson checks what views.h says views check. Plain values.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "api/types.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

struct UsageWindow {
  int64_t since_ms = 0;                                    // inclusive, Unix ms
  int64_t until_ms = std::numeric_limits<int64_t>::max();  // exclusive; max: open (now)
};

struct JobUsage {
  JobId id = 0;
  std::string name;
  std::string user;
  std::string team;  // the team it counts against ("default" when its spec names none)
  JobState state = JobState::kPending;
  double gpus = 0;   // GPUs of the latest attempt in the window; a sharing job's parts (0.5)
  int attempts = 0;  // attempts that overlap the window
  double gpu_seconds = 0;
};

struct UserUsage {
  std::string user;
  double gpu_seconds = 0;
  int jobs = 0;
};

struct TeamUsage {
  std::string team;
  double gpu_seconds = 0;
  int jobs = 0;
};

struct UsageReport {
  UsageWindow window;
  int64_t now_ms = 0;
  double total_gpu_seconds = 0;
  std::vector<TeamUsage> teams;  // most GPU time first, then by name; they add up to the total
  std::vector<UserUsage> users;  // most GPU time first, then by name
  std::vector<JobUsage> jobs;    // jobs with an attempt in the window, by id
};

// {"since_ms", "until_ms" (null when open), "now_ms", "total_gpu_seconds", "total_gpu_hours",
//  "teams": [{"team", "gpu_seconds", "gpu_hours", "jobs"}],
//  "users": [{"user", "gpu_seconds", "gpu_hours", "jobs"}],
//  "jobs": [{"id", "name", "user", "team", "state", "gpus", "attempts", "gpu_seconds", "gpu_hours"}]}
// (FromJson takes a reply without "teams" and "team", from an older head, as empty.)
// The hours are the seconds / 3600, for readers; FromJson reads the seconds.
json ToJson(const UsageReport& r);
Result<UsageReport> UsageReportFromJson(const json& j);

}  // namespace cohort::api
