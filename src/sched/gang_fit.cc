#include "sched/gang_fit.h"

#include <algorithm>

#include "sched/gpu_fit.h"

namespace cohort::sched {

Result<GangDemand> DemandOf(const JobRequest& job) {
  if (job.nodes < 1) return FieldError("nodes", "must be at least 1, got {}", job.nodes);
  if (job.tasks_per_node < 1) {
    return FieldError("tasks_per_node", "must be at least 1, got {}", job.tasks_per_node);
  }
  if (job.gpus_per_node < 0) {
    return FieldError("gpus_per_node", "must not be negative, got {}", job.gpus_per_node);
  }
  if (job.cpus_per_task < 0) {
    return FieldError("cpus_per_task", "must not be negative, got {}", job.cpus_per_task);
  }
  return GangDemand{job.nodes, job.gpus_per_node,
                    static_cast<int64_t>(job.cpus_per_task) * job.tasks_per_node};
}

std::optional<GangFit> FitGang(const NodePool& pool, const GangDemand& demand, Placement policy,
                               std::span<const int> excluded) {
  if (demand.nodes < 1) return std::nullopt;
  int hosts = pool.CountHosts(demand.gpus, demand.cpus);
  for (int node : excluded) {
    if (pool.CanHost(node, demand.gpus, demand.cpus)) --hosts;
  }
  if (hosts < demand.nodes) return std::nullopt;

  GangFit fit;
  fit.nodes.reserve(demand.nodes);
  pool.VisitHosts(demand.gpus, demand.cpus, policy, [&](int node) {
    if (std::find(excluded.begin(), excluded.end(), node) == excluded.end()) {
      fit.nodes.push_back(node);
    }
    return static_cast<int>(fit.nodes.size()) < demand.nodes;
  });
  fit.gpus.reserve(fit.nodes.size());
  for (int node : fit.nodes) {
    fit.gpus.push_back(ChooseFreeGpus(pool, node, demand.gpus, policy));
  }
  return fit;
}

int CountHosts(const NodePool& pool, const GangDemand& demand) {
  return pool.CountHosts(demand.gpus, demand.cpus);
}

}  // namespace cohort::sched
