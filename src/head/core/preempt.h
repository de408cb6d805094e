// Preemption in the head's core: carrying out the victims a scheduling pass chose
// (sched/preempt.h says how it chooses them).
//
// A victim goes the way of `drain --now` (drain.h): the head asks its attempt to
// checkpoint (the job's checkpoint_signal to every task, "checkpoint": true in the replies
// to its progress reports), and once it reports a checkpoint newer than the request, or at
// the grace deadline (--preempt-grace), its gang stops and is requeued as a move: a new
// attempt that never counts against max_restarts and resumes from that checkpoint. Each
// preemption is recorded with the job (api::PreemptionRecord: when, for which job, why,
// the work at risk, how it ended) and shown by `cohort show`. The job it was preempted for
// is nominated: it comes first in the queue and preempts nothing more while it waits for
// those GPUs, until it starts, leaves the queue, or waits past the grace and some slack;
// no other job starts or preempts on the nodes being freed for it meanwhile. Nominations
// and checkpoint marks are kept in the job records (api::Job::nomination,
// last_checkpoint) and stored with them, so they survive a head restart.
// Single-threaded like the whole core.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "api/types.h"
#include "head/core/state.h"
#include "head/core/tx.h"
#include "sched/snapshot.h"

namespace cohort::head::core {

// Step of a scheduling pass, before it builds its input: forgets (and stores) the
// nominations of jobs that left the queue, were held or waited too long, and withdraws the
// moves still asked of the victims of those that left the queue or were held
// (WithdrawPreemptions); a held job released later preempts anew if it must.
void PrunePreemptions(Tx& tx);

// `preemptor` no longer needs the GPUs it preempted (it was cancelled, ended, or started
// elsewhere): each of its victims still running and not yet moved keeps running, its move
// request dropped and its preemption record closed as "withdrawn: <why>".
void WithdrawPreemptions(Tx& tx, api::JobId preemptor, const std::string& why);

// Asks each victim of `preempt` to checkpoint and give way (once: a job already being
// moved is skipped), records the preemption, and nominates its preemptor.
void ApplyPreemptions(Tx& tx, const std::vector<sched::Preemption>& preempt);

// A progress report of `attempt` of `job` named checkpoint `step`: remembered, with its
// time, as the attempt's last checkpoint when it is newer (the work a preemption loses is
// counted from it). True if the job's record changed (the caller stores it).
bool NoteCheckpoint(ClusterState& s, api::JobId job, int attempt, std::optional<int64_t> step, Now now);

// The reason a preempted job's attempt ends, for its history and its record: `outcome`
// ("checkpoint at step 120 written 3.1s after the request", or "no new checkpoint
// reported within 5m0s (work since the last checkpoint is redone)").
std::string PreemptedMoveReason(const api::MoveRequest& m, const std::string& outcome);

// Closes the job's open preemption record (the current attempt's) with `outcome` at `now_ms`.
void EndPreemption(api::Job& job, int64_t now_ms, const std::string& outcome);

}  // namespace cohort::head::core
