// GET /metrics: the head's Prometheus endpoint (metrics.h).
#include "head/metrics.h"

#include <cctype>

#include "common/http_server.h"
#include "head/audit.h"
#include "head/gateway.h"
#include "head/routes.h"

namespace cohort::head {

using prom::MetricType;

namespace {

// The head's own lag and the unhealthy zone (core/liveness.h).
void RenderLiveness(prom::TextWriter& w, const ClusterMetrics& m) {
  w.Family("cohort_liveness_suspended", MetricType::kGauge,
           "1 while so many nodes are silent at once (the unhealthy zone) that none is marked DOWN");
  w.Sample({}, m.liveness_suspended ? 1 : 0);
  w.Family("cohort_liveness_silent_ratio", MetricType::kGauge,
           "Fraction of the UP nodes silent for more than half the failure timeout, at the last liveness check");
  w.Sample({}, m.silent_ratio);
  w.Family("cohort_head_unheard_seconds_total", MetricType::kCounter,
           "Time the head itself did not listen (stopped or stalled), not counted against any node");
  w.Sample({}, m.unheard_seconds);
  w.Family("cohort_head_control_loop_lateness_seconds", MetricType::kHistogram,
           "How much later than planned the head's control loop woke");
  w.Histogram({}, m.control_loop_lateness_seconds);
  w.Family("cohort_head_store_commit_duration_seconds", MetricType::kHistogram,
           "Duration of the head's writes of changed records to its state store");
  w.Histogram({}, m.store_commit_seconds);
}

}  // namespace

Result<std::string> RenderHeadMetrics(const ClusterMetrics& m, const HttpServerStats* http, const EdgeStats* edge) {
  prom::TextWriter w;
  std::map<std::string, int> by_state = {
      {"up", 0}, {"down", 0}, {"unreachable", 0}, {"draining", 0}, {"drained", 0}};
  int allocated = 0, unhealthy = 0, free = 0, unavailable = 0;
  for (const auto& n : m.nodes) {
    std::string st = n.display_state;
    for (char& c : st) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    by_state[st] += 1;
    allocated += n.gpus_allocated;
    unhealthy += n.gpus_unhealthy;
    int rest = std::max(0, n.gpus - n.gpus_allocated - n.gpus_unhealthy);
    (n.display_state == "UP" ? free : unavailable) += rest;
  }
  w.Family("cohort_nodes", MetricType::kGauge, "Worker nodes by state");
  for (const auto& [st, count] : by_state) w.Sample({{"state", st}}, count);
  w.Family("cohort_node_up", MetricType::kGauge,
           "1 while the node's agent heartbeats, 0 when it is down or unreachable");
  for (const auto& n : m.nodes) {
    w.Sample({{"node", n.name}}, n.display_state == "DOWN" || n.display_state == "UNREACHABLE" ? 0 : 1);
  }
  w.Family("cohort_node_heartbeat_age_seconds", MetricType::kGauge, "Time since the node's last heartbeat");
  for (const auto& n : m.nodes) {
    if (n.heartbeat_age_s >= 0) w.Sample({{"node", n.name}}, n.heartbeat_age_s);
  }
  w.Family("cohort_node_gpus_unhealthy", MetricType::kGauge,
           "The node's GPUs marked unhealthy (XID, ECC, lost GPU, a failed health check) until `cohort resume`");
  for (const auto& n : m.nodes) w.Sample({{"node", n.name}}, n.gpus_unhealthy);
  w.Family("cohort_gpus", MetricType::kGauge,
           "GPUs by state: allocated to jobs, free, unhealthy, unavailable (on down or draining nodes)");
  w.Sample({{"state", "allocated"}}, allocated);
  w.Sample({{"state", "free"}}, free);
  w.Sample({{"state", "unhealthy"}}, unhealthy);
  w.Sample({{"state", "unavailable"}}, unavailable);
  w.Family("cohort_jobs", MetricType::kGauge, "Jobs the head knows, by state");
  for (const auto& [st, count] : m.jobs_by_state) w.Sample({{"state", st}}, count);
  w.Family("cohort_jobs_pending", MetricType::kGauge, "Pending jobs by why they wait");
  for (const auto& [reason, count] : m.pending_by_reason) w.Sample({{"reason", reason}}, count);
  w.Family("cohort_job_state_transitions_total", MetricType::kCounter,
           "Job state changes since the head started (from 'none': submitted)");
  for (const auto& [k, count] : m.transitions) w.Sample({{"from", k.first}, {"to", k.second}}, static_cast<double>(count));
  w.Family("cohort_scheduler_pass_duration_seconds", MetricType::kHistogram, "Duration of scheduling passes");
  w.Histogram({}, m.pass_seconds);
  w.Family("cohort_job_queue_wait_seconds", MetricType::kHistogram,
           "Time from submission (or requeue) to the start of an attempt");
  w.Histogram({}, m.queue_wait_seconds);
  w.Family("cohort_head_heartbeats_total", MetricType::kCounter, "Agent heartbeats received");
  w.Sample({}, static_cast<double>(m.heartbeats));
  w.Family("cohort_head_gpu_health_events_total", MetricType::kCounter,
           "GPU health events (XID, ECC, lost GPU) reported by agents since the head started");
  w.Sample({}, static_cast<double>(m.gpu_health_events));
  RenderLiveness(w, m);
  if (http) WriteHttpServerMetrics(w, *http);
  if (edge) {
    w.Family("cohort_http_rate_limited_total", MetricType::kCounter,
             "API requests refused (429) because their caller was past its rate limit");
    w.Sample({}, static_cast<double>(edge->rate_limited));
    w.Family("cohort_audit_written_total", MetricType::kCounter, "Audit log rows stored");
    w.Sample({}, static_cast<double>(edge->audit_written));
    w.Family("cohort_audit_dropped_total", MetricType::kCounter,
             "Audit log rows lost: the writer was behind (queue_full) or the store refused them (write_failed)");
    w.Sample({{"reason", "queue_full"}}, static_cast<double>(edge->audit_dropped_queue_full));
    w.Sample({{"reason", "write_failed"}}, static_cast<double>(edge->audit_dropped_write_failed));
  }
  return w.Finish();
}

void RegisterMetricsRoutes(Router& router, Cluster& cluster, const AuditLog& audit, const Gateway* gateway) {
  router.Get(api::routes::kMetrics, Access::kViewer, [&, gateway](const httplib::Request&, httplib::Response& res) {
    std::optional<HttpServerStats> http;
    if (auto* s = dynamic_cast<HttpServer*>(&router.server())) http = s->Stats();
    const AuditLog::Stats a = audit.stats();
    const EdgeStats edge{router.rate_limited(), a.written, a.dropped_queue_full, a.dropped_write_failed};
    auto text = RenderHeadMetrics(cluster.Metrics(), http ? &*http : nullptr, &edge);
    if (!text) return SendError(res, text.error());
    if (gateway) {
      prom::TextWriter w;
      gateway->WriteMetrics(w);
      auto more = w.Finish();
      if (!more) return SendError(res, more.error());
      *text += *more;
    }
    res.set_content(std::move(*text), "text/plain; version=0.0.4; charset=utf-8");
  });
}

}  // namespace cohort::head
