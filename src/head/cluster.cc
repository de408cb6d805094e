// Cluster: loading, user-facing queries and commands, persistence helpers.
#include "head/cluster.h"

#include <algorithm>

#include "common/log.h"
#include "head/sched_bridge.h"

namespace cohort::head {

using api::Job;
using api::JobId;
using api::JobState;
using api::Node;
using api::NodeState;

Cluster::Cluster(HeadConfig config, std::unique_ptr<store::StateStore> store)
    : config_(std::move(config)), store_(std::move(store)) {}

Result<std::unique_ptr<Cluster>> Cluster::Open(HeadConfig config,
                                               std::unique_ptr<store::StateStore> store) {
  std::unique_ptr<Cluster> c(new Cluster(std::move(config), std::move(store)));
  std::lock_guard lock(c->mu_);
  COHORT_TRY_VOID(c->LoadLocked());
  return c;
}

Result<void> Cluster::LoadLocked() {
  // The rendezvous secret outlives head restarts, so running jobs' tokens stay valid.
  auto secret = COHORT_TRY(store_->GetMeta("rendezvous_secret"));
  if (!secret) {
    secret = NewRendezvousSecret();
    store::WriteBatch batch;
    batch.meta.emplace_back("rendezvous_secret", *secret);
    COHORT_TRY_VOID(store_->Write(batch));
  }
  rendezvous_ = std::make_unique<RendezvousStore>(*secret);
  auto nodes = COHORT_TRY(store_->LoadNodes());
  auto jobs = COHORT_TRY(store_->LoadJobs());
  auto now = SteadyClock::now();
  int64_t max_version = 0;
  for (auto& n : nodes) {
    NodeRuntime rt;
    rt.last_seen = now;  // one failure timeout of grace for every agent to report in
    runtime_[n.name] = rt;
    nodes_[n.name] = std::move(n);
  }
  int running = 0;
  for (auto& j : jobs) {
    if (j.state == JobState::kPending) pending_.insert(j.id);
    if (j.state == JobState::kRunning) {
      ++running;
      for (const auto& na : j.allocation.nodes) {
        node_jobs_[na.node].insert(j.id);
        max_version = std::max(max_version, na.version);
        auto& rt = runtime_[na.node];
        rt.desired_version = std::max(rt.desired_version, na.version);
      }
    }
    jobs_[j.id] = std::move(j);
  }
  // Versions increase across restarts: start above both the clock and anything stored.
  next_version_ = std::max(NowUnixMs() * 1000, max_version + 1);
  loaded_ms_ = NowUnixMs();
  LOG_INFO("loaded {} nodes and {} jobs ({} pending, {} running) from the state store",
           nodes_.size(), jobs_.size(), pending_.size(), running);
  return {};
}

Result<void> Cluster::FlushLocked() {
  if (dirty_jobs_.empty() && dirty_nodes_.empty()) return {};
  store::WriteBatch batch;
  for (JobId id : dirty_jobs_) batch.jobs.push_back(jobs_.at(id));
  for (const auto& name : dirty_nodes_) batch.nodes.push_back(nodes_.at(name));
  auto r = store_->Write(batch);
  if (!r) {
    LOG_ERROR("state store write failed ({} jobs, {} nodes kept for retry): {}", batch.jobs.size(),
              batch.nodes.size(), r.error().ToString());
    return r;
  }
  dirty_jobs_.clear();
  dirty_nodes_.clear();
  return {};
}

void Cluster::RequestScheduleLocked() {
  schedule_requested_ = true;
  work_cv_.notify_all();
}

bool Cluster::schedule_requested() const {
  std::lock_guard lock(mu_);
  return schedule_requested_;
}

void Cluster::WaitForWork(Millis timeout) {
  std::unique_lock lock(mu_);
  work_cv_.wait_for(lock, timeout, [&] { return schedule_requested_; });
}

Millis Cluster::last_pass_duration() const {
  std::lock_guard lock(mu_);
  return last_pass_;
}

void Cluster::BumpVersionLocked(const std::string& node) {
  runtime_[node].desired_version = ++next_version_;
  WakeLocked(node);
}

void Cluster::UnlockAndWake(std::unique_lock<std::mutex>& lock) {
  std::vector<std::string> urls(to_wake_.begin(), to_wake_.end());
  to_wake_.clear();
  lock.unlock();
  if (!urls.empty() && wake_agents_) wake_agents_(std::move(urls));
}

void Cluster::WakeLocked(const std::string& node) {
  auto it = nodes_.find(node);
  if (it != nodes_.end() && !it->second.agent_url.empty() && it->second.state == NodeState::kUp) {
    to_wake_.insert(it->second.agent_url);
  }
}


Result<Job> Cluster::Submit(api::JobSpec spec) {
  std::unique_lock lock(mu_);
  std::vector<sched::NodeCapacity> capacity;
  for (const auto& [name, n] : nodes_) {
    capacity.push_back({name, static_cast<int>(n.gpus.size()), n.cpus});
  }
  Job job;
  job.spec = std::move(spec);
  job.submit_ms = NowUnixMs();
  job.state = JobState::kPending;
  if (capacity.empty()) {
    return MakeError(ErrorCode::kUnsatisfiable,
                     "no nodes have registered with this head yet; start an agent (cohort agent --head URL) and submit again");
  }
  if (auto ok = sched::CheckFeasible(capacity, ToRequest(job)); !ok) return std::unexpected(ok.error());
  job.reason = "waiting for the scheduler";
  auto created = store_->CreateJob(job);
  if (!created) {
    return MakeError(ErrorCode::kUnavailable, "cannot store the job: " + created.error().message);
  }
  job = *created;
  jobs_[job.id] = job;
  pending_.insert(job.id);
  CountTransitionLocked("none", JobState::kPending);
  RequestScheduleLocked();
  LOG_INFO("job {} ({}) submitted by {}: {} node(s) x {} task(s), {} GPU(s)/node", job.id,
           job.spec.name, job.spec.user, job.spec.nodes, job.spec.tasks_per_node,
           job.spec.gpus_per_node);
  return job;
}

Result<Job> Cluster::Cancel(JobId id) {
  std::unique_lock lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  Job& job = it->second;
  if (api::IsTerminal(job.state)) {
    return Errorf(ErrorCode::kFailedPrecondition, "job {} has already ended ({})", id,
                  api::JobStateName(job.state));
  }
  FinishJobLocked(job, JobState::kCancelled, "cancelled by request", std::nullopt);
  auto flushed = FlushLocked();
  Job out = job;
  UnlockAndWake(lock);
  if (!flushed) return std::unexpected(flushed.error());
  LOG_INFO("job {} cancelled", id);
  return out;
}

Result<Job> Cluster::GetJob(JobId id) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  Job job = it->second;
  if (job.state == JobState::kPending) {
    if (auto r = pending_reasons_.find(id); r != pending_reasons_.end()) job.reason = r->second;
  }
  return job;
}

std::vector<Job> Cluster::ListJobs(const JobFilter& filter) const {
  std::lock_guard lock(mu_);
  std::vector<Job> out;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    const Job& j = it->second;
    if (!filter.states.empty() && !filter.states.contains(j.state)) continue;
    if (!filter.user.empty() && j.spec.user != filter.user) continue;
    out.push_back(j);
    if (j.state == JobState::kPending) {
      if (auto r = pending_reasons_.find(j.id); r != pending_reasons_.end()) out.back().reason = r->second;
    }
    if (filter.limit && out.size() >= filter.limit) break;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

int64_t Cluster::HeartbeatAgeMs(const NodeRuntime& rt) const {
  return std::chrono::duration_cast<Millis>(SteadyClock::now() - rt.last_seen).count();
}

NodeStatus Cluster::StatusLocked(const Node& n) const {
  NodeStatus s;
  s.node = n;
  if (auto it = node_jobs_.find(n.name); it != node_jobs_.end()) {
    for (JobId id : it->second) {
      const Job& j = jobs_.at(id);
      for (const auto& na : j.allocation.nodes) {
        if (na.node != n.name) continue;
        s.gpus_allocated += static_cast<int>(na.gpus.size());
        s.cpus_allocated += na.cpus;
      }
      s.jobs.push_back(id);
    }
  }
  if (n.state == NodeState::kDown) {
    s.display_state = "DOWN";
  } else if (n.drain) {
    s.display_state = s.jobs.empty() ? "DRAINED" : "DRAINING";
  } else {
    s.display_state = "UP";
  }
  if (auto it = runtime_.find(n.name); it != runtime_.end()) {
    s.heartbeat_age_ms = HeartbeatAgeMs(it->second);
    const auto& tel = it->second.telemetry;
    for (size_t i = 0; i < s.node.gpus.size() && i < tel.size(); ++i) s.node.gpus[i].telemetry = tel[i];
  }
  for (const auto& g : n.gpus) s.unhealthy_gpus += !g.healthy;
  return s;
}

std::vector<NodeStatus> Cluster::ListNodes() const {
  std::lock_guard lock(mu_);
  std::vector<NodeStatus> out;
  for (const auto& [name, n] : nodes_) out.push_back(StatusLocked(n));
  return out;
}

Result<NodeStatus> Cluster::GetNode(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Errorf(ErrorCode::kNotFound, "node '{}' not found", name);
  return StatusLocked(it->second);
}

Result<NodeStatus> Cluster::Drain(const std::string& name, std::string reason, bool now,
                                  int64_t timeout_ms) {
  std::unique_lock lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Errorf(ErrorCode::kNotFound, "node '{}' not found", name);
  it->second.drain = true;
  it->second.drain_reason = reason.empty() ? "drained by request" : std::move(reason);
  MarkDirtyLocked(it->second);
  RequestScheduleLocked();
  LOG_INFO("node {} draining{}: {}", name, now ? " now (moving its jobs)" : "", it->second.drain_reason);
  if (now) {
    const int64_t at = NowUnixMs();
    std::vector<api::JobId> ids;
    if (auto nj = node_jobs_.find(name); nj != node_jobs_.end()) ids.assign(nj->second.begin(), nj->second.end());
    for (api::JobId id : ids) {
      Job& job = jobs_.at(id);
      if (job.state != JobState::kRunning) continue;
      if (job.move && !job.move->grow) continue;  // already asked (a grow gives way to the drain)
      api::MoveRequest m;
      m.node = name;
      m.requested_ms = at;
      m.deadline_ms = at + timeout_ms;
      // A checkpoint counts once it is past everything reported so far: the newest
      // checkpoint and the newest step (a checkpoint of that step may already exist
      // unreported, written before the request).
      if (auto last = progress_.LatestOfAttempt(id, job.attempt)) {
        m.baseline_checkpoint = std::max(last->step, last->checkpoint_step.value_or(-1));
      }
      job.move = std::move(m);
      MarkDirtyLocked(job);
      // The agents deliver the checkpoint signal on their next heartbeat: make it now.
      for (const auto& na : job.allocation.nodes) WakeLocked(na.node);
      LOG_INFO("job {} asked to checkpoint before moving off {} (within {})", id, name, FormatDuration(timeout_ms));
    }
  }
  // The drain and its move requests are stored before the reply: a head restarted after
  // it still moves the jobs.
  COHORT_TRY_VOID(FlushLocked());
  NodeStatus status = StatusLocked(it->second);
  UnlockAndWake(lock);
  return status;
}

bool Cluster::ReportProgress(const RendezvousScope& scope, ProgressPoint point) {
  point.attempt = scope.attempt;
  const std::optional<int64_t> checkpoint = point.checkpoint_step;
  progress_.Add(scope.job, std::move(point));
  std::unique_lock lock(mu_);
  auto j = jobs_.find(scope.job);
  if (j == jobs_.end() || j->second.state != JobState::kRunning || j->second.attempt != scope.attempt) return false;
  if (!j->second.move) return false;
  const api::MoveRequest& m = *j->second.move;
  // Not yet: keep asking (a grow waits for the job's own next checkpoint).
  if (!checkpoint || *checkpoint <= m.baseline_checkpoint) return !m.grow;
  std::string why =
      m.grow ? fmt::format("growing back to {} nodes at its checkpoint at step {}", j->second.spec.nodes, *checkpoint)
             : fmt::format("node {} drained now; checkpoint at step {} written {} after the request", m.node,
                           *checkpoint, FormatDuration(NowUnixMs() - m.requested_ms));
  MoveJobLocked(j->second, why);
  (void)FlushLocked();
  UnlockAndWake(lock);
  return false;
}

void Cluster::CheckMovesLocked(const std::set<api::JobId>& running, int64_t now_ms) {
  for (api::JobId id : running) {
    Job& job = jobs_.at(id);
    if (job.state != JobState::kRunning || !job.move || job.move->deadline_ms == 0 || now_ms < job.move->deadline_ms) {
      continue;
    }
    const api::MoveRequest m = *job.move;
    MoveJobLocked(job, fmt::format("node {} drained now; no new checkpoint reported within {} (work since "
                                   "the last checkpoint is redone)",
                                   m.node, FormatDuration(m.deadline_ms - m.requested_ms)));
  }
}

Result<NodeStatus> Cluster::Resume(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Errorf(ErrorCode::kNotFound, "node '{}' not found", name);
  it->second.drain = false;
  it->second.drain_reason.clear();
  for (auto& g : it->second.gpus) {
    if (g.healthy) continue;
    LOG_INFO("node {} GPU {} marked healthy again (was: {})", name, g.index, g.health_reason);
    g.healthy = true;
    g.health_reason.clear();
  }
  MarkDirtyLocked(it->second);
  COHORT_TRY_VOID(FlushLocked());
  RequestScheduleLocked();
  LOG_INFO("node {} resumed", name);
  return StatusLocked(it->second);
}

Result<LogLocation> Cluster::LocateLog(JobId id, int attempt, int rank) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  const Job& job = it->second;
  if (rank < 0 || rank >= job.spec.world_size()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("rank: job {} has ranks 0..{}, got {}", id, job.spec.world_size() - 1, rank),
                     "rank");
  }
  const api::AttemptRecord* rec = nullptr;
  for (const auto& h : job.history) {
    if (h.attempt == attempt) rec = &h;
  }
  if (!rec) {
    return Errorf(ErrorCode::kNotFound, "job {} has no attempt {} that started (it is {})", id, attempt,
                  api::JobStateName(job.state));
  }
  size_t node_rank = static_cast<size_t>(rank / job.spec.tasks_per_node);
  if (node_rank >= rec->nodes.size()) return Errorf(ErrorCode::kInternal, "job {} attempt {} has no node for rank {}", id, attempt, rank);
  LogLocation loc;
  loc.node = rec->nodes[node_rank];
  auto n = nodes_.find(loc.node);
  if (n == nodes_.end()) return Errorf(ErrorCode::kInternal, "node {} of job {} is unknown", loc.node, id);
  loc.agent_url = n->second.agent_url;
  loc.node_down = n->second.state == NodeState::kDown;
  loc.task_finished = rec->end_ms != 0 || api::IsTerminal(job.state) ||
                      (attempt == job.attempt && job.HasExit(rank));
  return loc;
}

Result<RendezvousScope> Cluster::RendezvousFor(const std::string& token) const {
  auto scope = COHORT_TRY(rendezvous_->Verify(token));
  std::lock_guard lock(mu_);
  auto it = jobs_.find(scope.job);
  if (it == jobs_.end() || it->second.state != JobState::kRunning || it->second.attempt != scope.attempt) {
    return Errorf(ErrorCode::kNotFound, "job {} attempt {} is not running; its rendezvous keys are gone", scope.job,
                  scope.attempt);
  }
  return scope;
}

}  // namespace cohort::head
