#include "head/core/drain.h"

#include <algorithm>

#include "common/clock.h"
#include "head/core/lifecycle.h"
#include "head/core/preempt.h"

namespace cohort::head::core {

using api::Job;
using api::JobState;

namespace {

// Asks the jobs running on `node` to checkpoint and move off it within `timeout_ms`.
void RequestMoves(Tx& tx, const std::string& node, int64_t timeout_ms) {
  auto nj = tx.s.node_jobs.find(node);
  if (nj == tx.s.node_jobs.end()) return;
  for (api::JobId id : nj->second) {
    Job& job = tx.s.jobs.at(id);
    if (job.state != JobState::kRunning) continue;
    if (job.move && !job.move->grow) continue;  // already asked (a grow gives way to the drain)
    api::MoveRequest m;
    m.node = node;
    m.requested_ms = tx.now.unix_ms;
    m.deadline_ms = tx.now.unix_ms + timeout_ms;
    RequestCheckpointMove(tx, job, std::move(m));
    tx.fx.Info("job {} asked to checkpoint before moving off {} (within {})", id, node, FormatDuration(timeout_ms));
  }
}

}  // namespace

void RequestCheckpointMove(Tx& tx, Job& job, api::MoveRequest m) {
  // A checkpoint counts once it is past everything reported so far: the newest
  // checkpoint of any attempt (a new attempt's first report names the one it resumed
  // from) and the attempt's newest step (a checkpoint of that step may already exist
  // unreported, written before the request).
  m.baseline_checkpoint = tx.ctx.newest_checkpoint(job.id).value_or(-1);
  if (auto last = tx.ctx.latest_progress(job.id, job.attempt)) {
    m.baseline_checkpoint = std::max(m.baseline_checkpoint, last->step);
  }
  job.move = std::move(m);
  tx.fx.StoreJob(job);
  // The agents deliver the checkpoint signal on their next heartbeat: make it now.
  for (const auto& na : job.allocation.nodes) tx.Wake(na.node);
}

Result<Effects> Drain(ClusterState& s, const Context& ctx, const std::string& name, std::string reason, bool now_flag,
                      int64_t timeout_ms, Now now) {
  auto it = s.nodes.find(name);
  if (it == s.nodes.end()) return Errorf(ErrorCode::kNotFound, "node '{}' not found", name);
  Tx tx(s, ctx, now);
  // Draining again without a reason (say, `drain --now` after `drain --reason "bad fan"`)
  // keeps the reason the operator gave.
  if (!reason.empty()) {
    it->second.drain_reason = std::move(reason);
  } else if (!it->second.drain || it->second.drain_reason.empty()) {
    it->second.drain_reason = "drained by request";
  }
  it->second.drain = true;
  tx.fx.StoreNode(it->second);
  tx.RequestSchedule();
  tx.fx.Info("node {} draining{}: {}", name, now_flag ? " now (moving its jobs)" : "", it->second.drain_reason);
  if (now_flag) RequestMoves(tx, name, timeout_ms);
  return std::move(tx.fx);
}

Result<Effects> Resume(ClusterState& s, const Context& ctx, const std::string& name, Now now) {
  auto it = s.nodes.find(name);
  if (it == s.nodes.end()) return Errorf(ErrorCode::kNotFound, "node '{}' not found", name);
  Tx tx(s, ctx, now);
  it->second.drain = false;
  it->second.drain_reason.clear();
  for (auto& g : it->second.gpus) {
    if (g.healthy) continue;
    tx.fx.Info("node {} GPU {} marked healthy again (was: {})", name, g.index, g.health_reason);
    g.healthy = true;
    g.health_reason.clear();
  }
  tx.fx.StoreNode(it->second);
  tx.RequestSchedule();
  tx.fx.Info("node {} resumed", name);
  return std::move(tx.fx);
}

namespace {

// Moves `job` for its drain's or preemption's request (not a grow), `how` saying what ended
// the wait: a checkpoint, the deadline, or the attempt stopping on its own.
void MoveAsRequested(Tx& tx, Job& job, const std::string& how) {
  const api::MoveRequest m = *job.move;  // MoveJob resets it
  if (m.preempted_for) {
    EndPreemption(job, tx.now.unix_ms, how);
    MoveJob(tx, job, PreemptedMoveReason(m, how));
    return;
  }
  MoveJob(tx, job, fmt::format("node {} drained now; {}", m.node, how));
}

}  // namespace

namespace {

// When the time-limit request of the attempt begins (Unix ms), 0 if the job makes none.
int64_t LimitCheckpointFromMs(const Job& job) {
  const api::JobSpec& spec = job.spec;
  if (job.state != JobState::kRunning || spec.time_limit_s <= 0 || spec.checkpoint_before_limit_s <= 0) return 0;
  return job.start_ms + (spec.time_limit_s - spec.checkpoint_before_limit_s) * 1000;
}

}  // namespace

bool LimitCheckpointDue(const Job& job, int64_t now_ms) {
  const int64_t from_ms = LimitCheckpointFromMs(job);
  if (from_ms == 0 || now_ms < from_ms) return false;
  const std::optional<api::CheckpointMark>& made = job.last_checkpoint;
  return !(made && made->attempt == job.attempt && made->reported_ms >= from_ms);
}

int64_t CheckpointRequestedMs(const Job& job, int64_t now_ms) {
  if (job.move && !job.move->grow) return job.move->requested_ms;
  return LimitCheckpointDue(job, now_ms) ? LimitCheckpointFromMs(job) : 0;
}

ProgressResult OnProgress(ClusterState& s, const Context& ctx, api::JobId id, int attempt,
                          std::optional<int64_t> checkpoint, Now now) {
  ProgressResult out;
  Job* job = CurrentAttempt(s, id, attempt);
  if (NoteCheckpoint(s, id, attempt, checkpoint, now)) out.effects.StoreJob(*job);
  if (!job) return out;
  if (!job->move) {
    out.checkpoint = LimitCheckpointDue(*job, now.unix_ms);
    return out;
  }
  const api::MoveRequest& m = *job->move;
  // Not yet: keep asking (a grow waits for the job's own next checkpoint).
  if (!checkpoint || *checkpoint <= m.baseline_checkpoint) {
    out.checkpoint = !m.grow;
    return out;
  }
  Tx tx(s, ctx, now);
  if (m.grow) {
    MoveJob(tx, *job, fmt::format("growing back to {} nodes at its checkpoint at step {}", job->spec.nodes, *checkpoint));
  } else {
    MoveAsRequested(tx, *job, fmt::format("checkpoint at step {} written {} after the request", *checkpoint,
                                          FormatDuration(now.unix_ms - m.requested_ms)));
  }
  out.effects.Merge(std::move(tx.fx));
  return out;
}

void MoveOverdueJobs(Tx& tx, const std::set<api::JobId>& running) {
  for (api::JobId id : running) {
    Job& job = tx.s.jobs.at(id);
    if (job.state != JobState::kRunning || !job.move || job.move->deadline_ms == 0 ||
        tx.now.unix_ms < job.move->deadline_ms) {
      continue;
    }
    const api::MoveRequest& m = *job.move;
    MoveAsRequested(tx, job, fmt::format("no new checkpoint reported within {} (work since the last checkpoint is redone)",
                                         FormatDuration(m.deadline_ms - m.requested_ms)));
  }
}

void MoveOnFailedExit(Tx& tx, Job& job, const std::string& why) {
  MoveAsRequested(tx, job, fmt::format("it stopped {} after the request: {}",
                                       FormatDuration(std::max<int64_t>(0, tx.now.unix_ms - job.move->requested_ms)),
                                       why));
}

}  // namespace cohort::head::core
