#include "api/progress_eta.h"

#include <fmt/format.h>

#include <cmath>

#include "api/view_reader.h"
#include "common/clock.h"

namespace cohort::api {

namespace vr = view_reader;

json ToJson(const ProgressEta& e) {
  json j = {{"step", e.step}, {"updated_ms", e.updated_ms}};
  if (e.total_steps) j["total_steps"] = *e.total_steps;
  if (e.percent) j["percent"] = *e.percent;
  if (e.steps_per_s) j["steps_per_s"] = *e.steps_per_s;
  if (e.eta_s) j["eta_s"] = *e.eta_s;
  return j;
}

Result<ProgressEta> ProgressEtaFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  ProgressEta e;
  e.step = COHORT_TRY(r.Int("step", std::nullopt, 0, INT64_MAX));
  e.updated_ms = COHORT_TRY(r.Int("updated_ms", std::nullopt, 0, INT64_MAX));
  e.total_steps = COHORT_TRY(vr::OptionalInt(r, "total_steps", 1, INT64_MAX));
  e.percent = COHORT_TRY(vr::OptionalDouble(r, "percent", 0, 100));
  e.steps_per_s = COHORT_TRY(vr::OptionalDouble(r, "steps_per_s", 0, 1e300));
  e.eta_s = COHORT_TRY(vr::OptionalInt(r, "eta_s", 0, INT64_MAX));
  return e;
}

std::string FormatProgressEta(const ProgressEta& e) {
  std::string out = e.percent ? fmt::format("{:.0f}%", std::floor(*e.percent)) : fmt::format("step {}", e.step);
  if (e.steps_per_s) {
    const double r = *e.steps_per_s;
    out += r >= 10 ? fmt::format(" {:.0f}/s", r) : r >= 0.1 ? fmt::format(" {:.1f}/s", r) : fmt::format(" {:.3f}/s", r);
  }
  if (e.eta_s) out += " ETA " + FormatDuration(*e.eta_s * 1000);
  return out;
}

}  // namespace cohort::api
