// GPU telemetry and health from the agents' heartbeats.
//
// Each heartbeat carries, per GPU, the latest readings (kept in memory, shown by
// GET /v1/nodes) and a health-event counter. When the counter grows, the GPU is marked
// unhealthy with the event's text as the reason: the mark is stored with the node, the
// scheduler leaves the GPU out, and every job running on it fails its attempt (and is
// requeued while restarts remain). Only `cohort resume NODE` clears the mark; a new agent
// process on the node keeps it (matched by GPU UUID), and its counters start again at 0.
#include "common/log.h"
#include "head/cluster.h"

namespace cohort::head {

using api::Job;

void Cluster::ApplyGpuReportsLocked(api::Node& node, NodeRuntime& rt, const std::vector<api::GpuReport>& reports) {
  const size_t n = node.gpus.size();
  rt.telemetry.resize(n);
  rt.health_seen.resize(n, 0);
  const bool adopt = !rt.health_baseline;
  rt.health_baseline = true;
  const int64_t now = NowUnixMs();
  for (const auto& r : reports) {
    if (r.index < 0 || static_cast<size_t>(r.index) >= n) continue;
    const size_t i = static_cast<size_t>(r.index);
    rt.telemetry[i] = r.telemetry;
    rt.telemetry[i]->updated_ms = now;
    if (r.health_events > rt.health_seen[i] && !adopt) {
      gpu_health_events_ += static_cast<uint64_t>(r.health_events - rt.health_seen[i]);
      MarkGpuUnhealthyLocked(node, r.index, r.health_event.empty() ? "health event reported by the agent" : r.health_event);
    }
    rt.health_seen[i] = r.health_events;
  }
}

void Cluster::MarkGpuUnhealthyLocked(api::Node& node, int index, const std::string& reason) {
  api::Gpu& gpu = node.gpus.at(static_cast<size_t>(index));
  if (gpu.healthy) {
    gpu.healthy = false;
    gpu.health_reason = reason;
    MarkDirtyLocked(node);
    LOG_WARN("node {} GPU {} ({}) is unhealthy: {}; no new work is placed on it until `cohort resume {}`",
             node.name, index, gpu.uuid, reason, node.name);
  } else {
    LOG_WARN("node {} GPU {} (already unhealthy) reported another event: {}", node.name, index, reason);
  }
  if (auto nj = node_jobs_.find(node.name); nj != node_jobs_.end()) {
    std::vector<api::JobId> ids(nj->second.begin(), nj->second.end());
    for (api::JobId id : ids) {
      Job& job = jobs_.at(id);
      bool holds = false;
      for (const auto& na : job.allocation.nodes) {
        if (na.node != node.name) continue;
        for (int g : na.gpus) holds |= g == index;
      }
      if (!holds) continue;
      FailGangLocked(job, fmt::format("GPU {} on {} became unhealthy: {}", index, node.name, reason), std::nullopt,
                     /*may_restart=*/true);
    }
  }
  RequestScheduleLocked();
}

}  // namespace cohort::head
