// A node's GPU utilization history: the mean utilization of its GPUs, one sample every
// kUtilSampleIntervalMs at most, the newest kUtilHistorySamples kept (15 minutes), for the
// dashboard's per-node chart. Memory only, bounded per node; lost when the head restarts.
// Called from the core under the cluster's lock.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "api/types.h"
#include "api/views.h"

namespace cohort::head::core {

inline constexpr int64_t kUtilSampleIntervalMs = 10'000;
inline constexpr size_t kUtilHistorySamples = 90;

// Adds the mean of `telemetry`'s known utilizations at `now_ms` when the newest sample is
// kUtilSampleIntervalMs old or older (or there is none); drops the oldest beyond
// kUtilHistorySamples. Nothing when no GPU reported a utilization.
void NoteGpuUtilization(std::deque<api::UtilSample>& history,
                        const std::vector<std::optional<api::GpuTelemetry>>& telemetry, int64_t now_ms);

}  // namespace cohort::head::core
