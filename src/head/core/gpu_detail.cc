#include "head/core/gpu_detail.h"

#include <algorithm>

#include "api/gpu_request.h"

namespace cohort::head::core {

static_assert(api::kGpuShareUnits == sched::kGpuShareUnits, "the API and the scheduler count shares alike");

bool AddSharedTasks(const api::NodeAllocation& na, SharedGpus& shared) {
  bool sharing = false;
  for (const api::TaskPlacement& t : na.tasks) {
    if (t.gpu_share <= 0 && t.gpu_memory_mib <= 0) continue;
    sharing = true;
    for (int g : t.gpus) {
      auto& [units, mib] = shared[g];
      units += t.gpu_share;
      mib += t.gpu_memory_mib;
    }
  }
  return sharing;
}

std::vector<sched::GpuView> DeviceViews(const api::Node& node, const std::vector<bool>& busy, const SharedGpus& shared) {
  std::vector<sched::GpuView> out;
  out.reserve(node.gpus.size());
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const api::Gpu& g = node.gpus[i];
    sched::GpuView v;
    v.index = g.index;
    v.mig = !g.mig_profile.empty();
    v.type = v.mig ? g.mig_profile : api::GpuShortName(g.name);
    v.healthy = g.healthy;
    v.memory_mib = g.memory_bytes >> 20;
    v.free_memory_mib = v.memory_mib;
    v.nvlink_island = g.nvlink_island;
    v.pcie_switch = g.pcie_switch;
    if (i < busy.size() && busy[i]) {
      v.free_share = 0;
      v.free_memory_mib = 0;
    } else if (auto it = shared.find(g.index); it != shared.end()) {
      v.free_share = std::max(0, sched::kGpuShareUnits - it->second.first);
      v.free_memory_mib = std::max<int64_t>(0, v.memory_mib - it->second.second);
    }
    out.push_back(std::move(v));
  }
  return out;
}

void AddGpuRequest(const api::JobSpec& spec, sched::JobRequest& r) {
  r.gpu_type = spec.gpu_type;
  r.gpu_share = spec.gpu_share;
  r.gpu_memory_mib = spec.gpu_memory_mib;
  r.topology_required = spec.topology == api::Topology::kRequired;
}

void AddMigDevices(const api::Node& node, api::TaskPlacement& task) {
  const auto gpu = [&](int index) -> const api::Gpu* {
    return index >= 0 && static_cast<size_t>(index) < node.gpus.size() ? &node.gpus[static_cast<size_t>(index)]
                                                                         : nullptr;
  };
  // On a node with MIG instances, device indices are not NVML's GPU indices: name every
  // device by uuid.
  const bool mig = std::any_of(node.gpus.begin(), node.gpus.end(), [](const api::Gpu& d) { return !d.mig_profile.empty(); });
  if (!mig) return;
  task.devices.clear();
  for (int g : task.gpus) task.devices.push_back(gpu(g) ? gpu(g)->uuid : std::to_string(g));
}

std::string NetworkSwitch(const api::Node& node) {
  auto sw = node.labels.find("switch");
  return sw != node.labels.end() ? sw->second : std::string();
}

std::vector<sched::GpuView> CapacityViews(const api::Node& node) {
  std::vector<sched::GpuView> out = DeviceViews(node, {}, {});
  for (sched::GpuView& v : out) v.healthy = true;  // `cohort resume` returns an unhealthy GPU
  return out;
}

}  // namespace cohort::head::core
