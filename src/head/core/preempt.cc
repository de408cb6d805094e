#include "head/core/preempt.h"

#include "common/clock.h"
#include "head/core/drain.h"
#include "head/core/teams.h"

namespace cohort::head::core {

using api::Job;
using api::JobState;

void PrunePreemptions(Tx& tx) {
  ClusterState& s = tx.s;
  const int64_t patience = tx.ctx.shares.preempt_grace_ms + tx.ctx.shares.nomination_slack_ms;
  std::vector<std::pair<api::JobId, std::string>> gone;  // preemptors that no longer wait
  std::erase_if(s.shares.nominated, [&](api::JobId id) {
    auto job = s.jobs.find(id);
    if (job == s.jobs.end()) return true;
    const bool held = job->second.held;
    if (s.pending.contains(id) && !held && job->second.nomination &&
        tx.now.unix_ms - job->second.nomination->since_ms <= patience) {
      return false;
    }
    if (job->second.nomination) {
      job->second.nomination.reset();
      tx.fx.StoreJob(job->second);
    }
    if (!s.pending.contains(id)) {
      gone.emplace_back(id, fmt::format("job {} {} before it was moved", id,
                                        job->second.state == JobState::kRunning
                                            ? "started elsewhere"
                                            : fmt::format("left the queue ({})", api::JobStateName(job->second.state))));
    } else if (held) {
      gone.emplace_back(id, fmt::format("job {} was held before it was moved", id));
    }
    return true;
  });
  for (const auto& [id, why] : gone) WithdrawPreemptions(tx, id, why);
}

void WithdrawPreemptions(Tx& tx, api::JobId preemptor, const std::string& why) {
  for (api::JobId id : RunningJobIds(tx.s)) {
    Job& job = tx.s.jobs.at(id);
    if (job.state != JobState::kRunning || !job.move || job.move->preempted_for != preemptor) continue;
    job.move.reset();
    EndPreemption(job, tx.now.unix_ms, "withdrawn: " + why);
    tx.fx.StoreJob(job);
    tx.fx.Info("job {} keeps running: its preemption for job {} is withdrawn ({})", id, preemptor, why);
  }
}

void ApplyPreemptions(Tx& tx, const std::vector<sched::Preemption>& preempt) {
  for (const sched::Preemption& p : preempt) {
    auto victim = tx.s.jobs.find(p.victim);
    auto preemptor = tx.s.jobs.find(p.preemptor);
    if (victim == tx.s.jobs.end() || preemptor == tx.s.jobs.end()) continue;
    Job& job = victim->second;
    if (job.state != JobState::kRunning || job.move) continue;
    const std::string kind = p.kind == sched::PreemptKind::kReclaim ? "reclaim" : "priority";
    api::PreemptionRecord rec;
    rec.requested_ms = tx.now.unix_ms;
    rec.attempt = job.attempt;
    rec.by_job = p.preemptor;
    rec.by_team = std::string(TeamOf(preemptor->second));
    rec.kind = kind;
    rec.reason = p.reason;
    rec.work_at_risk_gpu_s = p.work_at_risk_gpu_s;
    job.preemptions.push_back(std::move(rec));
    api::MoveRequest m;
    m.requested_ms = tx.now.unix_ms;
    m.deadline_ms = tx.now.unix_ms + tx.ctx.shares.preempt_grace_ms;
    m.preempted_for = p.preemptor;
    m.preempt_reason = p.reason;
    RequestCheckpointMove(tx, job, std::move(m));
    if (!preemptor->second.nomination) {
      preemptor->second.nomination = api::Nomination{tx.now.unix_ms, p.nodes};
      tx.s.shares.nominated.insert(p.preemptor);
      tx.fx.StoreJob(preemptor->second);
    }
    tx.fx.Info("job {} preempted for job {} ({}; {:.0f} GPU-s since its last checkpoint): asked to checkpoint within {}",
               job.id, p.preemptor, p.reason, p.work_at_risk_gpu_s, FormatDuration(tx.ctx.shares.preempt_grace_ms));
  }
}

bool NoteCheckpoint(ClusterState& s, api::JobId id, int attempt, std::optional<int64_t> step, Now now) {
  if (!step || *step < 0) return false;
  Job* job = CurrentAttempt(s, id, attempt);
  if (!job) return false;
  std::optional<api::CheckpointMark>& mark = job->last_checkpoint;
  if (mark && mark->attempt == attempt && *step <= mark->step) return false;
  mark = api::CheckpointMark{attempt, *step, now.unix_ms};
  return true;
}

std::string PreemptedMoveReason(const api::MoveRequest& m, const std::string& outcome) {
  return fmt::format("preempted for job {} ({}); {}", m.preempted_for, m.preempt_reason, outcome);
}

void EndPreemption(Job& job, int64_t now_ms, const std::string& outcome) {
  for (auto it = job.preemptions.rbegin(); it != job.preemptions.rend(); ++it) {
    if (it->ended_ms != 0) continue;
    it->ended_ms = now_ms;
    it->outcome = outcome;
    return;
  }
}

}  // namespace cohort::head::core
