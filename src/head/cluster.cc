// Cluster: the locked shell. Each public method takes the lock, reads the clock, calls one
// transition or query of the core, and performs its effects (Apply).
#include "head/cluster.h"

#include <charconv>

#include "common/log.h"
#include "head/core/agents.h"
#include "head/core/arrays.h"
#include "head/core/drain.h"
#include "head/core/liveness.h"
#include "head/core/remove_node.h"
#include "head/core/schedule.h"
#include "head/core/shares.h"
#include "head/core/submit.h"
#include "head/core/teams.h"
#include "head/core/timing.h"
#include "head/usage.h"

namespace cohort::head {

using api::Job;
using api::JobId;

Cluster::Cluster(HeadConfig config, std::unique_ptr<store::StateStore> store)
    : config_(std::move(config)), store_(std::move(store)) {}

Result<std::optional<std::string>> Cluster::GetMeta(const std::string& key) { return store_->GetMeta(key); }

Result<void> Cluster::PutMeta(const std::string& key, const std::string& value) {
  store::WriteBatch batch;
  batch.meta.emplace_back(key, value);
  return store_->Write(batch);
}

Result<std::unique_ptr<Cluster>> Cluster::Open(HeadConfig config, std::unique_ptr<store::StateStore> store) {
  COHORT_TRY_VOID(core::ValidateUnhealthyZoneThreshold(config.unhealthy_zone_threshold));
  COHORT_TRY_VOID(core::ValidateHeartbeatRateTarget(config.heartbeat_rate_target));
  COHORT_TRY_VOID(core::ValidateSharesConfig(config.shares));
  std::unique_ptr<Cluster> c(new Cluster(std::move(config), std::move(store)));
  MutexLock lock(c->mu_);
  COHORT_TRY_VOID(c->Load());
  return c;
}

Result<void> Cluster::Load() {
  // The rendezvous secret outlives head restarts, so running jobs' tokens stay valid.
  auto secret = COHORT_TRY(store_->GetMeta("rendezvous_secret"));
  if (!secret) {
    secret = NewRendezvousSecret();
    store::WriteBatch batch;
    batch.meta.emplace_back("rendezvous_secret", *secret);
    COHORT_TRY_VOID(store_->Write(batch));
  }
  rendezvous_ = std::make_unique<RendezvousStore>(*secret);
  context_.base_timing = config_.timing;
  context_.heartbeat_rate_target = config_.heartbeat_rate_target;
  context_.head_url = config_.advertise_url;
  context_.ca_pem = config_.task_ca_pem;
  context_.checkpoint_root = config_.checkpoint_root;
  context_.liveness_interval_ms = config_.liveness_interval_ms;
  context_.unhealthy_zone_threshold = config_.unhealthy_zone_threshold;
  context_.rendezvous_token = [r = rendezvous_.get()](JobId job, int attempt) { return r->Token(job, attempt); };
  context_.job_token = [r = rendezvous_.get()](JobId job, int attempt) { return r->JobToken(job, attempt); };
  context_.latest_progress = [p = &progress_](JobId job, int attempt) { return p->LatestOfAttempt(job, attempt); };
  context_.newest_checkpoint = [p = &progress_](JobId job) { return p->NewestCheckpoint(job); };
  context_.shares = config_.shares;
  context_.job_limits = {config_.max_jobs_per_user, config_.max_jobs};

  auto nodes = COHORT_TRY(store_->LoadNodes());
  auto jobs = COHORT_TRY(store_->LoadJobs());
  const core::Now now = Now();
  state_ = core::LoadState(std::move(nodes), std::move(jobs), now);
  if (auto teams = COHORT_TRY(store_->GetMeta(core::kTeamsMeta))) {
    auto parsed = ParseJson(*teams, "the stored teams");
    if (!parsed) return std::unexpected(parsed.error());
    auto list = api::TeamsFromJson(*parsed);
    if (!list) return std::unexpected(WithContext(list.error(), "the stored teams"));
    core::LoadTeams(state_, std::move(*list));
  }
  core::RebuildUsage(state_, context_, now);  // fair share: from the jobs' attempt history
  // Agents may still hold leases granted under a longer timing than this run's (a higher
  // target or a shorter base now): every node is held to it for one such timeout.
  if (auto granted = COHORT_TRY(store_->GetMeta(core::kGrantedFailureTimeoutMeta))) {
    int64_t ms = 0;
    auto [end, ec] = std::from_chars(granted->data(), granted->data() + granted->size(), ms);
    if (ec == std::errc() && end == granted->data() + granted->size()) {
      stored_granted_failure_ms_ = ms;
      core::AdoptGrantedBeforeRestart(state_, ms, now);
    } else {
      LOG_WARN("ignoring a malformed {} in the state store: '{}'", core::kGrantedFailureTimeoutMeta, *granted);
    }
  }
  const api::AgentTiming timing = core::CurrentTiming(state_, context_);
  if (timing.heartbeat_interval_ms != config_.timing.heartbeat_interval_ms) {
    LOG_INFO("{} nodes at a heartbeat rate target of {}/s: agents heartbeat every {} (failure timeout {}, fence "
             "timeout {})",
             state_.nodes.size(), context_.heartbeat_rate_target, FormatDuration(timing.heartbeat_interval_ms),
             FormatDuration(timing.failure_timeout_ms), FormatDuration(timing.fence_timeout_ms));
  }
  LOG_INFO("loaded {} nodes and {} jobs ({} pending, {} running) from the state store", state_.nodes.size(),
           state_.jobs.size(), state_.pending.size(), core::RunningJobIds(state_).size());
  return {};
}

core::Now Cluster::Now() {
  return {NowUnixMs(), std::chrono::duration_cast<Millis>(SteadyClock::now().time_since_epoch()).count()};
}

Cluster::Wakes::~Wakes() {
  if (!urls.empty() && cluster_.wake_agents_) cluster_.wake_agents_({urls.begin(), urls.end()});
}

void Cluster::Stage(core::Effects fx, Wakes& wakes) {
  for (const auto& line : fx.log) {
    switch (line.level) {
      case core::LogLevel::kInfo: LOG_INFO("{}", line.text); break;
      case core::LogLevel::kWarn: LOG_WARN("{}", line.text); break;
      case core::LogLevel::kError: LOG_ERROR("{}", line.text); break;
    }
  }
  for (JobId id : fx.drop_rendezvous) rendezvous_->DropJob(id);
  for (double s : fx.queue_wait_seconds) queue_wait_seconds_.Observe(s);
  wakes.urls.merge(fx.wake);
  for (JobId id : fx.jobs_to_store) {
    serialized_jobs_.erase(id);
    if (api::IsTerminal(state_.jobs.at(id).state)) {
      job_revisions_.erase(id);  // never serialized again (ListJobsSerialized keeps active jobs)
    } else {
      ++job_revisions_[id];
    }
  }
  if (fx.teams_changed) unstored_teams_ = true;
  if (!fx.jobs_to_store.empty() || !fx.nodes_to_store.empty() || !fx.nodes_to_remove.empty() || fx.teams_changed) {
    unstored_jobs_.merge(fx.jobs_to_store);
    // A node stored after its removal (it joined again) is written, not deleted; one
    // removed after a change is deleted, not written.
    for (const auto& name : fx.nodes_to_store) removed_nodes_.erase(name);
    unstored_nodes_.merge(fx.nodes_to_store);
    for (const auto& name : fx.nodes_to_remove) {
      unstored_nodes_.erase(name);
      removed_nodes_.insert(name);
    }
    ++staged_seq_;
  }
  if (fx.schedule) {
    schedule_requested_ = true;
    work_cv_.NotifyAll();
  }
}

Result<void> Cluster::Apply(core::Effects fx, Wakes& wakes) {
  Stage(std::move(fx), wakes);
  return Durable(staged_seq_, wakes);
}

Result<void> Cluster::Durable(uint64_t seq, Wakes& wakes) {
  while (durable_seq_ < seq) {
    if (!committing_) {
      // Lead: this round takes everything staged so far, `seq` included.
      auto r = CommitRound(wakes);
      if (!r) return r;
      continue;
    }
    // Wait for the round under way; it covers `seq` only if it began after `seq` was staged.
    const uint64_t round = rounds_;
    while (rounds_ == round) commit_cv_.Wait(mu_);
    if (durable_seq_ < seq && last_round_error_ && last_round_seq_ >= seq) return std::unexpected(*last_round_error_);
  }
  return {};
}

Result<void> Cluster::CommitRound(Wakes& wakes) {
  committing_ = true;
  const uint64_t round_seq = staged_seq_;
  std::vector<Creation*> creations;
  creations.swap(creations_);
  std::set<JobId> jobs;
  jobs.swap(unstored_jobs_);
  std::set<std::string> nodes;
  nodes.swap(unstored_nodes_);
  std::set<std::string> removed;
  removed.swap(removed_nodes_);
  store::WriteBatch batch;
  // The failure timeout granted to agents goes with the first commit after it changes.
  const int64_t granted = core::CurrentTiming(state_, context_).failure_timeout_ms;
  if (granted != stored_granted_failure_ms_) batch.meta.emplace_back(core::kGrantedFailureTimeoutMeta, std::to_string(granted));
  for (Creation* c : creations) batch.create.push_back(c->job);
  for (JobId id : jobs) batch.jobs.push_back(state_.jobs.at(id));
  for (const auto& name : nodes) {
    // Kept for retry by a failed round, then removed: its deletion is staged instead.
    if (auto it = state_.nodes.find(name); it != state_.nodes.end()) batch.nodes.push_back(it->second);
  }
  batch.remove_nodes.assign(removed.begin(), removed.end());
  const bool teams = unstored_teams_;
  unstored_teams_ = false;
  if (teams) batch.meta.emplace_back(core::kTeamsMeta, api::TeamsToJson(core::ListTeams(state_)).dump());

  // The write, without the lock: transitions go on and stage for the next round.
  mu_.Unlock();
  const auto t0 = SteadyClock::now();
  Result<std::vector<JobId>> ids = store_->Commit(batch);
  const auto took = SteadyClock::now() - t0;
  mu_.Lock();

  store_commit_seconds_.Observe(std::chrono::duration<double>(took).count());
  WarnIfLagging(fmt::format("a state store commit ({} new jobs, {} jobs, {} nodes)", batch.create.size(),
                            batch.jobs.size(), batch.nodes.size()),
                took, "replies waited for it");
  Result<void> out;
  if (ids) {
    durable_seq_ = std::max(durable_seq_, round_seq);
    last_round_error_.reset();
    stored_granted_failure_ms_ = granted;
    const core::Now now = Now();
    for (size_t i = 0; i < creations.size(); ++i) {
      Job job = std::move(creations[i]->job);
      job.id = (*ids)[i];
      creations[i]->result = job;
      Stage(core::AddJob(state_, context_, std::move(job), now), wakes);
    }
  } else {
    LOG_ERROR("state store commit failed ({} new jobs not created; {} jobs, {} nodes kept for retry): {}",
              batch.create.size(), batch.jobs.size(), batch.nodes.size(), ids.error().ToString());
    unstored_jobs_.merge(jobs);
    unstored_nodes_.merge(nodes);
    unstored_teams_ = unstored_teams_ || teams;
    for (const auto& name : removed) {
      if (!state_.nodes.contains(name)) removed_nodes_.insert(name);  // unless it joined again meanwhile
    }
    for (Creation* c : creations) {
      c->result = MakeError(ErrorCode::kUnavailable, "cannot store the job: " + ids.error().message);
      core::DropNewJob(state_, c->job);  // never stored: not open
    }
    last_round_error_ = ids.error();
    out = std::unexpected(ids.error());
  }
  SettleArrayCreations(wakes);
  last_round_seq_ = round_seq;
  ++rounds_;
  committing_ = false;
  commit_cv_.NotifyAll();
  return out;
}

void Cluster::WarnIfLagging(std::string_view what, SteadyClock::duration took, std::string_view consequence) const {
  const int64_t ms = std::chrono::duration_cast<Millis>(took).count();
  if (ms < core::LagThresholdMs(config_.timing)) return;
  LOG_WARN("{} took {}: {}", what, FormatDuration(ms), consequence);
}

// ---- users ----

Result<Job> Cluster::Submit(api::JobSpec spec, bool any_team, const std::string& hold_by) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  COHORT_TRY_VOID(core::ResolveTeam(state_, spec, any_team));
  Creation c{COHORT_TRY(core::AcceptJob(state_, context_, std::move(spec), Now())), std::nullopt};
  if (!hold_by.empty()) {
    c.job.held = true;  // stored held: the scheduler never sees it unheld
    c.job.held_by = hold_by;
  }
  creations_.push_back(&c);
  // Every round that covers this seq took `c` and set its result, success or not.
  (void)Durable(++staged_seq_, wakes);
  if (!c.result) return MakeError(ErrorCode::kInternal, "the job's commit ended without a result");
  return std::move(*c.result);
}

Result<Job> Cluster::Cancel(JobId id) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Effects fx = COHORT_TRY(core::Cancel(state_, context_, id, Now()));
  auto stored = Apply(std::move(fx), wakes);
  Job out = state_.jobs.at(id);
  if (!stored) return std::unexpected(stored.error());
  LOG_INFO("job {} cancelled", id);
  return out;
}

Result<Job> Cluster::GetJob(JobId id) const {
  MutexLock lock(mu_);
  return core::GetJob(state_, id);
}

std::vector<Job> Cluster::ListJobs(const JobFilter& filter) const {
  MutexLock lock(mu_);
  return core::ListJobs(state_, filter);
}

std::vector<Cluster::ListedJob> Cluster::ListJobsSerialized(const JobFilter& filter, int64_t now_ms) const {
  struct Miss {
    size_t index;
    Job job;  // as shown
    uint64_t revision;
  };
  std::vector<ListedJob> out;
  std::vector<Miss> misses;
  {
    MutexLock lock(mu_);
    core::VisitJobs(state_, filter, [&](const Job& j) {
      mu_.AssertHeld();  // the lambda runs inside VisitJobs, under the lock above
      const std::string& reason = core::ShownReason(state_, j);
      ListedJob item;
      item.id = j.id;
      item.gpu_seconds = JobGpuSeconds(j, now_ms);
      item.running = j.state == api::JobState::kRunning;
      item.attempt = j.attempt;
      const auto rev = job_revisions_.find(j.id);
      const uint64_t revision = rev == job_revisions_.end() ? 0 : rev->second;
      if (auto c = serialized_jobs_.find(j.id);
          c != serialized_jobs_.end() && c->second.revision == revision && c->second.reason == reason) {
        item.json = c->second.json;
      } else {
        Job shown = j;
        shown.reason = reason;
        misses.push_back({out.size(), std::move(shown), revision});
      }
      out.push_back(std::move(item));
    });
  }
  // Serialized without the lock; kept if the job is still active and unchanged.
  for (auto& m : misses) {
    out[m.index].json = std::make_shared<const std::string>(
        api::ToJson(m.job).dump(-1, ' ', false, json::error_handler_t::replace));
  }
  if (!misses.empty()) {
    MutexLock lock(mu_);
    for (const auto& m : misses) {
      auto j = state_.jobs.find(m.job.id);
      if (j == state_.jobs.end() || api::IsTerminal(j->second.state)) continue;
      const auto rev = job_revisions_.find(m.job.id);
      if ((rev == job_revisions_.end() ? 0 : rev->second) != m.revision) continue;
      if (core::ShownReason(state_, j->second) != m.job.reason) continue;
      serialized_jobs_[m.job.id] = {m.revision, m.job.reason, out[m.index].json};
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<NodeStatus> Cluster::ListNodes(const std::string& after, size_t limit) const {
  MutexLock lock(mu_);
  const core::Now now = Now();
  std::vector<NodeStatus> out;
  auto it = after.empty() ? state_.nodes.begin() : state_.nodes.upper_bound(after);
  for (; it != state_.nodes.end() && (limit == 0 || out.size() < limit); ++it) {
    out.push_back(core::StatusOf(state_, it->second, now));
  }
  return out;
}

size_t Cluster::NodeCount() const {
  MutexLock lock(mu_);
  return state_.nodes.size();
}

Result<NodeStatus> Cluster::GetNode(const std::string& name) const {
  MutexLock lock(mu_);
  auto it = state_.nodes.find(name);
  if (it == state_.nodes.end()) return Errorf(ErrorCode::kNotFound, "node '{}' not found", name);
  return core::StatusOf(state_, it->second, Now());
}

Result<NodeStatus> Cluster::Drain(const std::string& name, std::string reason, bool now_flag, int64_t timeout_ms) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  const core::Now now = Now();
  core::Effects fx = COHORT_TRY(core::Drain(state_, context_, name, std::move(reason), now_flag, timeout_ms, now));
  // The drain and its move requests are stored before the reply: a head restarted after
  // it still moves the jobs.
  auto stored = Apply(std::move(fx), wakes);
  // The status as of now, not of `now`: Apply lets go of the lock while the store commits,
  // and a heartbeat handled meanwhile is younger than `now` (an age of -2 ms, which the
  // CLI refuses as a malformed node).
  NodeStatus status = core::StatusOf(state_, state_.nodes.at(name), Now());
  if (!stored) return std::unexpected(stored.error());
  return status;
}

bool Cluster::ReportProgress(const RendezvousScope& scope, ProgressPoint point) {
  point.attempt = scope.attempt;
  const std::optional<int64_t> checkpoint = point.checkpoint_step;
  const int64_t step = point.step;
  const std::optional<double> loss = point.loss;
  progress_.Add(scope.job, std::move(point));
  Wakes wakes(*this);
  MutexLock lock(mu_);
  Stage(core::OnSweepProgress(state_, context_, scope.job, step, loss, Now()), wakes);  // ASHA (core/arrays.h)
  core::ProgressResult r = core::OnProgress(state_, context_, scope.job, scope.attempt, checkpoint, Now());
  (void)Apply(std::move(r.effects), wakes);
  return r.checkpoint;
}

Result<NodeStatus> Cluster::Resume(const std::string& name) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  const core::Now now = Now();
  core::Effects fx = COHORT_TRY(core::Resume(state_, context_, name, now));
  COHORT_TRY_VOID(Apply(std::move(fx), wakes));
  return core::StatusOf(state_, state_.nodes.at(name), Now());  // after Apply, as in Drain
}

Result<void> Cluster::CheckRemovable(const std::string& name, bool force) const {
  MutexLock lock(mu_);
  return core::CanRemoveNode(state_, context_, name, force, Now());
}

Result<NodeStatus> Cluster::RemoveNode(const std::string& name, bool force) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  const core::Now now = Now();
  auto it = state_.nodes.find(name);
  if (it == state_.nodes.end()) return Errorf(ErrorCode::kNotFound, "node '{}' not found", name);
  NodeStatus was = core::StatusOf(state_, it->second, now);
  core::Effects fx = COHORT_TRY(core::RemoveNode(state_, context_, name, force, now));
  told_.erase(name);
  COHORT_TRY_VOID(Apply(std::move(fx), wakes));
  return was;
}

Result<LogLocation> Cluster::LocateLog(JobId id, int attempt, int rank) const {
  MutexLock lock(mu_);
  return core::LocateLog(state_, id, attempt, rank);
}

// ---- teams and fair share ----

Result<api::Team> Cluster::CreateTeam(api::Team team) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  const std::string name = team.name;
  core::Effects fx = COHORT_TRY(core::CreateTeam(state_, context_, std::move(team), Now()));
  COHORT_TRY_VOID(Apply(std::move(fx), wakes));
  return state_.shares.teams.at(name);
}

Result<api::Team> Cluster::UpdateTeam(const std::string& name, const api::TeamPatch& patch) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Effects fx = COHORT_TRY(core::UpdateTeam(state_, context_, name, patch, Now()));
  COHORT_TRY_VOID(Apply(std::move(fx), wakes));
  return state_.shares.teams.at(name);
}

Result<void> Cluster::RemoveTeam(const std::string& name) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Effects fx = COHORT_TRY(core::RemoveTeam(state_, context_, name, Now()));
  return Apply(std::move(fx), wakes);
}

std::vector<api::Team> Cluster::ListTeams() const {
  MutexLock lock(mu_);
  return core::ListTeams(state_);
}

Result<api::Team> Cluster::GetTeam(const std::string& name) const {
  MutexLock lock(mu_);
  auto it = state_.shares.teams.find(name);
  if (it == state_.shares.teams.end()) return Errorf(ErrorCode::kNotFound, "team '{}' not found", name);
  return it->second;
}

api::SharesReport Cluster::Shares() const {
  MutexLock lock(mu_);
  return core::Shares(state_, context_, Now());
}

api::PriorityReport Cluster::Priorities() const {
  MutexLock lock(mu_);
  return core::Priorities(state_, context_, Now());
}

// ---- agents ----

Result<api::AgentTiming> Cluster::Register(const api::Registration& reg) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  const api::AgentTiming before = core::CurrentTiming(state_, context_);
  core::RegisterResult r = COHORT_TRY(core::Register(state_, context_, reg, Now()));
  told_.erase(reg.name);  // a new agent process was told nothing yet
  if (r.timing.heartbeat_interval_ms != before.heartbeat_interval_ms) {
    LOG_INFO("{} nodes at a heartbeat rate target of {}/s: agents now heartbeat every {} (failure timeout {}, fence "
             "timeout {})",
             state_.nodes.size(), context_.heartbeat_rate_target, FormatDuration(r.timing.heartbeat_interval_ms),
             FormatDuration(r.timing.failure_timeout_ms), FormatDuration(r.timing.fence_timeout_ms));
  }
  auto stored = Apply(std::move(r.effects), wakes);
  if (!stored) return MakeError(ErrorCode::kUnavailable, "cannot store the node: " + stored.error().message);
  return r.timing;
}

Result<api::HeartbeatReply> Cluster::Heartbeat(const std::string& name, const api::Heartbeat& hb,
                                               std::string* text_out) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::HeartbeatResult r = COHORT_TRY(core::Heartbeat(state_, context_, name, hb, Now()));
  const uint64_t before = staged_seq_;
  Stage(std::move(r.effects), wakes);
  // A reply goes out once what it says is durable. What must be: the heartbeat's own records
  // (exits are acknowledged only once stored: on failure the agent repeats them), and, when
  // the reply tells the agent anything the last reply to this agent did not, everything
  // staged so far (its tasks, versions and timing come from there). A reply that repeats the
  // last one needs no commit: the agent acts on nothing new, and what it acts on was durable
  // when it was first told. So a steady heartbeat is not held behind other records' commits,
  // whose fsyncs a loaded disk can stretch past the lease the reply renews.
  std::string text = api::ToJson(r.reply).dump(-1, ' ', false, json::error_handler_t::replace);
  Told& told = told_[name];
  const bool same = told.incarnation == hb.incarnation && told.reply == text;
  const uint64_t need = !same ? staged_seq_ : staged_seq_ > before ? staged_seq_ : 0;
  auto stored = Durable(need, wakes);
  if (!stored) return MakeError(ErrorCode::kUnavailable, "cannot store task exits: " + stored.error().message);
  if (!same) told_[name] = Told{hb.incarnation, text};  // mu_ was released: look again
  if (text_out != nullptr) *text_out = std::move(text);
  return std::move(r.reply);
}

// ---- control loop ----

void Cluster::CheckLiveness() {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  (void)Apply(core::CheckLiveness(state_, context_, Now()), wakes);
}

void Cluster::CheckProgress(int64_t now_ms) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Now now = Now();
  now.unix_ms = now_ms;
  (void)Apply(core::CheckProgress(state_, context_, now), wakes);
}

int Cluster::Schedule() {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  auto t0 = SteadyClock::now();
  schedule_requested_ = false;
  StageArrayElements(wakes);  // job arrays: elements to make, arrays to end
  core::PassResult pass = core::Schedule(state_, context_, Now());
  if (!pass.ran) {
    Stage(std::move(pass.effects), wakes);  // nominations pruned with nothing to place, if any
    (void)Durable(staged_seq_, wakes);      // and the arrays' changes, if any
    return 0;
  }
  Stage(std::move(pass.effects), wakes);
  // The pass's own time, under the lock; its commit is timed with the store's.
  const auto took = SteadyClock::now() - t0;
  last_pass_ = std::chrono::duration_cast<Millis>(took);
  pass_seconds_.Observe(std::chrono::duration<double>(took).count());
  WarnIfLagging(fmt::format("a scheduling pass ({} started)", pass.started), took,
                "heartbeats waited for the head's lock meanwhile");
  (void)Durable(staged_seq_, wakes);
  return pass.started;
}

bool Cluster::schedule_requested() const {
  MutexLock lock(mu_);
  return schedule_requested_;
}

void Cluster::WaitForWork(Millis timeout) {
  MutexLock lock(mu_);
  work_cv_.WaitFor(mu_, timeout, [&] {
    mu_.AssertHeld();
    return schedule_requested_;
  });
}

void Cluster::ObserveControlLoopLateness(Millis lateness) {
  loop_lateness_seconds_.Observe(std::chrono::duration<double>(lateness).count());
}

Millis Cluster::last_pass_duration() const {
  MutexLock lock(mu_);
  return last_pass_;
}

// ---- rendezvous and observability ----

Result<RendezvousScope> Cluster::RendezvousFor(const std::string& token) const {
  auto scope = COHORT_TRY(rendezvous_->Verify(token));
  MutexLock lock(mu_);
  if (!core::CurrentAttempt(state_, scope.job, scope.attempt)) {
    return Errorf(ErrorCode::kNotFound, "job {} attempt {} is not running; its rendezvous keys are gone", scope.job,
                  scope.attempt);
  }
  return scope;
}

Result<Cluster::JobTokenScope> Cluster::JobTokenOwner(std::string_view token) const {
  auto scope = COHORT_TRY(rendezvous_->VerifyJobToken(token));
  MutexLock lock(mu_);
  const api::Job* job = core::CurrentAttempt(state_, scope.job, scope.attempt);
  if (job == nullptr) {
    return Errorf(ErrorCode::kUnauthenticated, "the token of job {} attempt {} ended with that attempt", scope.job,
                  scope.attempt);
  }
  return JobTokenScope{scope, job->spec.user};
}

ClusterMetrics Cluster::Metrics() const {
  ClusterMetrics m;
  {
    MutexLock lock(mu_);
    m = core::Metrics(state_, Now());
  }
  m.pass_seconds = pass_seconds_.Snapshot();
  m.queue_wait_seconds = queue_wait_seconds_.Snapshot();
  m.control_loop_lateness_seconds = loop_lateness_seconds_.Snapshot();
  m.store_commit_seconds = store_commit_seconds_.Snapshot();
  return m;
}

Cluster::Overview Cluster::GetOverview(size_t recent) const {
  Overview o;
  MutexLock lock(mu_);
  const core::Now now = Now();
  for (const auto& [name, node] : state_.nodes) o.nodes.push_back(core::StatusOf(state_, node, now));
  o.pending = core::ListJobs(state_, JobFilter{{api::JobState::kPending}, "", 0});
  o.running = core::ListJobs(state_, JobFilter{{api::JobState::kRunning}, "", 0});
  if (recent > 0) {
    o.recent = core::ListJobs(
        state_, JobFilter{{api::JobState::kSucceeded, api::JobState::kFailed, api::JobState::kCancelled,
                             api::JobState::kTimeout},
                            "",
                            recent});
  }
  o.usage = core::RunningTaskUsage(state_);
  o.queue_order = state_.queue_order;
  return o;
}

std::map<JobId, std::vector<TaskUsage>> Cluster::RunningTaskUsage() const {
  MutexLock lock(mu_);
  return core::RunningTaskUsage(state_);
}

}  // namespace cohort::head
