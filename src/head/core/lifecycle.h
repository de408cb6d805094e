// Job lifecycle steps of the head's core: PENDING → RUNNING → SUCCEEDED / FAILED /
// CANCELLED / TIMEOUT, with gang restarts and moves.
//
// A job's tasks start together and fail together: the first task that ends badly, or a
// node that goes down, ends the attempt on every node. With restarts left the job goes
// back to PENDING with attempt + 1 (COHORT_ATTEMPT); otherwise it fails with the reason.
// A move (`drain --now`, an elastic job growing back) is a new attempt that does not count
// against max_restarts. These are the steps the public transitions are made of; each runs
// inside a Tx (tx.h) and records its effects there.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/types.h"
#include "sched/snapshot.h"
#include "head/core/tx.h"

namespace cohort::head::core {

// Where one node's part of a new attempt goes: the node, its GPUs and CPUs.
struct NodePlacement {
  std::string node;
  std::vector<int> gpus;
  int cpus = 0;
  std::vector<sched::GpuSlice> slices = {};  // a sharing job: one per task, in local-rank order
};

// Starts an attempt of a PENDING job on `nodes` (node rank order): builds the allocation
// (ranks, GPUs per task, MASTER_ADDR/PORT), bumps each node's assignment version, records
// the attempt in the history and the queue wait.
void StartJob(Tx& tx, api::Job& job, const std::vector<NodePlacement>& nodes);

// Ends the current attempt: the job is FAILED, SUCCEEDED, CANCELLED or TIMEOUT with `reason`.
// `ended_ms` (Unix ms, 0: now) is when it ended, when that was before the head learned it
// (its tasks' exits, reported after a head restart): the attempt's and the job's end.
void FinishJob(Tx& tx, api::Job& job, api::JobState state, std::string reason, std::optional<int> exit_code,
               int64_t ended_ms = 0);

// Ends the current attempt (at `ended_ms`, as FinishJob) and puts the job back in the
// queue as attempt + 1.
void Requeue(Tx& tx, api::Job& job, const std::string& why, int64_t ended_ms = 0);

// Ends the current attempt and requeues it as a move (not a failure).
void MoveJob(Tx& tx, api::Job& job, const std::string& why);

// Ends the current attempt; requeues it when restarts remain and `may_restart`, else the
// job FAILS with `why` (and `exit_code`).
// A service replica (spec.is_service()) is never failed: it is requeued with every restart
// allowed (RestartReplica), whatever `may_restart` says.
void FailGang(Tx& tx, api::Job& job, const std::string& why, std::optional<int> exit_code, bool may_restart,
              int64_t ended_ms = 0);
// Requeues a service replica as a new attempt (it never succeeds or fails; only a
// cancellation ends it), with `why` in its reason (and its back-off, below, when it has one).
void RestartReplica(Tx& tx, api::Job& job, const std::string& why);

// A replica whose attempts keep ending soon after they start (a model path that does not
// exist on the node, a bad flag, a model too large for its GPU) is in a crash loop;
// requeued at once it would start several times a second for as long as the service
// exists. As Kubernetes' CrashLoopBackOff does, the next start of a PENDING replica waits:
// after the second attempt in a row that ended within kReplicaQuickEndMs of its start
// kReplicaBackoffBaseMs, doubling with each further one up to kReplicaBackoffMaxMs; one
// attempt that ran longer ends the loop. The first quick end restarts at once (a node
// lost under a replica that had just started is no loop). Read from the job's attempt
// history alone, so a restarted head keeps the same waits; the attempts folded into its
// oldest record count too (a loop longer than the kMaxReplicaHistory records kept is not
// shown as that long only).
inline constexpr int64_t kReplicaQuickEndMs = 60'000;
inline constexpr int64_t kReplicaBackoffBaseMs = 1'000;
inline constexpr int64_t kReplicaBackoffMaxMs = 60'000;
struct ReplicaBackoff {
  int quick_ends = 0;         // the latest ended attempts, in a row, that ran < kReplicaQuickEndMs
  // The quick ends reach the oldest record, which holds attempts folded together
  // (FoldOldestAttempts) that ran a minute or more in all: some of them may have been quick
  // too, so the loop is at least quick_ends long. (Folded attempts that ran under a minute
  // in all were each quick: they count, one each.)
  bool at_least = false;
  // quick_ends as a reason says it: "12", or "at least 49".
  std::string QuickEndsText() const;
  int64_t delay_ms = 0;       // 0: start at once
  int64_t start_after_ms = 0; // Unix ms: the latest attempt's end + delay_ms
  std::string last_end;       // why the latest attempt ended
};
ReplicaBackoff ReplicaBackoffOf(const api::Job& job);

// A replica restarts without limit (a crash loop adds an attempt a minute for as long as
// the service exists), and the job's record carries its whole history into the store and
// every job list: RestartReplica keeps at most this many attempt records, folding the two
// oldest ended ones into one (FoldOldestAttempts).
inline constexpr size_t kMaxReplicaHistory = 50;

// Folds the oldest ended attempt records of `spec`'s job into the first until at most `keep`
// remain (keep >= 2; the newest is never touched). The folded record keeps its first
// attempt's number, start and nodes (`cohort logs -a` of that attempt), lasts as long as
// the folded attempts ran together, so GPU-seconds (usage, fair share) stay whole, placed
// from its first start, and says which attempts it holds. Attempts between the first and
// the newest kept have no record of their own any more.
void FoldOldestAttempts(const api::JobSpec& spec, std::vector<api::AttemptRecord>& history, size_t keep);

// FailGang (with restarts) for every job running on `node`, each with `why`.
void FailJobsOnNode(Tx& tx, const std::string& node, const std::string& why);

// Records the exit of a task of the job's current attempt on `node`: a failure ends the
// gang (requeued without counting a restart when the head caused it by not hearing a node
// of the gang: liveness.h); the last rank exiting 0 makes the job SUCCEEDED. The attempt
// ends when its tasks did (their agents' finish times, kept between the attempt's start
// and now), not when the head heard of it: a head down meanwhile is not billed.
void RecordExit(Tx& tx, api::Job& job, const std::string& node, const api::TaskReport& report);

// Drops the node's stopping entries that its latest heartbeat confirms; true if any went.
bool ConfirmStopped(NodeRuntime& rt);

// The tasks the head wants on `node`: every task of a RUNNING job placed there that has
// not exited, with its command and the job contract's environment. A task in `held` (the
// node's heartbeat reported it, so its agent has the launch already) goes out as its key,
// GPUs and checkpoint request alone, with no command: the reply to a heartbeat carries a
// task's environment once, not every second for as long as it runs. A task's checkpoint
// request stands while its job is asked to move (drain.h) or its time limit is near
// (LimitCheckpointDue at `now`).
std::vector<api::TaskLaunch> DesiredTasks(const ClusterState& s, const Context& ctx, const std::string& node, Now now,
                                          const std::vector<api::TaskReport>& held = {});

}  // namespace cohort::head::core
