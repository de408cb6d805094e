// Read-only questions to the head's core: what the API, /metrics and the dashboard show.
//
// Pure functions of a ClusterState (and the time, for heartbeat ages); the shell calls
// them under its lock and returns copies.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "api/types.h"
#include "api/views.h"
#include "common/error.h"
#include "common/prometheus.h"
#include "head/core/state.h"

namespace cohort::head::core {

struct JobFilter {
  std::set<api::JobState> states;  // empty: all
  std::string user;                // empty: all
  size_t limit = 0;                // 0: no limit; the newest jobs are kept
  api::JobId before = 0;           // > 0: only jobs with a smaller id (the next page's cursor)
  // A time window (Unix ms; 0: open), as sacct's -S/-E: only jobs in the cluster during
  // it, submitted before `until` and not ended before `since`.
  int64_t since_ms = 0;
  int64_t until_ms = 0;
  bool services_only = false;      // only service replicas (JobSpec::service set)
  // Only these jobs and, for an array, its elements (squeue/sacct -j); empty: all.
  std::set<api::JobId> ids = {};
};

// Where the log of one task lives.
struct LogLocation {
  std::string agent_url;
  std::string node;
  bool node_down = false;
  bool task_finished = false;  // the head has the task's exit, or the job has ended
};

// What the head's /metrics shows, taken in one pass.
struct ClusterMetrics {
  struct NodeLine {
    std::string name;
    std::string display_state;  // UP, DOWN, UNREACHABLE, DRAINING, DRAINED
    int gpus = 0;
    int gpus_allocated = 0;
    int gpus_unhealthy = 0;
    double heartbeat_age_s = -1;
  };
  std::vector<NodeLine> nodes;
  std::map<std::string, int> jobs_by_state;          // "pending", "running", ... (all known jobs)
  std::map<std::string, int> pending_by_reason;      // resources, priority, invalid, stopping, scheduler
  std::map<std::pair<std::string, std::string>, uint64_t> transitions;  // (from, to) → count
  uint64_t heartbeats = 0;
  uint64_t gpu_health_events = 0;
  // Liveness (liveness.h), as of the last check.
  bool liveness_suspended = false;  // the unhealthy zone holds off marking nodes DOWN
  double silent_ratio = 0;          // UP nodes silent for half the failure timeout, of all UP
  double unheard_seconds = 0;       // the head's own gaps, credited to every node
  prom::HistogramSnapshot pass_seconds;                   // filled by the shell
  prom::HistogramSnapshot queue_wait_seconds;             // filled by the shell
  prom::HistogramSnapshot control_loop_lateness_seconds;  // filled by the shell
  prom::HistogramSnapshot store_commit_seconds;           // filled by the shell
};

// The node as GET /v1/nodes shows it: allocation, jobs, display state (UNREACHABLE: silent
// past the failure timeout but not DOWN, liveness.h), heartbeat age,
// live GPU telemetry and the count of unhealthy GPUs. gpus_allocated counts the devices
// some job holds all or part of: a GPU shared by fractional tasks counts once.
api::NodeStatus StatusOf(const ClusterState& s, const api::Node& node, Now now);

// A job with its current pending reason (from the last pass); kNotFound for an unknown id.
Result<api::Job> GetJob(const ClusterState& s, api::JobId id);

// Jobs matching `filter`, oldest first (the newest `limit` when limited).
std::vector<api::Job> ListJobs(const ClusterState& s, const JobFilter& filter);

// The reason a job shows: for a PENDING job the last pass's pending reason, if any.
const std::string& ShownReason(const ClusterState& s, const api::Job& job);

// Calls f(job) for each job ListJobs returns, without copying, newest first (the shown
// reason is ShownReason's).
void VisitJobs(const ClusterState& s, const JobFilter& filter, const std::function<void(const api::Job&)>& f);

// Where the log of `rank` of `attempt` of a job lives. kNotFound for an unknown job or an
// attempt that never started; kInvalidArgument (field "rank") for a rank the job lacks.
Result<LogLocation> LocateLog(const ClusterState& s, api::JobId id, int attempt, int rank);

// Everything /metrics needs from the state (the histograms are the shell's).
ClusterMetrics Metrics(const ClusterState& s, Now now);

// Resource use of every task of the current attempts, by job, ranks in order.
std::map<api::JobId, std::vector<api::TaskUsage>> RunningTaskUsage(const ClusterState& s);

}  // namespace cohort::head::core
