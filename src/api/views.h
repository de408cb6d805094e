// Views: what the head's read endpoints show beyond the stored records, shared by the
// head (which fills them) and the CLI (which reads them back from JSON).
//
// Plain values, copied freely between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/types.h"

namespace cohort::api {

// A node as GET /v1/nodes shows it: the stored Node (with live GPU telemetry filled in)
// plus the head's runtime view of it.
struct NodeStatus {
  Node node;
  std::string display_state;  // UP, DOWN, DRAINING (drain set, jobs still on it), DRAINED
  int gpus_allocated = 0;
  int cpus_allocated = 0;
  std::vector<JobId> jobs;
  int64_t heartbeat_age_ms = -1;  // -1: never heard from
  int unhealthy_gpus = 0;         // node.gpus[i].healthy == false
};

// One running task's resource use, from its agent's latest heartbeat.
struct TaskUsage {
  int rank = 0;
  std::string node;
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
};

}  // namespace cohort::api
