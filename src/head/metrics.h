// The head's /metrics in the Prometheus text format: the cluster as a whole.
//
// Series:
//   cohort_nodes{state}                          nodes by display state (up, down, unreachable,
//                                                draining, drained)
//   cohort_node_up{node}                         1 while the node's agent heartbeats
//   cohort_node_heartbeat_age_seconds{node}      time since the node's last heartbeat
//   cohort_node_gpus_unhealthy{node}             the node's GPUs marked unhealthy (which node
//                                                to look at; the agent's counters reset with it)
//   cohort_gpus{state}                           GPUs: allocated, free, unhealthy, unavailable
//                                                (on down or draining nodes)
//   cohort_jobs{state}                           jobs the head knows, by state
//   cohort_jobs_pending{reason}                  the queue by pending reason: resources,
//                                                priority, invalid, scheduler (not yet seen)
//   cohort_job_state_transitions_total{from,to}  job state changes since the head started
//   cohort_scheduler_pass_duration_seconds       histogram of scheduling passes
//   cohort_job_queue_wait_seconds                histogram: submit (or requeue) to start
//   cohort_head_heartbeats_total, cohort_head_gpu_health_events_total
//   cohort_liveness_suspended                    1 while the unhealthy zone holds off DOWN
//                                                (core/liveness.h)
//   cohort_liveness_silent_ratio                 silent fraction of the UP nodes
//   cohort_head_unheard_seconds_total            the head's own gaps, not counted against nodes
//   cohort_head_control_loop_lateness_seconds    histogram: how late the control loop woke
//   cohort_head_store_commit_duration_seconds    histogram: state store writes
//   cohort_http_*                                the HTTP server's connections, pools and
//                                                refusals (common/http_server.h), when given
//   cohort_http_rate_limited_total               API requests refused by the per-caller rate
//                                                limit (rate_limit.h), when given
//   cohort_audit_written_total                   audit log rows stored (audit.h), when given
//   cohort_audit_dropped_total{reason}           rows lost: queue_full (the writer was behind),
//                                                write_failed (the store refused a batch)
#pragma once

#include <string>

#include "common/error.h"
#include "head/cluster.h"

namespace cohort {
struct HttpServerStats;
}

namespace cohort::head {

// Counters of the head's HTTP edge: the Router's and the audit log's.
struct EdgeStats {
  uint64_t rate_limited = 0;
  uint64_t audit_written = 0;
  uint64_t audit_dropped_queue_full = 0;
  uint64_t audit_dropped_write_failed = 0;
};

Result<std::string> RenderHeadMetrics(const ClusterMetrics& m, const HttpServerStats* http = nullptr,
                                      const EdgeStats* edge = nullptr);

}  // namespace cohort::head
