// Views: what the head's read endpoints show beyond the stored records, shared by the
// head (which fills them) and the CLI (which reads them back from JSON).
//
// Each view has ToJson and a FromJson (views.cc) that checks the type and range of every
// field the view adds and names a bad one by its path ("nodes[2].gpus_allocated: must be
// an integer ..."); the stored record inside a view (Node, Job) is read by NodeFromJson /
// JobFromJson, its errors prefixed with the path. Fields a view does not know are ignored,
// so a CLI older than its head still reads the head's replies. The dashboard's and the
// usage report's views are in dashboard.h and usage.h. Plain values, copied freely
// between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/progress_eta.h"
#include "api/types.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

// A node as GET /v1/nodes shows it: the stored Node (with live GPU telemetry filled in)
// plus the head's runtime view of it.
// One sample of a node's GPU utilization history: the mean over its GPUs that reported one.
struct UtilSample {
  int64_t time_ms = 0;
  double utilization = 0;  // ratio 0..1
};

struct NodeStatus {
  Node node;
  std::string display_state;  // UP, DOWN, UNREACHABLE (silent, not yet DOWN: the head's
                              // unhealthy zone), DRAINING (drain set, jobs still on it), DRAINED
  int gpus_allocated = 0;
  int cpus_allocated = 0;
  std::vector<JobId> jobs;
  int64_t heartbeat_age_ms = -1;  // -1: never heard from
  int unhealthy_gpus = 0;         // node.gpus[i].healthy == false
  // Mean GPU utilization over the last minutes, oldest first (head/core/util_history.h);
  // on the wire as "gpu_util_history": [[time_ms, ratio], ...] only when not empty.
  std::vector<UtilSample> gpu_util_history;
};

// One running task's resource use, from its agent's latest heartbeat.
struct TaskUsage {
  int rank = 0;
  std::string node;
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
  std::vector<int> gpus;            // the task's GPUs on its node (indices)
  int64_t gpu_memory_bytes = 0;     // TaskReport's fields of the same names
  std::string gpu_memory_warning;
  std::string cpu_list;
};

// A job as GET /v1/jobs lists it: the stored Job plus its accounting.
struct JobStatus {
  Job job;
  double gpu_seconds = 0;  // GPU time of all its attempts so far
  // A RUNNING job's tasks (possibly none reported yet); absent for any other state.
  std::optional<std::vector<TaskUsage>> tasks_usage;
  // A RUNNING job that reports progress: percent, rate and ETA (api/progress_eta.h).
  std::optional<ProgressEta> progress_eta;
};

// The Node's fields, then "display_state", "gpus_allocated", "cpus_allocated", "jobs",
// "heartbeat_age_ms", "unhealthy_gpus" (all required).
json ToJson(const NodeStatus& s);
// `path` prefixes field names in errors ("nodes[2]"); empty for a whole reply.
Result<NodeStatus> NodeStatusFromJson(const json& j, const std::string& path = {});

// GET /v1/nodes's reply: {"nodes": [NodeStatus, ...]}.
json NodeListToJson(const std::vector<NodeStatus>& nodes);
Result<std::vector<NodeStatus>> NodeListFromJson(const json& j);

// {"rank", "node", "cpu_seconds", "rss_bytes", "gpus", "gpu_memory_bytes"}, and
// "gpu_memory_warning" and "cpu_list" when set (the last four optional when read).
json ToJson(const TaskUsage& t);
Result<TaskUsage> TaskUsageFromJson(const json& j, const std::string& path = {});

// The Job's fields, then "gpu_seconds" (required) and, when set, "tasks_usage" and
// "progress_eta".
json ToJson(const JobStatus& s);
Result<JobStatus> JobStatusFromJson(const json& j, const std::string& path = {});

}  // namespace cohort::api
