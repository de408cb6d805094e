// The agent's /metrics: per-GPU telemetry and health, per-task resource use, in the
// Prometheus text format (common/prometheus.h). A pure function of the latest samples,
// which the heartbeat loop takes; a scrape never queries NVML or /proc itself.
//
// Series (labels: node, gpu, uuid for GPUs; node, job, attempt, rank for tasks):
//   cohort_gpu_utilization_ratio, cohort_gpu_memory_used_bytes, cohort_gpu_memory_total_bytes,
//   cohort_gpu_temperature_celsius, cohort_gpu_power_watts, cohort_gpu_sm_clock_hertz,
//   cohort_gpu_health_events_total, cohort_gpu_info (1, with the name), cohort_task_cpu_seconds_total,
//   cohort_task_resident_memory_bytes, cohort_task_gpus, cohort_task_gpu_memory_bytes,
//   cohort_task_gpu_memory_over_share (1 once over its part of a shared GPU),
//   cohort_agent_tasks_running.
// An unknown reading has no sample.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agent/gpu/gpu.h"
#include "common/error.h"

namespace cohort::agent {

struct TaskUsageSample {
  int64_t job = 0;
  int attempt = 0;
  int rank = 0;
  double gpus = 0;  // whole GPUs, or a sharing task's part of one (0.5)
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
  int64_t gpu_memory_bytes = 0;  // its processes on all GPUs (gpu/task_memory.h)
  bool gpu_memory_over_share = false;
};

Result<std::string> RenderAgentMetrics(std::string_view node, const std::vector<GpuInfo>& gpus,
                                       const std::vector<GpuReading>& readings,
                                       const std::vector<TaskUsageSample>& tasks);

}  // namespace cohort::agent
