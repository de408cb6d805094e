// Conversions between the head's records and the pure scheduler's input types.
#pragma once

#include "api/types.h"
#include "sched/scheduler.h"

namespace cohort::head {

inline sched::JobRequest ToRequest(const api::Job& job) {
  sched::JobRequest r;
  r.id = job.id;
  r.priority = job.spec.priority;
  r.submit_ms = job.submit_ms;
  r.nodes = job.spec.nodes;
  r.min_nodes = job.spec.min_nodes;
  r.tasks_per_node = job.spec.tasks_per_node;
  r.gpus_per_node = job.spec.gpus_per_node;
  r.cpus_per_task = job.spec.cpus_per_task;
  r.placement = job.spec.placement == api::Placement::kPack ? sched::Placement::kPack
                                                            : sched::Placement::kSpread;
  r.time_limit_ms = job.spec.time_limit_s * 1000;
  return r;
}

}  // namespace cohort::head
