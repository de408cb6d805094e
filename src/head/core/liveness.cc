#include "head/core/liveness.h"

#include <algorithm>

#include "common/clock.h"
#include "head/core/drain.h"
#include "head/core/lifecycle.h"
#include "head/core/timing.h"
#include "head/core/tx.h"

namespace cohort::head::core {

using api::JobState;
using api::NodeState;

namespace {

// Nodes silent this long count towards the unhealthy zone: half the failure timeout, so
// that nodes cut off at once count together although their last heartbeats were up to an
// interval apart (a live agent heartbeats every interval, at most half the fence timeout).
int64_t ZoneSilenceMs(const Tx& tx, const NodeRuntime& rt, int64_t current_failure_ms) {
  return NodeFailureTimeoutMs(current_failure_ms, rt, tx.now) / 2;
}

int64_t ZoneTimeoutMs(const Tx& tx) {
  return CurrentTiming(tx.s, tx.ctx).failure_timeout_ms * kZoneTimeoutFailureTimeouts;
}

// Counts the UP nodes and those silent long enough to count towards the zone.
void CountSilentNodes(Tx& tx) {
  LivenessState& l = tx.s.liveness;
  l.up = 0;
  l.silent = 0;
  const int64_t current = CurrentTiming(tx.s, tx.ctx).failure_timeout_ms;
  ForEachNode(tx.s, [&](const std::string&, const api::Node& node, const NodeRuntime& rt) {
    if (node.state != NodeState::kUp) return;
    ++l.up;
    if (HeartbeatAgeMs(rt, tx.now) > ZoneSilenceMs(tx, rt, current)) ++l.silent;
  });
}

bool ZoneHolds(const Tx& tx) {
  const LivenessState& l = tx.s.liveness;
  return l.silent >= kMinSilentNodesForZone && l.silent >= tx.ctx.unhealthy_zone_threshold * l.up;
}

// Leaving the zone, the nodes still UNREACHABLE get one failure timeout to report in, as
// after a restart: nodes cut off together come back a few heartbeats apart. They stay
// UNREACHABLE (no new work, their fences excused) until heard, or DOWN.
void GiveUnreachableNodesOneTimeout(Tx& tx) {
  for (auto& [name, rt] : tx.s.runtime) {
    if (rt.unreachable) rt.last_seen_mono_ms = tx.now.mono_ms;
  }
}

// Enters or leaves the unhealthy zone, and lifts the suspension once the zone has lasted
// its timeout (the zone itself lasts until the silent fraction falls).
void UpdateZone(Tx& tx) {
  LivenessState& l = tx.s.liveness;
  const bool holds = ZoneHolds(tx);
  const bool in_zone = l.zone_since_mono_ms != 0;
  if (holds && !in_zone) {
    l.zone_since_mono_ms = tx.now.mono_ms;
    l.suspended = true;
    tx.fx.Warn("{} of {} UP nodes are silent at once (unhealthy zone threshold {}): taking it for a fault of the "
               "head or its network, no node is marked DOWN and no job fails for them for up to {}",
               l.silent, l.up, tx.ctx.unhealthy_zone_threshold, FormatDuration(ZoneTimeoutMs(tx)));
  } else if (!holds && in_zone) {
    tx.fx.Warn("left the unhealthy zone after {}: {} of {} UP nodes silent; nodes still silent one failure timeout "
               "from now are marked DOWN",
               FormatDuration(tx.now.mono_ms - l.zone_since_mono_ms), l.silent, l.up);
    l.zone_since_mono_ms = 0;
    l.suspended = false;
    GiveUnreachableNodesOneTimeout(tx);
  } else if (in_zone && l.suspended && tx.now.mono_ms - l.zone_since_mono_ms > ZoneTimeoutMs(tx)) {
    l.suspended = false;
    tx.fx.Warn("the unhealthy zone has lasted {}: its silent nodes are taken for failed and marked DOWN",
               FormatDuration(tx.now.mono_ms - l.zone_since_mono_ms));
  }
}

// A silent node the zone keeps from DOWN: no new work goes there, its gangs wait for it.
void MarkUnreachable(Tx& tx, const std::string& name, NodeRuntime& rt, int64_t age) {
  if (rt.unreachable) return;
  rt.unreachable = true;
  tx.fx.Info("node {} is UNREACHABLE: no heartbeat for {}, not marked DOWN while the unhealthy zone holds", name,
             FormatDuration(age));
}

// A node silent for the failure timeout is DOWN; its gangs fail (and are requeued).
void MarkDown(Tx& tx, api::Node& node, NodeRuntime& rt, int64_t age) {
  node.state = NodeState::kDown;
  node.reason = fmt::format("no heartbeat for {}", FormatDuration(age));
  rt.unreachable = false;
  tx.fx.StoreNode(node);
  tx.fx.Warn("node {} is DOWN: {}", node.name, node.reason);
  FailJobsOnNode(tx, node.name, fmt::format("node {} went down ({})", node.name, node.reason));
  rt.reported.clear();
  // The agent fenced its tasks before the failure timeout (its leases ran out).
  rt.stopping.clear();
  tx.RequestSchedule();
}

void MarkSilentNodesDown(Tx& tx) {
  CountSilentNodes(tx);
  UpdateZone(tx);
  const int64_t current = CurrentTiming(tx.s, tx.ctx).failure_timeout_ms;
  ForEachNode(tx.s, [&](const std::string& name, api::Node& node, NodeRuntime& rt) {
    if (node.state != NodeState::kUp) return;
    int64_t age = HeartbeatAgeMs(rt, tx.now);
    if (age <= NodeFailureTimeoutMs(current, rt, tx.now)) return;
    if (tx.s.liveness.suspended) {
      MarkUnreachable(tx, name, rt, age);
    } else {
      MarkDown(tx, node, rt, age);
    }
  });
}

// True when `pred` holds for the runtime of some node of the job's allocation.
template <typename Pred>
bool AnyNodeOf(const ClusterState& s, const api::Job& job, Pred pred) {
  return std::any_of(job.allocation.nodes.begin(), job.allocation.nodes.end(), [&](const api::NodeAllocation& na) {
    auto rt = s.runtime.find(na.node);
    return rt != s.runtime.end() && pred(rt->second);
  });
}

bool OnUnreachableNode(const ClusterState& s, const api::Job& job) {
  return AnyNodeOf(s, job, [](const NodeRuntime& rt) { return rt.unreachable; });
}

void EnforceTimeLimits(Tx& tx, const std::set<api::JobId>& running) {
  for (api::JobId id : running) {
    api::Job& job = tx.s.jobs.at(id);
    if (job.state != JobState::kRunning) continue;
    if (job.spec.time_limit_s > 0 && tx.now.unix_ms - job.start_ms > job.spec.time_limit_s * 1000) {
      FinishJob(tx, job, JobState::kTimeout,
                fmt::format("time limit of {} exceeded", FormatDuration(job.spec.time_limit_s * 1000)), std::nullopt);
    }
  }
}

void FailHungAttempts(Tx& tx, const std::set<api::JobId>& running) {
  for (api::JobId id : running) {
    api::Job& job = tx.s.jobs.at(id);
    if (job.state != JobState::kRunning || job.spec.progress_timeout_s <= 0) continue;
    if (OnUnreachableNode(tx.s, job)) continue;  // its reports cannot reach the head
    const int64_t timeout_ms = job.spec.progress_timeout_s * 1000;
    auto last = tx.ctx.latest_progress(id, job.attempt);
    int64_t since = std::max(last ? last->time_ms : std::max(job.start_ms, tx.s.loaded_ms),
                             tx.s.liveness.resumed_unix_ms);
    if (tx.now.unix_ms - since <= timeout_ms) continue;
    std::string why = fmt::format("no progress reported for {}s (progress_timeout_s); ", job.spec.progress_timeout_s);
    if (last) {
      why += fmt::format("last step {} at {} (rank {})", last->step, FormatTimestamp(last->time_ms), last->rank);
    } else {
      why += fmt::format("none since attempt {} started at {}", job.attempt, FormatTimestamp(since));
    }
    tx.fx.Warn("job {} attempt {} is hung: {}", id, job.attempt, why);
    FailGang(tx, job, why, std::nullopt, /*may_restart=*/true);
  }
}

}  // namespace

Effects CheckLiveness(ClusterState& s, const Context& ctx, Now now) {
  Tx tx(s, ctx, now);
  AccountUnheardTime(tx);
  s.liveness.accounted_mono_ms = now.mono_ms;  // the first check starts the accounting
  MarkSilentNodesDown(tx);
  const std::set<api::JobId> running = RunningJobIds(s);
  EnforceTimeLimits(tx, running);
  FailHungAttempts(tx, running);
  MoveOverdueJobs(tx, running);
  return std::move(tx.fx);
}

Effects CheckProgress(ClusterState& s, const Context& ctx, Now now) {
  Tx tx(s, ctx, now);
  FailHungAttempts(tx, RunningJobIds(s));
  return std::move(tx.fx);
}

Result<void> ValidateUnhealthyZoneThreshold(double threshold) {
  if (threshold > 0 && threshold <= 1) return {};
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("the unhealthy zone threshold must be a fraction in (0, 1], got {}", threshold),
                   "unhealthy_zone_threshold");
}

int64_t LagThresholdMs(const api::AgentTiming& timing) { return timing.heartbeat_interval_ms; }

void AccountUnheardTime(Tx& tx) {
  LivenessState& l = tx.s.liveness;
  if (l.accounted_mono_ms == 0) return;
  const int64_t unheard = tx.now.mono_ms - l.accounted_mono_ms;
  const int64_t gap = unheard - tx.ctx.liveness_interval_ms;
  l.accounted_mono_ms = std::max(l.accounted_mono_ms, tx.now.mono_ms);
  if (gap < LagThresholdMs(CurrentTiming(tx.s, tx.ctx))) return;
  CreditUnheardTime(tx.s, tx.now, gap);
  tx.s.counters.unheard_ms += static_cast<uint64_t>(gap);
  l.resumed_unix_ms = tx.now.unix_ms;
  tx.fx.Warn("the head did not listen for {} (it was stopped, or stalled: see the head's lag in /metrics); "
             "that time is not counted against any node",
             FormatDuration(unheard));
}

void ExcuseFencesAfterSilence(Tx& tx, const std::string& node, NodeRuntime& rt) {
  // The timing the agent lived by: the last one it was sent.
  const api::AgentTiming t = rt.granted.value_or(CurrentTiming(tx.s, tx.ctx));
  const int64_t silence = HeartbeatAgeMs(rt, tx.now) + rt.credited_ms;  // as the agent lived it
  // The agent fences after the fence timeout counted from when it sent its last heartbeat
  // that got through: up to an interval before the head heard it.
  const bool head_gap = rt.credited_ms > 0 && silence > t.fence_timeout_ms - t.heartbeat_interval_ms;
  if (!head_gap && !rt.unreachable) return;
  rt.fence_excused_until_mono_ms = tx.now.mono_ms + t.failure_timeout_ms;
  tx.fx.Info("node {} is heard again after {} of silence ({}): its agent may have fenced its tasks; for {} a gang "
             "of it that fails is requeued without counting a restart",
             node, FormatDuration(silence),
             rt.unreachable ? std::string("UNREACHABLE in the unhealthy zone")
                            : fmt::format("{} of it the head's own gap", FormatDuration(rt.credited_ms)),
             FormatDuration(t.failure_timeout_ms));
}

bool FencedByTheHead(const Tx& tx, const api::Job& job) {
  return AnyNodeOf(tx.s, job, [&](const NodeRuntime& rt) {
    return rt.unreachable || rt.fence_excused_until_mono_ms > tx.now.mono_ms;
  });
}

void RequeueFenced(Tx& tx, api::Job& job, const std::string& why) {
  Requeue(tx, job, why);
  job.moves += 1;  // not a failure of the job: restarts = attempt - moves
  job.reason = fmt::format("requeued after: {} (fenced while the head could not hear its node; not counted as a "
                           "restart)",
                           why);
  tx.fx.Warn("job {} requeued as attempt {}, not counted as a restart: {} (fenced while the head could not hear "
             "its node)",
             job.id, job.attempt, why);
}

}  // namespace cohort::head::core
