// Small builders for scheduler tests: nodes, running jobs and requests in one line each.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "sched/snapshot.h"

namespace cohort::sched::testing {

inline constexpr int64_t kNow = 1'000'000;

// A node with `total_gpus` GPUs of which `free_gpus` are free, and CPUs likewise.
inline NodeView Node(std::string id, int total_gpus, std::vector<int> free_gpus,
                     int total_cpus = 64, int free_cpus = 64, std::string unavailable = "") {
  return NodeView{std::move(id), std::move(unavailable),
                  total_gpus,    std::move(free_gpus),
                  total_cpus,    free_cpus,
                  {},            0,
                  0};
}

// Indices [0, n).
inline std::vector<int> Range(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// A node with every GPU and CPU free.
inline NodeView IdleNode(std::string id, int gpus, int cpus = 64) {
  return Node(std::move(id), gpus, Range(gpus), cpus, cpus);
}

inline NodeView Unavailable(NodeView node, std::string why) {
  node.unavailable = std::move(why);
  return node;
}

// A single-node GPU job: one task per job, 1 CPU per task.
inline JobRequest GpuJob(int64_t id, int nodes, int gpus_per_node,
                         Placement placement = Placement::kPack, int64_t time_limit_ms = 0) {
  JobRequest job;
  job.id = id;
  job.submit_ms = id;  // submit order follows ids unless a test says otherwise
  job.nodes = nodes;
  job.gpus_per_node = gpus_per_node;
  job.placement = placement;
  job.time_limit_ms = time_limit_ms;
  return job;
}

inline JobRequest CpuJob(int64_t id, int nodes, int tasks_per_node, int cpus_per_task) {
  JobRequest job = GpuJob(id, nodes, 0);
  job.tasks_per_node = tasks_per_node;
  job.cpus_per_task = cpus_per_task;
  return job;
}

inline RunningJob Running(int64_t id, int64_t end_ms, std::vector<Usage> usage) {
  RunningJob job;
  job.id = id;
  job.end_ms = end_ms;
  job.usage = std::move(usage);
  return job;
}

// The placement of `job_id` in `d`, or nullptr.
inline const JobPlacement* Find(const Decision& d, int64_t job_id) {
  for (const JobPlacement& p : d.start) {
    if (p.job_id == job_id) return &p;
  }
  return nullptr;
}

// "a:0,1 b:2" — nodes in rank order with their GPU indices; "" if not started.
inline std::string Where(const Decision& d, int64_t job_id) {
  const JobPlacement* p = Find(d, job_id);
  if (p == nullptr) return "";
  std::string out;
  for (const NodeAssignment& a : p->nodes) {
    if (!out.empty()) out += ' ';
    out += a.node + ':';
    for (size_t i = 0; i < a.gpus.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(a.gpus[i]);
    }
  }
  return out;
}

inline std::string Reason(const Decision& d, int64_t job_id) {
  const auto it = d.pending_reasons.find(job_id);
  return it == d.pending_reasons.end() ? "" : it->second;
}

}  // namespace cohort::sched::testing
