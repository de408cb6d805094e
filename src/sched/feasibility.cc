#include "sched/feasibility.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "sched/gang_fit.h"

namespace cohort::sched {

namespace {

std::string Count(int64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// "1 node", "3 nodes with 8 GPUs each", "2 nodes with 8 GPUs and 16 CPUs each".
std::string Shape(const GangDemand& d, bool gpus, bool cpus) {
  std::string out = Count(d.nodes, "node", "nodes");
  if (gpus) out += " with " + Count(d.gpus, "GPU", "GPUs");
  if (cpus) out += (gpus ? " and " : " with ") + Count(d.cpus, "CPU", "CPUs");
  if ((gpus || cpus) && d.nodes > 1) out += " each";
  return out;
}

// "8 or more GPUs and 16 or more CPUs".
std::string AtLeast(const GangDemand& d, bool gpus, bool cpus) {
  std::string out;
  if (gpus) out += fmt::format("{} or more GPUs", d.gpus);
  if (gpus && cpus) out += " and ";
  if (cpus) out += fmt::format("{} or more CPUs", d.cpus);
  return out;
}

}  // namespace

Result<void> CheckFeasible(const std::vector<NodeCapacity>& capacity, const JobRequest& job) {
  GangDemand d = COHORT_TRY(DemandOf(job));
  // An elastic job is satisfiable when its smallest gang is.
  if (job.min_nodes > 0) d.nodes = std::min(d.nodes, job.min_nodes);
  if (capacity.empty()) return MakeError(ErrorCode::kUnsatisfiable, "no nodes have registered yet");

  const int64_t cluster = static_cast<int64_t>(capacity.size());
  if (d.nodes > cluster) {
    return Errorf(ErrorCode::kUnsatisfiable, "job needs {} but the cluster has {}",
                  Count(d.nodes, "node", "nodes"), cluster);
  }

  int max_gpus = 0;
  int max_cpus = 0;
  int gpu_hosts = 0;
  int cpu_hosts = 0;
  int hosts = 0;
  for (const NodeCapacity& node : capacity) {
    max_gpus = std::max(max_gpus, node.gpus);
    max_cpus = std::max(max_cpus, node.cpus);
    const bool gpus_ok = node.gpus >= d.gpus;
    const bool cpus_ok = node.cpus >= d.cpus;
    gpu_hosts += gpus_ok;
    cpu_hosts += cpus_ok;
    hosts += gpus_ok && cpus_ok;
  }
  if (hosts >= d.nodes) return {};

  if (d.gpus > max_gpus) {
    return Errorf(ErrorCode::kUnsatisfiable, "job needs {} but the largest node has {}",
                  Shape(d, true, false), max_gpus);
  }
  if (d.cpus > max_cpus) {
    const std::string split = job.tasks_per_node > 1
                                  ? fmt::format(" ({} tasks x {})", job.tasks_per_node,
                                                Count(job.cpus_per_task, "CPU", "CPUs"))
                                  : std::string();
    return Errorf(ErrorCode::kUnsatisfiable, "job needs {} per node{} but the largest node has {}",
                  Count(d.cpus, "CPU", "CPUs"), split, max_cpus);
  }
  // Enough nodes are large enough in each dimension alone, or not: name what is short.
  const bool gpus_short = gpu_hosts < d.nodes;
  const bool cpus_short = cpu_hosts < d.nodes;
  const bool gpus = d.gpus > 0 && (gpus_short || !cpus_short);
  const bool cpus = d.cpus > 0 && (cpus_short || !gpus_short);
  const int have = gpus && cpus ? hosts : (gpus ? gpu_hosts : cpu_hosts);
  const std::string who = have == 0   ? std::string("no node in the cluster has")
                          : have == 1 ? std::string("only 1 node in the cluster has")
                                      : fmt::format("only {} nodes in the cluster have", have);
  return Errorf(ErrorCode::kUnsatisfiable, "job needs {} but {} {}", Shape(d, gpus, cpus), who,
                AtLeast(d, gpus, cpus));
}

}  // namespace cohort::sched
