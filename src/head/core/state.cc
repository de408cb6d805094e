#include "head/core/state.h"

#include <algorithm>
#include <cctype>

#include "head/core/arrays.h"
#include "head/core/job_limits.h"
#include "head/core/tx.h"

namespace cohort::head::core {

using api::Job;
using api::JobState;

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string JobStateLabel(JobState st) { return Lower(api::JobStateName(st)); }

const Job* CurrentAttempt(const ClusterState& s, api::JobId job, int attempt) {
  auto it = s.jobs.find(job);
  if (it == s.jobs.end() || it->second.state != JobState::kRunning || it->second.attempt != attempt) return nullptr;
  return &it->second;
}

Job* CurrentAttempt(ClusterState& s, api::JobId job, int attempt) {
  return const_cast<Job*>(CurrentAttempt(static_cast<const ClusterState&>(s), job, attempt));
}

std::set<api::JobId> RunningJobIds(const ClusterState& s) {
  std::set<api::JobId> running;
  for (const auto& [node, ids] : s.node_jobs) running.insert(ids.begin(), ids.end());
  return running;
}

int64_t HeartbeatAgeMs(const NodeRuntime& rt, Now now) { return now.mono_ms - rt.last_seen_mono_ms; }

void Heard(NodeRuntime& rt, Now now) {
  rt.last_seen_mono_ms = now.mono_ms;
  rt.credited_ms = 0;
  rt.unreachable = false;
}

void CreditUnheardTime(ClusterState& s, Now now, int64_t gap_ms) {
  for (auto& [name, rt] : s.runtime) {
    const int64_t credit = std::clamp<int64_t>(now.mono_ms - rt.last_seen_mono_ms, 0, gap_ms);
    rt.last_seen_mono_ms += credit;
    rt.credited_ms += credit;
  }
}

void NoteShape(ClusterState& s, const api::Node& node, int delta) {
  // Plain jobs count whole GPUs; MIG instances are for typed requests (gpu_detail.h).
  const int whole = static_cast<int>(std::count_if(node.gpus.begin(), node.gpus.end(),
                                                   [](const api::Gpu& g) { return g.mig_profile.empty(); }));
  const std::pair<int, int> shape{whole, node.cpus};
  if ((s.node_shapes[shape] += delta) <= 0) s.node_shapes.erase(shape);
}

ClusterState LoadState(std::vector<api::Node> nodes, std::vector<api::Job> jobs, Now now) {
  ClusterState s;
  int64_t max_version = 0;
  for (auto& n : nodes) {
    NodeRuntime rt;
    rt.last_seen_mono_ms = now.mono_ms;  // one failure timeout of grace for every agent to report in
    rt.reported_since_load = false;      // its running tasks are known from its first heartbeat
    s.runtime[n.name] = rt;
    NoteShape(s, n, +1);
    s.nodes[n.name] = std::move(n);
  }
  for (auto& j : jobs) {
    if (j.state == JobState::kPending && !j.spec.is_array()) s.pending.insert(j.id);  // an array never queues
    if (j.nomination) s.shares.nominated.insert(j.id);  // preempt.h: it still waits for its victims
    IndexArrayJob(s, j);
    if (j.state == JobState::kRunning) {
      for (const auto& na : j.allocation.nodes) {
        s.node_jobs[na.node].insert(j.id);
        max_version = std::max(max_version, na.version);
        auto& rt = s.runtime[na.node];
        rt.desired_version = std::max(rt.desired_version, na.version);
      }
    }
    if (!api::IsTerminal(j.state)) CountOpenJob(s, j.spec.user, +1);
    s.jobs[j.id] = std::move(j);
  }
  // Versions increase across restarts: start above both the clock and anything stored.
  s.next_version = std::max(now.unix_ms * 1000, max_version + 1);
  s.loaded_ms = now.unix_ms;
  return s;
}

void Tx::Wake(const std::string& node) {
  auto it = s.nodes.find(node);
  if (it != s.nodes.end() && !it->second.agent_url.empty() && it->second.state == api::NodeState::kUp) {
    fx.wake.insert(it->second.agent_url);
  }
}

void Tx::BumpVersion(const std::string& node) {
  s.runtime[node].desired_version = ++s.next_version;
  Wake(node);
}

void Tx::CountTransition(std::optional<JobState> from, JobState to) {
  s.counters.transitions[{from ? JobStateLabel(*from) : "none", JobStateLabel(to)}] += 1;
}

}  // namespace cohort::head::core
