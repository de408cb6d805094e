// Node liveness, time limits, hung attempts and overdue moves: the transitions the head's
// control loop runs about every 100 ms (Context::liveness_interval_ms).
//
// A node whose agent has been silent for the failure timeout is DOWN, and every gang
// with a task on it is stopped everywhere and requeued (or failed). The agent fences
// itself earlier (fence timeout < failure timeout), so by the time the gang is placed
// again its old tasks are already dead: a job never runs twice.
//
// Silence is what the head could have heard. Three rules keep the head from blaming nodes
// for its own trouble:
//
//  - The head's own gaps are credited (CreditUnheardTime). Liveness is checked every
//    liveness interval, and heartbeats arrive in between; when the time since the last
//    check or heartbeat exceeds one interval by at least LagThresholdMs, the head was not
//    listening (stopped, swapped out, a pass or a store commit holding the lock): every
//    node's heartbeat clock moves forward by the excess. A restarted head, which cannot
//    know its gap, starts every clock at the load (LoadState). A heartbeat is timed when
//    the head processes it, so a heartbeat that waited in the HTTP server's queue counts
//    as fresh, and the time it waited counts as silence only if the control loop kept
//    running meanwhile (threads busy with other requests); if that starves most nodes at
//    once, the zone rule holds.
//
//  - The unhealthy zone (Kubernetes' node lifecycle controller, --unhealthy-zone-threshold):
//    when at least kMinSilentNodesForZone nodes and at least the threshold fraction of
//    the UP nodes are silent (for more than half the failure timeout, so that nodes cut
//    at once but whose last heartbeats were an interval apart count together), the head
//    assumes the fault is its own or its network's. It marks no node DOWN and fails no
//    job; nodes silent past the failure timeout are UNREACHABLE instead (no new work is
//    placed on them). Clusters of one or two nodes never enter the zone. The zone ends
//    when the silent fraction falls below the threshold; nodes still UNREACHABLE then get
//    one failure timeout to report in (nodes cut off together come back a few heartbeats
//    apart), as after a restart, and are DOWN if they do not. The suspension ends after
//    kZoneTimeoutFailureTimeouts failure timeouts: nodes silent that long are DOWN and
//    their gangs requeued, so no job waits on a node forever. A job never runs twice all
//    the same: the silent agents fenced their tasks after the fence timeout (they cannot
//    tell a head's network cut from their own), and the head places a gang again only
//    after marking its node DOWN or hearing that its tasks are gone.
//
//  - Fences the head caused are not the job's failures. An agent that could not reach the
//    head for the fence timeout killed its tasks, and reports them killed when it is
//    heard again. When the node's silence was credited as the head's gap (and long enough
//    for the agent to fence) or it was UNREACHABLE, then for one failure timeout a task of
//    a gang on it that ends badly requeues the gang as a new attempt that does not count
//    against max_restarts (counted in Job::moves), like a move. Each such requeue needs a
//    silence the head caused, so a job still fails for good when its own tasks do.
//
// A job with progress_timeout_s whose current attempt has reported no progress
// (COHORT_REPORT) for that long is hung: its gang fails the same way.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "head/core/effects.h"
#include "head/core/state.h"
#include "head/core/tx.h"

namespace cohort::head::core {

// The zone needs at least this many silent nodes (Kubernetes: "no less than 3").
inline constexpr int kMinSilentNodesForZone = 3;
// After this many failure timeouts in the zone, silent nodes are DOWN after all.
inline constexpr int kZoneTimeoutFailureTimeouts = 10;

// Marks silent nodes DOWN (failing their gangs) unless the unhealthy zone holds, fails
// jobs past their time limit, fails hung attempts (CheckProgress) and moves jobs whose
// move request is past its deadline. Credits the head's own gap first.
Effects CheckLiveness(ClusterState& s, const Context& ctx, Now now);

// Fails the current attempt of every RUNNING job with progress_timeout_s > 0 whose newest
// progress report of that attempt (or, without one, the attempt's start, or the state's
// load or the end of the head's last gap if later: reports are not persisted, and none
// arrive while the head does not listen) is older than the timeout at `now`: the gang is
// stopped everywhere and requeued through the same path as a node failure, or FAILED
// when no restarts are left. A gang with an UNREACHABLE node waits for it.
Effects CheckProgress(ClusterState& s, const Context& ctx, Now now);

// kInvalidArgument unless `threshold` is a fraction in (0, 1].
Result<void> ValidateUnhealthyZoneThreshold(double threshold);

// A stall of the head at least this long is credited to the nodes and logged: one
// heartbeat interval. A shorter one costs a live node at most one heartbeat, which the
// timeouts allow for (fence timeout >= 2 heartbeat intervals).
int64_t LagThresholdMs(const api::AgentTiming& timing);

// ---- steps of other transitions (inside a Tx) ----

// Credits the time since the head last checked liveness or heard a heartbeat, beyond one
// liveness interval, to every node, if it is at least LagThresholdMs. Does nothing before
// the first liveness check (LoadState covers that time).
void AccountUnheardTime(Tx& tx);

// Heartbeat step, before the node is marked alive: when its silence was the head's doing
// (a credited gap long enough for its agent to fence, or UNREACHABLE), opens its window
// of excused fences (NodeRuntime::fence_excused_until_mono_ms).
void ExcuseFencesAfterSilence(Tx& tx, const std::string& node, NodeRuntime& rt);

// True when a task of `job` that ended badly was fenced because the head could not hear
// one of its nodes: a node of the gang is UNREACHABLE or in its window of excused fences.
bool FencedByTheHead(const Tx& tx, const api::Job& job);

// Ends the current attempt as fenced and requeues it without counting a restart.
void RequeueFenced(Tx& tx, api::Job& job, const std::string& why);

}  // namespace cohort::head::core
