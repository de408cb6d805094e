#include "head/core/shares.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "api/gpu_request.h"
#include "api/gpu_spec.h"
#include "head/core/schedule.h"
#include "head/core/teams.h"
#include "sched/fair_share.h"
#include "sched/quota.h"

namespace cohort::head::core {

using api::Job;
using api::JobState;

namespace {

// Below this many decayed GPU-seconds a team without jobs no longer counts in the shares.
constexpr double kForgottenUsage = 1.0;

// GPUs the current attempt holds: a sharing job its parts of them (half a GPU accrues
// half the GPU-seconds).
double AllocatedGpus(const Job& job) {
  int64_t units = 0;
  for (const auto& na : job.allocation.nodes) units += api::AllocationShareUnits(job.spec, na);
  return static_cast<double>(units) / api::kGpuShareUnits;
}

// The end of attempt `attempt` of `job` as its history records it; 0 if not closed.
int64_t AttemptEnd(const Job& job, int attempt) {
  for (auto it = job.history.rbegin(); it != job.history.rend(); ++it) {
    if (it->attempt == attempt) return it->end_ms;
  }
  return 0;
}

// Brings `usage` and `accounted` from `accrued_ms` to `now_ms` (see shares.h).
void Accrue(const ClusterState& s, int64_t half_life_ms, int64_t now_ms, std::map<std::string, double>& usage,
            std::map<api::JobId, ShareState::Accounted>& accounted, int64_t& accrued_ms) {
  const int64_t from = accrued_ms == 0 ? now_ms : accrued_ms;
  if (now_ms < from) return;  // the wall clock went back: accrue again once it passes `from`
  for (auto& [team, u] : usage) u = sched::DecayUsage(u, now_ms - from, half_life_ms);
  for (auto it = accounted.begin(); it != accounted.end();) {
    const auto job = s.jobs.find(it->first);
    const ShareState::Accounted& a = it->second;
    const bool running = job != s.jobs.end() && job->second.state == JobState::kRunning &&
                         job->second.attempt == a.attempt;
    int64_t end = now_ms;
    if (!running) {
      const int64_t ended = job == s.jobs.end() ? 0 : AttemptEnd(job->second, a.attempt);
      end = ended > 0 ? std::clamp(ended, from, now_ms) : from;
    }
    usage[a.team] += sched::DecayedGpuSeconds(a.gpus, from, end, now_ms, half_life_ms);
    it = running ? std::next(it) : accounted.erase(it);
  }
  // Attempts started since (in the last pass), from their start.
  for (const auto& [node, ids] : s.node_jobs) {
    for (api::JobId id : ids) {
      if (accounted.contains(id)) continue;
      const Job& job = s.jobs.at(id);
      ShareState::Accounted a{job.attempt, AllocatedGpus(job), std::string(TeamOf(job))};
      usage[a.team] += sched::DecayedGpuSeconds(a.gpus, std::max(from, job.start_ms), now_ms, now_ms, half_life_ms);
      accounted.emplace(id, std::move(a));
    }
  }
  accrued_ms = now_ms;
}

// The teams the shares are computed over: every created team, and every team with jobs
// now or usage that has not decayed away, with its usage as of `now_ms`.
std::vector<sched::TeamView> TeamViews(const ClusterState& s, const Context& ctx, int64_t now_ms) {
  const std::map<std::string, double> usage = UsageAsOf(s, ctx, now_ms);
  std::set<std::string> names;
  for (const auto& [name, t] : s.shares.teams) names.insert(name);
  for (const auto& [name, u] : usage) {
    if (u >= kForgottenUsage) names.insert(name);
  }
  for (api::JobId id : s.pending) names.insert(std::string(TeamOf(s.jobs.at(id))));
  for (const auto& [node, ids] : s.node_jobs) {
    for (api::JobId id : ids) names.insert(std::string(TeamOf(s.jobs.at(id))));
  }
  std::vector<sched::TeamView> out;
  out.reserve(names.size());
  for (const auto& name : names) {
    const api::Team t = TeamOrImplicit(s.shares, name);
    sched::TeamView v;
    v.name = name;
    v.weight = t.weight;
    v.quota_gpus = t.quota_gpus;
    v.borrow_limit_gpus = t.borrow_limit_gpus.value_or(-1);
    auto u = usage.find(name);
    v.usage_gpu_s = u == usage.end() ? 0 : u->second;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

void RebuildUsage(ClusterState& s, const Context& ctx, Now now) {
  ShareState& sh = s.shares;
  sh.usage.clear();
  sh.accounted.clear();
  const int64_t h = ctx.shares.half_life_ms;
  const int64_t t = now.unix_ms;
  for (const auto& [id, job] : s.jobs) {
    const std::string team(TeamOf(job));
    // Removing a team forgets its usage (RemoveTeam): the jobs of a team that no longer
    // exists count nowhere, and a team created again under that name counts only what ran
    // since, as the head that removed it did. `default` is never forgotten.
    int64_t counted_from = 0;
    if (team != api::kDefaultTeam) {
      auto created = sh.teams.find(team);
      if (created == sh.teams.end()) continue;
      counted_from = created->second.created_ms;
    }
    for (const auto& rec : job.history) {
      if (rec.start_ms <= 0) continue;
      const double gpus = api::AttemptGpuAmount(job.spec, rec);
      if (job.state == JobState::kRunning && rec.attempt == job.attempt && rec.end_ms == 0) {
        sh.accounted[id] = {job.attempt, AllocatedGpus(job), team};
        sh.usage[team] += sched::DecayedGpuSeconds(sh.accounted[id].gpus, std::min(rec.start_ms, t), t, t, h);
        continue;
      }
      if (rec.end_ms <= 0) continue;
      sh.usage[team] += sched::DecayedGpuSeconds(gpus, std::max(rec.start_ms, counted_from), std::min(rec.end_ms, t),
                                                 t, h);
    }
  }
  sh.accrued_ms = t;
}

void AccrueUsage(ClusterState& s, const Context& ctx, Now now) {
  Accrue(s, ctx.shares.half_life_ms, now.unix_ms, s.shares.usage, s.shares.accounted, s.shares.accrued_ms);
}

std::map<std::string, double> UsageAsOf(const ClusterState& s, const Context& ctx, int64_t now_ms) {
  std::map<std::string, double> usage = s.shares.usage;
  std::map<api::JobId, ShareState::Accounted> accounted = s.shares.accounted;
  int64_t accrued = s.shares.accrued_ms;
  Accrue(s, ctx.shares.half_life_ms, now_ms, usage, accounted, accrued);
  return usage;
}

void AddShares(const ClusterState& s, const Context& ctx, Now now, sched::Snapshot& snap) {
  sched::SharePolicy policy;
  policy.weights = ctx.shares.weights;
  policy.preemption = ctx.shares.preemption;
  // A node not yet heard since a restart takes no work this pass (schedule.h), though its
  // GPUs may be free: preempting now could take a job's GPUs for one that would find free
  // ones there a heartbeat later. Preemption waits for every node to report in.
  for (const auto& [name, rt] : s.runtime) {
    if (!rt.reported_since_load && s.nodes.contains(name) && s.nodes.at(name).state != api::NodeState::kDown) {
      policy.preemption.enabled = false;
    }
  }
  policy.teams = TeamViews(s, ctx, now.unix_ms);
  for (sched::RunningJob& r : snap.running) {
    const Job& job = s.jobs.at(r.id);
    r.team = std::string(TeamOf(job));
    r.priority = job.spec.priority;
    r.start_ms = job.start_ms;
    r.checkpoint_ms = job.start_ms;
    if (job.last_checkpoint && job.last_checkpoint->attempt == job.attempt) {
      r.checkpoint_ms = std::max(r.checkpoint_ms, job.last_checkpoint->reported_ms);
    }
    r.preemptible = !job.move.has_value();
    if (job.move) {
      r.preempting_for = job.move->preempted_for;
      // Its GPUs come back by the move's deadline at the latest.
      if (job.move->deadline_ms > 0) r.end_ms = std::min(r.end_ms, job.move->deadline_ms);
    }
  }
  for (sched::JobRequest& p : snap.pending) {
    const Job& job = s.jobs.at(p.id);
    p.team = std::string(TeamOf(job));
    if (job.nomination) {
      p.nominated = true;
      p.nominated_nodes = job.nomination->nodes;
    }
    for (const auto& rec : job.preemptions) p.preempted_by.push_back(rec.by_job);
  }
  snap.shares = std::move(policy);
}

api::SharesReport Shares(const ClusterState& s, const Context& ctx, Now now) {
  api::SharesReport out;
  out.now_ms = now.unix_ms;
  out.half_life_ms = ctx.shares.half_life_ms;
  const std::vector<sched::TeamView> views = TeamViews(s, ctx, now.unix_ms);
  const std::vector<sched::TeamStanding> standings = sched::FairShares(views);
  std::map<std::string, int64_t, std::less<>> units;
  std::map<std::string, int, std::less<>> running, pending;
  for (const auto& [node, ids] : s.node_jobs) {
    for (api::JobId id : ids) {
      const Job& job = s.jobs.at(id);
      for (const auto& na : job.allocation.nodes) {
        if (na.node == node) units[std::string(TeamOf(job))] += api::AllocationShareUnits(job.spec, na);
      }
    }
  }
  for (api::JobId id : RunningJobIds(s)) ++running[std::string(TeamOf(s.jobs.at(id)))];
  for (api::JobId id : s.pending) ++pending[std::string(TeamOf(s.jobs.at(id)))];
  for (size_t i = 0; i < views.size(); ++i) {
    const sched::TeamView& v = views[i];
    const api::Team t = TeamOrImplicit(s.shares, v.name);
    api::TeamShare row;
    row.name = v.name;
    row.implicit = !s.shares.teams.contains(v.name);
    row.weight = t.weight;
    row.share = standings[i].share;
    row.quota_gpus = t.quota_gpus;
    row.borrow_limit_gpus = t.borrow_limit_gpus;
    const auto g = units.find(v.name);
    row.gpus_in_use = g == units.end() ? 0 : static_cast<double>(g->second) / api::kGpuShareUnits;
    row.borrowed_gpus = std::max(0.0, row.gpus_in_use - static_cast<double>(t.quota_gpus));
    row.usage_gpu_hours = v.usage_gpu_s / 3600.0;
    row.usage_fraction = standings[i].usage_fraction;
    row.fair_share_factor = standings[i].factor;
    const auto r = running.find(v.name);
    row.running_jobs = r == running.end() ? 0 : r->second;
    const auto p = pending.find(v.name);
    row.pending_jobs = p == pending.end() ? 0 : p->second;
    out.teams.push_back(std::move(row));
  }
  return out;
}

api::PriorityReport Priorities(const ClusterState& s, const Context& ctx, Now now) {
  api::PriorityReport out;
  out.now_ms = now.unix_ms;
  const sched::PriorityWeights& w = ctx.shares.weights;
  out.weight_fair_share = w.fair_share;
  out.weight_age = w.age;
  out.weight_size = w.size;
  out.weight_job = w.job;
  SchedulerInput in = BuildSchedulerInput(s, now);
  // Jobs waiting for an earlier attempt to stop are not in the snapshot; rank them too.
  for (const auto& [id, reason] : in.stopping_reasons) in.snapshot.pending.push_back(ToRequest(s.jobs.at(id)));
  AddShares(s, ctx, now, in.snapshot);
  const sched::QuotaBook quotas(in.snapshot.shares->teams, in.snapshot.running);
  for (const sched::RankedJob& r : sched::RankQueue(in.snapshot, quotas)) {
    api::JobPriority p;
    p.id = r.job->id;
    p.user = s.jobs.at(p.id).spec.user;
    p.team = r.job->team;
    p.priority = r.factors.total;
    p.fair_share = r.factors.fair_share;
    p.age = r.factors.age;
    p.size = r.factors.size;
    p.job = r.factors.job;
    p.fair_share_points = w.fair_share * r.factors.fair_share;
    p.age_points = w.age * r.factors.age;
    p.size_points = w.size * r.factors.size;
    p.job_points = w.job * r.factors.job;
    p.queue_class = std::string(sched::QueueClassName(r.queue_class));
    out.jobs.push_back(std::move(p));
  }
  return out;
}

Result<void> ValidateSharesConfig(const SharesConfig& c) {
  const auto weight = [](std::string_view flag, double v) -> Result<void> {
    if (!std::isfinite(v) || v < 0 || v > 1e12) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: must be a number between 0 and 1e12, got {}", flag, v);
    }
    return {};
  };
  COHORT_TRY_VOID(weight("--priority-weight-fairshare", c.weights.fair_share));
  COHORT_TRY_VOID(weight("--priority-weight-age", c.weights.age));
  COHORT_TRY_VOID(weight("--priority-weight-size", c.weights.size));
  COHORT_TRY_VOID(weight("--priority-weight-job", c.weights.job));
  if (c.weights.max_age_ms <= 0) {
    return Errorf(ErrorCode::kInvalidArgument, "--priority-max-age: must be positive, got {} ms", c.weights.max_age_ms);
  }
  if (c.half_life_ms <= 0) {
    return Errorf(ErrorCode::kInvalidArgument, "--fairshare-half-life: must be positive, got {} ms", c.half_life_ms);
  }
  if (c.preemption.min_runtime_ms < 0) {
    return Errorf(ErrorCode::kInvalidArgument, "--preempt-min-runtime: must be at least 0, got {} ms",
                  c.preemption.min_runtime_ms);
  }
  if (c.preempt_grace_ms <= 0) {
    return Errorf(ErrorCode::kInvalidArgument, "--preempt-grace: must be positive, got {} ms", c.preempt_grace_ms);
  }
  if (c.preemption.max_preemptors < 1) {
    return Errorf(ErrorCode::kInvalidArgument, "preemptors per pass: must be at least 1, got {}",
                  c.preemption.max_preemptors);
  }
  return {};
}

}  // namespace cohort::head::core
