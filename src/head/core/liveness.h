// Node liveness, time limits, hung attempts and overdue moves: the transitions the head's
// control loop runs about every 100 ms.
//
// A node whose agent has been silent for the failure timeout is DOWN, and every gang
// with a task on it is stopped everywhere and requeued (or failed). The agent fences
// itself earlier (fence timeout < failure timeout), so by the time the gang is placed
// again its old tasks are already dead: a job never runs twice.
//
// A job with progress_timeout_s whose current attempt has reported no progress
// (COHORT_REPORT) for that long is hung: its gang fails the same way.
#pragma once

#include "head/core/effects.h"
#include "head/core/state.h"

namespace cohort::head::core {

// Marks silent nodes DOWN (failing their gangs), fails jobs past their time limit, fails
// hung attempts (CheckProgress) and moves jobs whose move request is past its deadline.
Effects CheckLiveness(ClusterState& s, const Context& ctx, Now now);

// Fails the current attempt of every RUNNING job with progress_timeout_s > 0 whose newest
// progress report of that attempt (or, without one, the attempt's start, or the state's
// load if later: reports are not persisted) is older than the timeout at `now`: the gang
// is stopped everywhere and requeued through the same path as a node failure, or FAILED
// when no restarts are left.
Effects CheckProgress(ClusterState& s, const Context& ctx, Now now);

}  // namespace cohort::head::core
