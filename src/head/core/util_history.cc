#include "head/core/util_history.h"

namespace cohort::head::core {

void NoteGpuUtilization(std::deque<api::UtilSample>& history,
                        const std::vector<std::optional<api::GpuTelemetry>>& telemetry, int64_t now_ms) {
  if (!history.empty() && now_ms - history.back().time_ms < kUtilSampleIntervalMs) return;
  double sum = 0;
  int known = 0;
  for (const auto& t : telemetry) {
    if (t && t->utilization) {
      sum += *t->utilization;
      ++known;
    }
  }
  if (known == 0) return;
  history.push_back({now_ms, sum / known});
  while (history.size() > kUtilHistorySamples) history.pop_front();
}

}  // namespace cohort::head::core
