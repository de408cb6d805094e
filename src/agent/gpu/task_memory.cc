#include "agent/gpu/task_memory.h"

#include <charconv>

#include <fmt/format.h>

namespace cohort::agent {

Result<GpuMemoryLimit> GpuMemoryLimitFromEnv(const std::map<std::string, std::string>& env) {
  GpuMemoryLimit limit;
  auto mib = env.find("COHORT_GPU_MEMORY_MIB");
  if (mib == env.end()) return limit;
  const std::string& text = mib->second;
  int64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p != text.data() + text.size() || n < 0 || n >= (int64_t{1} << 40)) {
    return FieldError("COHORT_GPU_MEMORY_MIB", "must be a count of MiB (0 to 2^40), got '{}'", text);
  }
  limit.share_bytes = n << 20;
  auto enforce = env.find("COHORT_GPU_MEMORY_ENFORCE");
  const std::string mode = enforce == env.end() ? "report" : enforce->second;
  if (mode != "report" && mode != "kill") {
    return FieldError("COHORT_GPU_MEMORY_ENFORCE", "must be 'report' or 'kill', got '{}'", mode);
  }
  limit.kill = mode == "kill";
  return limit;
}

std::string FormatGib(int64_t bytes) {
  if (bytes % (int64_t{1} << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / double(int64_t{1} << 30));
}

TaskGpuMemory MeasureTaskGpuMemory(int rank, int task, const std::vector<int>& gpus, const GpuMemoryLimit& limit,
                                   const std::vector<GpuProcess>& processes, const std::map<int, int>& task_of) {
  TaskGpuMemory m;
  for (const GpuProcess& p : processes) {
    auto t = task_of.find(p.pid);
    if (t == task_of.end() || t->second != task || p.memory_bytes <= 0) continue;
    m.bytes += p.memory_bytes;
    m.by_gpu[p.gpu] += p.memory_bytes;
  }
  if (limit.share_bytes <= 0) return m;
  for (int g : gpus) {
    auto used = m.by_gpu.find(g);
    if (used == m.by_gpu.end() || used->second <= limit.share_bytes) continue;
    m.over = fmt::format("task {} used {} of GPU {}, over its share of {} (gpu_memory_enforce: {})", rank,
                         FormatGib(used->second), g, FormatGib(limit.share_bytes), limit.kill ? "kill" : "report");
    break;
  }
  return m;
}

}  // namespace cohort::agent
