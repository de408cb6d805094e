#include "head/core/liveness.h"

#include "common/clock.h"
#include "head/core/drain.h"
#include "head/core/lifecycle.h"
#include "head/core/tx.h"

namespace cohort::head::core {

using api::JobState;
using api::NodeState;

namespace {

// A node silent for the failure timeout is DOWN; its gangs fail (and are requeued).
void MarkSilentNodesDown(Tx& tx) {
  for (auto& [name, node] : tx.s.nodes) {
    if (node.state != NodeState::kUp) continue;
    NodeRuntime& rt = tx.s.runtime[name];
    int64_t age = HeartbeatAgeMs(rt, tx.now);
    if (age <= tx.ctx.timing.failure_timeout_ms) continue;
    node.state = NodeState::kDown;
    node.reason = fmt::format("no heartbeat for {}", FormatDuration(age));
    tx.fx.StoreNode(node);
    tx.fx.Warn("node {} is DOWN: {}", name, node.reason);
    FailJobsOnNode(tx, name, fmt::format("node {} went down ({})", name, node.reason));
    rt.reported.clear();
    // The agent fenced its tasks before the failure timeout (its leases ran out).
    rt.stopping.clear();
    tx.RequestSchedule();
  }
}

void EnforceTimeLimits(Tx& tx, const std::set<api::JobId>& running) {
  for (api::JobId id : running) {
    api::Job& job = tx.s.jobs.at(id);
    if (job.state != JobState::kRunning) continue;
    if (job.spec.time_limit_s > 0 && tx.now.unix_ms - job.start_ms > job.spec.time_limit_s * 1000) {
      FinishJob(tx, job, JobState::kFailed,
                fmt::format("time limit of {} exceeded", FormatDuration(job.spec.time_limit_s * 1000)), std::nullopt);
    }
  }
}

void FailHungAttempts(Tx& tx, const std::set<api::JobId>& running) {
  for (api::JobId id : running) {
    api::Job& job = tx.s.jobs.at(id);
    if (job.state != JobState::kRunning || job.spec.progress_timeout_s <= 0) continue;
    const int64_t timeout_ms = job.spec.progress_timeout_s * 1000;
    auto last = tx.ctx.latest_progress(id, job.attempt);
    int64_t since = last ? last->time_ms : std::max(job.start_ms, tx.s.loaded_ms);
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

}  // namespace cohort::head::core
