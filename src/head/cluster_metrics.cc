// Cluster: the figures behind the head's /metrics, and tasks' resource use for the API.
#include <cctype>

#include "head/cluster.h"

namespace cohort::head {

using api::JobState;

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A pending reason's kind, for a label with few values (the texts are in sched/reasons.h).
std::string ReasonKind(std::string_view reason) {
  if (reason.starts_with("needs ")) return "resources";
  if (reason.starts_with("waiting for job ")) return "priority";
  if (reason.starts_with("waiting for attempt ")) return "stopping";  // previous attempt not yet gone
  if (reason.starts_with("invalid request")) return "invalid";
  return "scheduler";  // not yet considered by a pass
}

}  // namespace

void Cluster::CountTransitionLocked(std::string_view from, JobState to) {
  transitions_[{Lower(from), Lower(api::JobStateName(to))}] += 1;
}

ClusterMetrics Cluster::Metrics() const {
  ClusterMetrics m;
  std::lock_guard lock(mu_);
  m.nodes.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) {
    NodeStatus s = StatusLocked(n);
    ClusterMetrics::NodeLine line;
    line.name = name;
    line.display_state = s.display_state;
    line.gpus = static_cast<int>(n.gpus.size());
    line.gpus_allocated = s.gpus_allocated;
    line.gpus_unhealthy = s.unhealthy_gpus;
    line.heartbeat_age_s = s.heartbeat_age_ms < 0 ? -1 : s.heartbeat_age_ms / 1000.0;
    m.nodes.push_back(std::move(line));
  }
  for (JobState st : {JobState::kPending, JobState::kRunning, JobState::kSucceeded, JobState::kFailed,
                      JobState::kCancelled}) {
    m.jobs_by_state[Lower(api::JobStateName(st))] = 0;
  }
  for (const auto& [id, j] : jobs_) m.jobs_by_state[Lower(api::JobStateName(j.state))] += 1;
  for (const char* kind : {"resources", "priority", "invalid", "stopping", "scheduler"}) m.pending_by_reason[kind] = 0;
  for (api::JobId id : pending_) {
    auto r = pending_reasons_.find(id);
    m.pending_by_reason[ReasonKind(r != pending_reasons_.end() ? r->second : jobs_.at(id).reason)] += 1;
  }
  m.transitions = transitions_;
  m.heartbeats = heartbeats_;
  m.gpu_health_events = gpu_health_events_;
  m.pass_seconds = pass_seconds_.Snapshot();
  m.queue_wait_seconds = queue_wait_seconds_.Snapshot();
  return m;
}

std::map<api::JobId, std::vector<TaskUsage>> Cluster::RunningTaskUsage() const {
  std::map<api::JobId, std::vector<TaskUsage>> out;
  std::lock_guard lock(mu_);
  for (const auto& [node, rt] : runtime_) {
    for (const auto& t : rt.reported) {
      if (!t.running) continue;
      auto j = jobs_.find(t.job);
      if (j == jobs_.end() || j->second.state != JobState::kRunning || j->second.attempt != t.attempt) continue;
      out[t.job].push_back({t.rank, node, t.cpu_seconds, t.rss_bytes});
    }
  }
  for (auto& [id, tasks] : out) {
    std::sort(tasks.begin(), tasks.end(), [](const TaskUsage& a, const TaskUsage& b) { return a.rank < b.rank; });
  }
  return out;
}

}  // namespace cohort::head
