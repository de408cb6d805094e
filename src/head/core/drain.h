// Draining nodes and planned moves in the head's core.
//
// `drain` stops placing jobs on a node. `drain --now` also moves the jobs running there:
// each is asked to checkpoint (the job's checkpoint_signal to its tasks, and "checkpoint":
// true in the replies to its progress reports); once it reports a checkpoint newer than
// the request, or at the request's deadline, its gang is stopped and requeued as a move (a
// new attempt that does not count against max_restarts) onto other nodes. An elastic job
// growing back to full size (schedule.h) moves the same way at its next checkpoint. The
// request is stored with the job (api::MoveRequest), so a restarted head carries it out.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "common/error.h"
#include "head/core/effects.h"
#include "head/core/state.h"
#include "head/core/tx.h"

namespace cohort::head::core {

// Marks the node drained with `reason` (default: the reason it is already drained for, else
// "drained by request"); with `now`, asks
// each job running there to checkpoint and move within `timeout_ms`. kNotFound for an
// unknown node.
Result<Effects> Drain(ClusterState& s, const Context& ctx, const std::string& node, std::string reason, bool now_flag,
                      int64_t timeout_ms, Now now);

// Clears the drain mark and marks every GPU of the node healthy again (after the
// operator's check). kNotFound for an unknown node.
Result<Effects> Resume(ClusterState& s, const Context& ctx, const std::string& node, Now now);

struct ProgressResult {
  Effects effects;
  bool checkpoint = false;  // the head wants this attempt to write a checkpoint now
};

// A progress report of `attempt` of `job` (already added to the progress log) with the
// checkpoint it reports, if any: moves the job when it answers its move request; says
// whether the head still wants a checkpoint (a drain request not yet answered, or a time
// limit near: LimitCheckpointDue).
ProgressResult OnProgress(ClusterState& s, const Context& ctx, api::JobId job, int attempt,
                          std::optional<int64_t> checkpoint_step, Now now);

// Whether the head asks the RUNNING `job` to checkpoint because its time limit is near
// (JobSpec::checkpoint_before_limit_s): from that many seconds before the limit of its
// attempt until the attempt reports a checkpoint made since then. The job keeps running.
bool LimitCheckpointDue(const api::Job& job, int64_t now_ms);

// When the head made the checkpoint request it makes of the RUNNING `job` at `now_ms`
// (Unix ms), 0 if it makes none: its drain's or preemption's move request (not a grow),
// else its time-limit request (LimitCheckpointDue; made when the limit's window opened).
// It names the request: agents deliver the job's checkpoint signal again whenever it
// changes, so that a request made after another one was answered is signalled even when
// the agent heard of neither the answer nor the new request before (api::TaskLaunch).
int64_t CheckpointRequestedMs(const api::Job& job, int64_t now_ms);

// Asks the RUNNING `job` to checkpoint and then move, for `m` (its node or preemption,
// request time and deadline set by the caller): sets its baseline (a checkpoint counts
// once past everything reported so far), stores the request with the job, and wakes the
// job's agents to deliver the checkpoint signal now. The path of `drain --now` and of
// preemptions (preempt.h).
void RequestCheckpointMove(Tx& tx, api::Job& job, api::MoveRequest m);

// Step of CheckLiveness: moves the jobs among `running` whose request is past its deadline.
void MoveOverdueJobs(Tx& tx, const std::set<api::JobId>& running);

// A task of `job`, asked to checkpoint and move (drain --now or a preemption; not a grow),
// ended with a failure (`why`: which rank, how): its checkpoint signal's default action
// (SIGTERM, SIGUSR1) or a script that checkpoints and exits on it, as Slurm jobs do on
// `--signal`. The attempt ends as the move it was asked for, requeued without a restart
// counted, and a preemption's record is closed with what happened. `job.move` must be set.
void MoveOnFailedExit(Tx& tx, api::Job& job, const std::string& why);

}  // namespace cohort::head::core
