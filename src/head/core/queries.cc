#include "head/core/queries.h"

#include <algorithm>

#include <fmt/format.h>

#include "api/service.h"

namespace cohort::head::core {

using api::Job;
using api::JobId;
using api::JobState;
using api::NodeState;

namespace {

// A pending reason's kind, for a label with few values (the texts are in sched/reasons.h).
std::string ReasonKind(std::string_view reason) {
  if (reason.starts_with("needs ")) return "resources";
  if (reason.starts_with("waiting for job ")) return "priority";
  if (reason.starts_with("waiting for attempt ")) return "stopping";  // previous attempt not yet gone
  if (reason.starts_with("invalid request")) return "invalid";
  if (reason.starts_with("held ")) return "held";  // cohort hold (job_control.h)
  if (reason.starts_with("Dependency")) return "dependency";  // dependencies.h
  if (reason.starts_with("BeginTime")) return "begin";  // JobSpec::begin_ms (schedule.h)
  if (reason.starts_with("crash loop back-off")) return "backoff";  // a service replica (lifecycle.h)
  return "scheduler";  // not yet considered by a pass
}

// The job as shown: a PENDING job carries the last pass's reason.
Job Shown(const ClusterState& s, const Job& j) {
  Job out = j;
  if (j.state == JobState::kPending) {
    if (auto r = s.pending_reasons.find(j.id); r != s.pending_reasons.end()) out.reason = r->second;
  }
  return out;
}

}  // namespace

api::NodeStatus StatusOf(const ClusterState& s, const api::Node& n, Now now) {
  api::NodeStatus st;
  st.node = n;
  if (auto it = s.node_jobs.find(n.name); it != s.node_jobs.end()) {
    // A device counts once however many jobs or tasks share it (fractional GPUs: each
    // task of a sharing job names its GPU, and several jobs may hold parts of one).
    std::vector<int> held;
    for (JobId id : it->second) {
      for (const auto& na : s.jobs.at(id).allocation.nodes) {
        if (na.node != n.name) continue;
        held.insert(held.end(), na.gpus.begin(), na.gpus.end());
        st.cpus_allocated += na.cpus;
      }
      st.jobs.push_back(id);
    }
    std::sort(held.begin(), held.end());
    st.gpus_allocated = static_cast<int>(std::unique(held.begin(), held.end()) - held.begin());
  }
  auto rt = s.runtime.find(n.name);
  if (n.state == NodeState::kDown) {
    st.display_state = "DOWN";
  } else if (rt != s.runtime.end() && rt->second.unreachable) {
    st.display_state = "UNREACHABLE";
  } else if (n.drain) {
    st.display_state = st.jobs.empty() ? "DRAINED" : "DRAINING";
  } else {
    st.display_state = "UP";
  }
  if (rt != s.runtime.end()) {
    st.heartbeat_age_ms = HeartbeatAgeMs(rt->second, now);
    const auto& tel = rt->second.telemetry;
    for (size_t i = 0; i < st.node.gpus.size() && i < tel.size(); ++i) st.node.gpus[i].telemetry = tel[i];
    st.gpu_util_history.assign(rt->second.gpu_util.begin(), rt->second.gpu_util.end());
  }
  for (const auto& g : n.gpus) st.unhealthy_gpus += !g.healthy;
  return st;
}

Result<Job> GetJob(const ClusterState& s, JobId id) {
  auto it = s.jobs.find(id);
  if (it == s.jobs.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  return Shown(s, it->second);
}

void VisitJobs(const ClusterState& s, const JobFilter& filter, const std::function<void(const Job&)>& f) {
  size_t n = 0;
  auto start = filter.before > 0 ? std::make_reverse_iterator(s.jobs.lower_bound(filter.before)) : s.jobs.rbegin();
  for (auto it = start; it != s.jobs.rend(); ++it) {
    const Job& j = it->second;
    if (!filter.states.empty() && !filter.states.contains(j.state)) continue;
    if (!filter.user.empty() && j.spec.user != filter.user) continue;
    if (filter.until_ms > 0 && j.submit_ms >= filter.until_ms) continue;
    if (filter.since_ms > 0 && api::IsTerminal(j.state) && j.end_ms < filter.since_ms) continue;
    if (filter.services_only && !j.spec.is_service()) continue;
    if (!filter.ids.empty() && !filter.ids.contains(j.id) && !filter.ids.contains(j.array_job_id)) continue;
    f(j);
    if (filter.limit && ++n >= filter.limit) break;
  }
}

std::vector<Job> ListJobs(const ClusterState& s, const JobFilter& filter) {
  std::vector<Job> out;
  VisitJobs(s, filter, [&](const Job& j) { out.push_back(Shown(s, j)); });
  std::reverse(out.begin(), out.end());
  return out;
}

const std::string& ShownReason(const ClusterState& s, const Job& job) {
  if (job.state == JobState::kPending) {
    if (auto r = s.pending_reasons.find(job.id); r != s.pending_reasons.end()) return r->second;
    if (job.spec.is_array()) {
      if (auto a = s.arrays.find(job.id); a != s.arrays.end() && !a->second.waits_for_room.empty()) {
        return a->second.waits_for_room;
      }
    }
  }
  return job.reason;
}

Result<LogLocation> LocateLog(const ClusterState& s, JobId id, int attempt, int rank) {
  auto it = s.jobs.find(id);
  if (it == s.jobs.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  const Job& job = it->second;
  if (rank < 0 || rank >= job.spec.world_size()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("rank: job {} has ranks 0..{}, got {}", id, job.spec.world_size() - 1, rank), "rank");
  }
  const api::AttemptRecord* rec = nullptr;
  for (const auto& h : job.history) {
    if (h.attempt == attempt) rec = &h;
  }
  if (!rec) return MakeError(ErrorCode::kNotFound, api::MissingAttemptRecord(job, attempt).value_or(""));
  size_t node_rank = static_cast<size_t>(rank / job.spec.tasks_per_node);
  if (node_rank >= rec->nodes.size()) {
    return Errorf(ErrorCode::kInternal, "job {} attempt {} has no node for rank {}", id, attempt, rank);
  }
  LogLocation loc;
  loc.node = rec->nodes[node_rank];
  auto n = s.nodes.find(loc.node);
  if (n == s.nodes.end()) return Errorf(ErrorCode::kInternal, "node {} of job {} is unknown", loc.node, id);
  loc.agent_url = n->second.agent_url;
  loc.node_down = n->second.state == NodeState::kDown;
  loc.task_finished = rec->end_ms != 0 || api::IsTerminal(job.state) || (attempt == job.attempt && job.HasExit(rank));
  return loc;
}

ClusterMetrics Metrics(const ClusterState& s, Now now) {
  ClusterMetrics m;
  m.nodes.reserve(s.nodes.size());
  for (const auto& [name, n] : s.nodes) {
    api::NodeStatus st = StatusOf(s, n, now);
    ClusterMetrics::NodeLine line;
    line.name = name;
    line.display_state = st.display_state;
    line.gpus = static_cast<int>(n.gpus.size());
    line.gpus_allocated = st.gpus_allocated;
    line.gpus_unhealthy = st.unhealthy_gpus;
    line.heartbeat_age_s = st.heartbeat_age_ms < 0 ? -1 : st.heartbeat_age_ms / 1000.0;
    m.nodes.push_back(std::move(line));
  }
  for (JobState st : {JobState::kPending, JobState::kRunning, JobState::kSucceeded, JobState::kFailed,
                      JobState::kCancelled, JobState::kTimeout}) {
    m.jobs_by_state[JobStateLabel(st)] = 0;
  }
  for (const auto& [id, j] : s.jobs) m.jobs_by_state[JobStateLabel(j.state)] += 1;
  for (const char* kind : {"resources", "priority", "invalid", "stopping", "held", "dependency", "backoff", "scheduler"}) {
    m.pending_by_reason[kind] = 0;
  }
  for (JobId id : s.pending) {
    auto r = s.pending_reasons.find(id);
    m.pending_by_reason[ReasonKind(r != s.pending_reasons.end() ? r->second : s.jobs.at(id).reason)] += 1;
  }
  m.transitions = s.counters.transitions;
  m.heartbeats = s.counters.heartbeats;
  m.gpu_health_events = s.counters.gpu_health_events;
  m.liveness_suspended = s.liveness.suspended;
  m.silent_ratio = s.liveness.up > 0 ? static_cast<double>(s.liveness.silent) / s.liveness.up : 0;
  m.unheard_seconds = static_cast<double>(s.counters.unheard_ms) / 1000.0;
  return m;
}

std::map<JobId, std::vector<api::TaskUsage>> RunningTaskUsage(const ClusterState& s) {
  std::map<JobId, std::vector<api::TaskUsage>> out;
  for (const auto& [node, rt] : s.runtime) {
    for (const auto& t : rt.reported) {
      if (!t.running || !CurrentAttempt(s, t.job, t.attempt)) continue;
      out[t.job].push_back({t.rank, node, t.cpu_seconds, t.rss_bytes, t.gpus, t.gpu_memory_bytes, t.gpu_memory_warning,
                              t.cpu_list});
    }
  }
  for (auto& [id, tasks] : out) {
    std::sort(tasks.begin(), tasks.end(), [](const api::TaskUsage& a, const api::TaskUsage& b) { return a.rank < b.rank; });
  }
  return out;
}

}  // namespace cohort::head::core
