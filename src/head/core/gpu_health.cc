#include "head/core/gpu_health.h"

#include "head/core/lifecycle.h"
#include "head/core/util_history.h"

namespace cohort::head::core {

void ApplyGpuReports(Tx& tx, api::Node& node, NodeRuntime& rt, const std::vector<api::GpuReport>& reports) {
  const size_t n = node.gpus.size();
  rt.telemetry.resize(n);
  rt.health_seen.resize(n, 0);
  const bool adopt = !rt.health_baseline;
  rt.health_baseline = true;
  for (const auto& r : reports) {
    if (r.index < 0 || static_cast<size_t>(r.index) >= n) continue;
    const size_t i = static_cast<size_t>(r.index);
    rt.telemetry[i] = r.telemetry;
    rt.telemetry[i]->updated_ms = tx.now.unix_ms;
    if (r.health_events > rt.health_seen[i] && !adopt) {
      tx.s.counters.gpu_health_events += static_cast<uint64_t>(r.health_events - rt.health_seen[i]);
      MarkGpuUnhealthy(tx, node, r.index, r.health_event.empty() ? "health event reported by the agent" : r.health_event);
    }
    rt.health_seen[i] = r.health_events;
  }
  NoteGpuUtilization(rt.gpu_util, rt.telemetry, tx.now.unix_ms);
}

void MarkGpuUnhealthy(Tx& tx, api::Node& node, int index, const std::string& reason) {
  api::Gpu& gpu = node.gpus.at(static_cast<size_t>(index));
  if (gpu.healthy) {
    gpu.healthy = false;
    gpu.health_reason = reason;
    tx.fx.StoreNode(node);
    tx.fx.Warn("node {} GPU {} ({}) is unhealthy: {}; no new work is placed on it until `cohort resume {}`",
               node.name, index, gpu.uuid, reason, node.name);
  } else {
    tx.fx.Warn("node {} GPU {} (already unhealthy) reported another event: {}", node.name, index, reason);
  }
  if (auto nj = tx.s.node_jobs.find(node.name); nj != tx.s.node_jobs.end()) {
    std::vector<api::JobId> ids(nj->second.begin(), nj->second.end());
    for (api::JobId id : ids) {
      api::Job& job = tx.s.jobs.at(id);
      bool holds = false;
      for (const auto& na : job.allocation.nodes) {
        if (na.node != node.name) continue;
        for (int g : na.gpus) holds |= g == index;
      }
      if (!holds) continue;
      FailGang(tx, job, fmt::format("GPU {} on {} became unhealthy: {}", index, node.name, reason), std::nullopt,
               /*may_restart=*/true);
    }
  }
  tx.RequestSchedule();
}

}  // namespace cohort::head::core
