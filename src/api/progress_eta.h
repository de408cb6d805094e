// ProgressEta: how far a running job is and when it should end, from the progress its
// tasks report at COHORT_REPORT (head/progress.h computes it; `cohort queue`, `show`, `top`
// and the dashboard show it).
//
// `percent` and `eta_s` need the job to report `total_steps`; `steps_per_s` needs two
// reports of one rank in the current attempt at different times. Plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

struct ProgressEta {
  int64_t step = 0;                   // the newest step of the current attempt
  std::optional<int64_t> total_steps;  // as the job last reported it
  std::optional<double> percent;       // 0..100: step / total_steps
  std::optional<double> steps_per_s;   // over the recent reports of one rank
  std::optional<int64_t> eta_s;        // seconds until total_steps at that rate
  int64_t updated_ms = 0;              // Unix ms of the newest report
};

// {"step", "updated_ms"} and each known field ("total_steps", "percent", "steps_per_s",
// "eta_s").
json ToJson(const ProgressEta& e);
Result<ProgressEta> ProgressEtaFromJson(const json& j, const std::string& path = {});

// One cell for tables: "45% 2.1/s ETA 3m12s", "step 120 2.1/s" (no total), "step 120"
// (no rate yet). Durations in the CLI's format (common/clock.h FormatDuration).
std::string FormatProgressEta(const ProgressEta& e);

}  // namespace cohort::api
