#include "agent/metrics.h"

#include <optional>

#include "common/prometheus.h"

namespace cohort::agent {

using prom::MetricType;

Result<std::string> RenderAgentMetrics(std::string_view node, const std::vector<GpuInfo>& gpus,
                                       const std::vector<GpuReading>& readings,
                                       const std::vector<TaskUsageSample>& tasks) {
  prom::TextWriter w;
  const std::string node_name(node);
  auto gpu_labels = [&](const GpuInfo& g) {
    return prom::Labels{{"node", node_name}, {"gpu", std::to_string(g.index)}, {"uuid", g.uuid}};
  };
  auto reading = [&](int index) -> const GpuReading* {
    for (const auto& r : readings) {
      if (r.index == index) return &r;
    }
    return nullptr;
  };
  w.Family("cohort_gpu_info", MetricType::kGauge, "GPUs of this node (always 1), with the model name");
  for (const auto& g : gpus) {
    auto l = gpu_labels(g);
    l.emplace_back("name", g.name);
    l.emplace_back("simulated", g.simulated ? "true" : "false");
    w.Sample(l, 1);
  }
  auto family = [&](const char* name, MetricType type, const char* help, auto get) {
    w.Family(name, type, help);
    for (const auto& g : gpus) {
      const GpuReading* r = reading(g.index);
      if (!r) continue;
      std::optional<double> v = get(*r);
      if (v) w.Sample(gpu_labels(g), *v);
    }
  };
  auto as_double = [](const std::optional<int64_t>& v) {
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
  };
  family("cohort_gpu_utilization_ratio", MetricType::kGauge, "Fraction of time a kernel ran on the GPU (0-1)",
         [](const GpuReading& r) { return r.utilization; });
  family("cohort_gpu_memory_used_bytes", MetricType::kGauge, "GPU memory in use",
         [&](const GpuReading& r) { return as_double(r.memory_used_bytes); });
  family("cohort_gpu_memory_total_bytes", MetricType::kGauge, "GPU memory in all",
         [&](const GpuReading& r) { return as_double(r.memory_total_bytes); });
  family("cohort_gpu_temperature_celsius", MetricType::kGauge, "GPU core temperature",
         [](const GpuReading& r) { return r.temperature_celsius; });
  family("cohort_gpu_power_watts", MetricType::kGauge, "GPU power draw",
         [](const GpuReading& r) { return r.power_watts; });
  family("cohort_gpu_sm_clock_hertz", MetricType::kGauge, "GPU streaming-multiprocessor clock",
         [](const GpuReading& r) { return r.sm_clock_hz; });
  family("cohort_gpu_health_events_total", MetricType::kCounter,
         "Health events (critical XIDs, uncorrectable ECC errors, lost GPU) since the agent started",
         [](const GpuReading& r) { return std::optional<double>(static_cast<double>(r.health_events)); });

  auto task_labels = [&](const TaskUsageSample& t) {
    return prom::Labels{{"node", node_name},
                        {"job", std::to_string(t.job)},
                        {"attempt", std::to_string(t.attempt)},
                        {"rank", std::to_string(t.rank)}};
  };
  w.Family("cohort_agent_tasks_running", MetricType::kGauge, "Tasks running on this node");
  w.Sample({{"node", node_name}}, static_cast<double>(tasks.size()));
  w.Family("cohort_task_cpu_seconds_total", MetricType::kCounter,
           "CPU time used by the task's processes (user + system, reaped children included)");
  for (const auto& t : tasks) w.Sample(task_labels(t), t.cpu_seconds);
  w.Family("cohort_task_resident_memory_bytes", MetricType::kGauge, "Resident memory of the task's processes");
  for (const auto& t : tasks) w.Sample(task_labels(t), static_cast<double>(t.rss_bytes));
  w.Family("cohort_task_gpus", MetricType::kGauge, "GPUs allocated to the task (a task sharing a GPU: its part, e.g. 0.5)");
  for (const auto& t : tasks) w.Sample(task_labels(t), t.gpus);
  w.Family("cohort_task_gpu_memory_bytes", MetricType::kGauge, "GPU memory of the task's processes, all GPUs");
  for (const auto& t : tasks) w.Sample(task_labels(t), static_cast<double>(t.gpu_memory_bytes));
  w.Family("cohort_task_gpu_memory_over_share", MetricType::kGauge,
           "1 once the task has used more GPU memory than its part of a shared GPU");
  for (const auto& t : tasks) w.Sample(task_labels(t), t.gpu_memory_over_share ? 1 : 0);
  return w.Finish();
}

}  // namespace cohort::agent
