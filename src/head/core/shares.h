// Fair share in the head's core: each team's decayed GPU usage, what the scheduler sees of
// teams, quotas and preemption, and the `cohort shares` and `cohort queue --priority`
// views.
//
// Usage is accrued at every scheduling pass (AccrueUsage): the total decays by the time
// since the last pass, and each attempt that ran meanwhile adds its GPUs' decayed
// GPU-seconds (sched/fair_share.h) up to now or to its end. Every attempt starts in a pass
// and is accounted from then on, so accrued usage equals usage rebuilt from the jobs'
// attempt history, which is how a head that restarts gets it back (RebuildUsage). Pure
// functions of the state; single-threaded like the whole core.
#pragma once

#include <map>
#include <string>

#include "api/team.h"
#include "common/error.h"
#include "head/core/state.h"
#include "sched/snapshot.h"

namespace cohort::head::core {

// Sets every team's usage from the jobs' attempt history as of `now` (after LoadState and
// LoadTeams).
void RebuildUsage(ClusterState& s, const Context& ctx, Now now);

// Brings the usage up to `now` (scheduling passes call it first).
void AccrueUsage(ClusterState& s, const Context& ctx, Now now);

// Each team's usage as of `now_ms`, without changing the state.
std::map<std::string, double> UsageAsOf(const ClusterState& s, const Context& ctx, int64_t now_ms);

// Adds to `snap` (built by BuildSchedulerInput from `s`) what fair share, quotas and
// preemption need: the teams with their usage, the weights and the preemption policy; each
// running job's team, priority, start, last checkpoint and whether a move of it is under
// way (then its expected end is the move's deadline); each pending job's team, whether it
// is nominated and the jobs that preempted it.
void AddShares(const ClusterState& s, const Context& ctx, Now now, sched::Snapshot& snap);

// `cohort shares`: every created team and every team with jobs or usage, by name.
api::SharesReport Shares(const ClusterState& s, const Context& ctx, Now now);

// `cohort queue --priority`: the pending jobs in the order the scheduler considers them,
// with their factors.
api::PriorityReport Priorities(const ClusterState& s, const Context& ctx, Now now);

}  // namespace cohort::head::core
