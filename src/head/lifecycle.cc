// Job lifecycle: PENDING → RUNNING → SUCCEEDED / FAILED / CANCELLED, with gang restarts.
//
// A job's tasks start together and fail together: the first task that ends badly, or a
// node that goes down, ends the attempt on every node. With restarts left the job goes
// back to PENDING with attempt + 1 (COHORT_ATTEMPT); otherwise it fails with the reason.
#include <algorithm>

#include "common/log.h"
#include "head/cluster.h"

namespace cohort::head {

using api::Job;
using api::JobState;

void Cluster::StartJobLocked(Job& job,
                             const std::vector<std::pair<std::string, std::vector<int>>>& nodes,
                             const std::vector<int>& cpus, int64_t now) {
  const int tpn = job.spec.tasks_per_node;
  const int gpt = job.spec.gpus_per_task();
  // Queue wait: since submission, or since the previous attempt ended.
  int64_t queued_since = job.history.empty() ? job.submit_ms : job.history.back().end_ms;
  if (queued_since > 0 && now >= queued_since) queue_wait_seconds_.Observe((now - queued_since) / 1000.0);
  CountTransitionLocked(api::JobStateName(job.state), JobState::kRunning);
  job.state = JobState::kRunning;
  job.reason.clear();
  job.start_ms = now;
  job.end_ms = 0;
  job.exit_code.reset();
  job.exits.clear();
  job.allocation = {};
  api::AttemptRecord rec;
  rec.attempt = job.attempt;
  rec.start_ms = now;
  rec.gpus = 0;
  for (const auto& n : nodes) rec.gpus += static_cast<int>(n.second.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& [name, gpus] = nodes[i];
    BumpVersionLocked(name);
    api::NodeAllocation na;
    na.node = name;
    na.address = nodes_.at(name).address;
    na.node_rank = static_cast<int>(i);
    na.gpus = gpus;
    na.cpus = cpus[i];
    na.version = runtime_[name].desired_version;
    for (int l = 0; l < tpn; ++l) {
      api::TaskPlacement t;
      t.rank = static_cast<int>(i) * tpn + l;
      t.local_rank = l;
      for (int g = 0; g < gpt; ++g) t.gpus.push_back(gpus[l * gpt + g]);
      na.tasks.push_back(std::move(t));
    }
    job.allocation.nodes.push_back(std::move(na));
    node_jobs_[name].insert(job.id);
    rec.nodes.push_back(name);
  }
  // MASTER_PORT: a port the rank-0 node found free, else one derived from the job.
  const std::string& head_node = nodes.front().first;
  auto& ports = runtime_[head_node].free_ports;
  job.allocation.master_addr = job.allocation.nodes.front().address;
  if (!ports.empty()) {
    job.allocation.master_port = ports.back();
    ports.pop_back();
  } else {
    job.allocation.master_port = 20000 + static_cast<int>((job.id * 31 + job.attempt) % 10000);
  }
  job.history.push_back(std::move(rec));
  pending_.erase(job.id);
  pending_reasons_.erase(job.id);
  MarkDirtyLocked(job);
  LOG_INFO("job {} attempt {} started on {} node(s): {}", job.id, job.attempt, nodes.size(),
           fmt::join(job.history.back().nodes, ","));
}

void Cluster::DetachJobLocked(const Job& job) {
  rendezvous_->DropJob(job.id);
  for (const auto& na : job.allocation.nodes) {
    auto it = node_jobs_.find(na.node);
    if (it != node_jobs_.end()) {
      it->second.erase(job.id);
      if (it->second.empty()) node_jobs_.erase(it);
    }
    BumpVersionLocked(na.node);
    // Fence the attempt on this node until its agent confirms the tasks are gone; a DOWN
    // node's tasks are already fenced, and tasks that all exited need no confirmation.
    auto n = nodes_.find(na.node);
    bool all_exited = std::all_of(na.tasks.begin(), na.tasks.end(),
                                  [&](const api::TaskPlacement& t) { return job.HasExit(t.rank); });
    if (n == nodes_.end() || n->second.state != api::NodeState::kUp || all_exited) continue;
    NodeRuntime& rt = runtime_[na.node];
    rt.stopping.push_back({job.id, job.attempt, na.gpus, na.cpus, rt.desired_version});
  }
  RequestScheduleLocked();
}

bool Cluster::ConfirmStoppedLocked(NodeRuntime& rt) {
  auto confirmed = [&](const StoppingAttempt& s) {
    if (rt.applied_version < s.version) return false;
    return std::none_of(rt.reported.begin(), rt.reported.end(), [&](const api::TaskReport& t) {
      return t.running && t.job == s.job && t.attempt == s.attempt;
    });
  };
  size_t before = rt.stopping.size();
  std::erase_if(rt.stopping, confirmed);
  return rt.stopping.size() != before;
}

std::string Cluster::StoppingWhereLocked(api::JobId id) const {
  std::string nodes;
  int attempt = -1;
  for (const auto& [name, rt] : runtime_) {
    for (const auto& s : rt.stopping) {
      if (s.job != id) continue;
      nodes += (nodes.empty() ? "" : ", ") + name;
      attempt = s.attempt;
      break;
    }
  }
  if (nodes.empty()) return {};
  return fmt::format("attempt {} on {}", attempt, nodes);
}

static void CloseAttempt(Job& job, int64_t now, const std::string& reason) {
  if (!job.history.empty() && job.history.back().attempt == job.attempt &&
      job.history.back().end_ms == 0) {
    job.history.back().end_ms = now;
    job.history.back().end_reason = reason;
  }
}

void Cluster::FinishJobLocked(Job& job, JobState state, std::string reason,
                              std::optional<int> exit_code) {
  int64_t now = NowUnixMs();
  if (job.state == JobState::kRunning) DetachJobLocked(job);
  CloseAttempt(job, now, reason);
  job.move.reset();
  pending_.erase(job.id);
  pending_reasons_.erase(job.id);
  CountTransitionLocked(api::JobStateName(job.state), state);
  job.state = state;
  job.reason = std::move(reason);
  job.end_ms = now;
  job.exit_code = exit_code;
  MarkDirtyLocked(job);
  LOG_INFO("job {} {}: {}", job.id, api::JobStateName(state), job.reason);
}

void Cluster::RequeueLocked(Job& job, const std::string& why) {
  int64_t now = NowUnixMs();
  if (job.state == JobState::kRunning) DetachJobLocked(job);
  CloseAttempt(job, now, why);
  job.move.reset();
  job.attempt += 1;
  CountTransitionLocked(api::JobStateName(job.state), JobState::kPending);
  job.state = JobState::kPending;
  job.exits.clear();
  job.allocation = {};
  pending_.insert(job.id);
  MarkDirtyLocked(job);
}

void Cluster::MoveJobLocked(Job& job, const std::string& why) {
  RequeueLocked(job, why);
  job.moves += 1;
  job.reason = fmt::format("moved: {}", why);
  LOG_INFO("job {} moved as attempt {}: {}", job.id, job.attempt, why);
}

void Cluster::FailGangLocked(Job& job, const std::string& why, std::optional<int> exit_code,
                             bool may_restart) {
  // Moves are not failures: only the attempts that failed count as restarts.
  if (may_restart && job.attempt - job.moves < job.spec.max_restarts) {
    RequeueLocked(job, why);
    job.reason = fmt::format("requeued after: {} (restart {} of {})", why, job.attempt - job.moves,
                             job.spec.max_restarts);
    LOG_WARN("job {} requeued as attempt {}: {}", job.id, job.attempt, why);
    return;
  }
  std::string reason = why;
  if (job.spec.max_restarts > 0) reason += fmt::format(" (no restarts left of {})", job.spec.max_restarts);
  FinishJobLocked(job, JobState::kFailed, std::move(reason), exit_code);
}

void Cluster::RecordExitLocked(Job& job, const std::string& node, const api::TaskReport& t) {
  api::TaskExit e;
  e.rank = t.rank;
  e.node = node;
  e.exit_code = t.exit_code;
  e.signal = t.signal;
  e.error = t.error;
  e.finished_ms = t.finished_ms ? t.finished_ms : NowUnixMs();
  job.exits.push_back(e);
  MarkDirtyLocked(job);
  if (e.signal != 0 || e.exit_code != 0) {
    std::string how = e.signal ? fmt::format("was killed by signal {}", e.signal)
                               : fmt::format("exited with code {}", e.exit_code);
    std::string why = fmt::format("rank {} on {} {}", e.rank, node, how);
    if (!e.error.empty()) why += ": " + e.error;
    FailGangLocked(job, why, e.signal ? 128 + e.signal : e.exit_code, /*may_restart=*/true);
    return;
  }
  if (static_cast<int>(job.exits.size()) == job.world_size()) {
    FinishJobLocked(job, JobState::kSucceeded, "all ranks exited 0", 0);
  }
}

std::map<std::string, std::string> Cluster::TaskEnvLocked(const Job& job,
                                                          const api::NodeAllocation& na,
                                                          const api::TaskPlacement& t) const {
  std::map<std::string, std::string> env = job.spec.env;
  std::string gpus;
  for (size_t i = 0; i < t.gpus.size(); ++i) gpus += (i ? "," : "") + std::to_string(t.gpus[i]);
  const std::string& head = config_.advertise_url;
  env["RANK"] = std::to_string(t.rank);
  env["WORLD_SIZE"] = std::to_string(job.world_size());
  env["LOCAL_RANK"] = std::to_string(t.local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(job.spec.tasks_per_node);
  env["NODE_RANK"] = std::to_string(na.node_rank);
  env["GROUP_RANK"] = std::to_string(na.node_rank);
  env["MASTER_ADDR"] = job.allocation.master_addr;
  env["MASTER_PORT"] = std::to_string(job.allocation.master_port);
  env["CUDA_VISIBLE_DEVICES"] = gpus;
  env["COHORT_JOB_ID"] = std::to_string(job.id);
  env["COHORT_JOB_NAME"] = job.spec.name;
  env["COHORT_ATTEMPT"] = std::to_string(job.attempt);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(job.attempt);
  env["COHORT_NODE"] = na.node;
  env["COHORT_NUM_NODES"] = std::to_string(job.allocation.nodes.size());
  env["COHORT_HEAD"] = head;
  env["COHORT_RENDEZVOUS"] = fmt::format("{}/v1/rendezvous/{}", head, rendezvous_->Token(job.id, job.attempt));
  env["COHORT_REPORT"] = fmt::format("{}/v1/report/{}", head, rendezvous_->Token(job.id, job.attempt));
  env["COHORT_CHECKPOINT_DIR"] = fmt::format("{}/job-{}", config_.checkpoint_root, job.id);
  return env;
}

std::vector<api::TaskLaunch> Cluster::DesiredTasksLocked(const std::string& node) const {
  std::vector<api::TaskLaunch> out;
  auto it = node_jobs_.find(node);
  if (it == node_jobs_.end()) return out;
  for (api::JobId id : it->second) {
    const Job& job = jobs_.at(id);
    for (const auto& na : job.allocation.nodes) {
      if (na.node != node) continue;
      for (const auto& t : na.tasks) {
        if (job.HasExit(t.rank)) continue;
        api::TaskLaunch l;
        l.job = job.id;
        l.attempt = job.attempt;
        l.rank = t.rank;
        l.command = job.spec.command;
        l.env = TaskEnvLocked(job, na, t);
        l.workdir = job.spec.workdir;
        l.gpus = t.gpus;
        l.cpus = job.spec.cpus_per_task;
        if (job.move && !job.move->grow) {
          l.checkpoint_requested = true;
          l.checkpoint_signal = api::CheckpointSignalNumber(job.spec.checkpoint_signal);
        }
        out.push_back(std::move(l));
      }
    }
  }
  return out;
}

}  // namespace cohort::head
