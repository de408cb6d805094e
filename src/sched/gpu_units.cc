#include "sched/gpu_units.h"

#include <fmt/format.h>

#include <algorithm>

#include "sched/gpu_fit.h"

namespace cohort::sched {

int ShareForMemory(int64_t memory_mib, int64_t device_mib) {
  if (device_mib <= 0 || memory_mib <= 0) return 0;
  const int64_t share = std::max<int64_t>(1, (memory_mib * kGpuShareUnits + device_mib - 1) / device_mib);
  return share > kGpuShareUnits ? 0 : static_cast<int>(share);
}

int64_t HeldUnits(const RunningJob& job) {
  int64_t units = 0;
  for (const Usage& u : job.usage) {
    units += UnitsOfGpus(u.gpus);
    for (const GpuSlice& sl : u.slices) units += sl.share;
  }
  return units;
}

int64_t PlacedUnits(const GangDemand& demand, const GangFit& fit) {
  int64_t units = 0;
  for (const std::vector<GpuSlice>& member : fit.slices) {
    for (const GpuSlice& sl : member) units += sl.share;
  }
  return units > 0 ? units : UnitsOfGpus(static_cast<int64_t>(fit.nodes.size()) * demand.gpus);
}

std::string FormatGpus(int64_t units) {
  if (units % kGpuShareUnits == 0) return fmt::format("{}", units / kGpuShareUnits);
  return fmt::format("{:g}", static_cast<double>(units) / kGpuShareUnits);
}

int64_t RequestUnits::PerNode(const JobRequest& job) const {
  if (job.nodes < 1 || job.gpus_per_node < 0 || job.gpu_share < 0 || job.gpu_memory_mib < 0) return 0;
  if (job.gpu_share == 0 && job.gpu_memory_mib == 0) return UnitsOfGpus(job.gpus_per_node);
  const int64_t tasks = std::max(job.tasks_per_node, 1);
  if (job.gpu_share > 0) return tasks * job.gpu_share;
  return tasks * std::max(1, ShareForMemory(job.gpu_memory_mib, LargestDevice(job.gpu_type)));
}

int64_t RequestUnits::Of(const JobRequest& job) const { return PerNode(job) * std::max(job.nodes, 0); }

int64_t RequestUnits::LargestDevice(const std::string& type) const {
  if (auto it = largest_.find(type); it != largest_.end()) return it->second;
  int64_t largest = 0;
  for (const NodeView& n : nodes_) {
    for (const GpuView& d : n.gpus) {
      if (DeviceMatches(d, type)) largest = std::max(largest, d.memory_mib);
    }
  }
  largest_.emplace(type, largest);
  return largest;
}

}  // namespace cohort::sched
