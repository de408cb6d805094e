// A scheduling pass in the head's core: the cluster as the pure scheduler (src/sched) sees
// it, and what its decision changes.
//
// GPUs count as busy when a RUNNING job holds them, and also while a task of an ended
// attempt may still run on them (a cancelled or failed gang that is still shutting down,
// StoppingAttempt in state.h, or a task the agent still reports that is no current
// attempt's), so a new job never shares a GPU with a dying one. A job whose previous
// attempt is still stopping somewhere waits: its gang never runs twice. After a restart,
// which keeps no stopping attempts, a node takes no work until its first heartbeat has
// said which tasks still run there. After the starts,
// elastic jobs running below their size are asked to grow back when the free nodes allow
// it and nothing waits.
#pragma once

#include <map>
#include <string>

#include "api/types.h"
#include "head/core/effects.h"
#include "head/core/state.h"
#include "sched/scheduler.h"

namespace cohort::head::core {

// The scheduler's view of one job's request.
sched::JobRequest ToRequest(const api::Job& job);

struct SchedulerInput {
  sched::Snapshot snapshot;
  // Pending jobs left out of the snapshot because an earlier attempt still stops
  // somewhere, with their reason ("waiting for attempt 0 on n1 to stop").
  std::map<api::JobId, std::string> stopping_reasons;
  // Held jobs (job_control.h), left out too, with their reason.
  std::map<api::JobId, std::string> held_reasons;
  // Service replicas in a crash loop waiting out their back-off (lifecycle.h), left out,
  // with their reason.
  std::map<api::JobId, std::string> backoff_reasons;
  // Jobs whose begin time (JobSpec::begin_ms, --begin) has not come, left out, with their
  // reason ("BeginTime (not before ...)").
  std::map<api::JobId, std::string> begin_reasons;
  // Jobs whose dependency is not satisfied (dependencies.h), left out, with their reason.
  std::map<api::JobId, std::string> dependency_reasons;
  // A pending job names a GPU type or shares a GPU: every node's devices go in detail.
  bool wants_gpu_detail = false;
};

// What the scheduler sees at `now`: every node with its free GPUs and CPUs, the running
// jobs with their expected ends, and the pending jobs that may start.
SchedulerInput BuildSchedulerInput(const ClusterState& s, Now now);

struct PassResult {
  Effects effects;
  bool ran = false;  // false: nothing to place, no pass was needed
  int started = 0;
};

// One pass: builds the input, runs sched::Schedule, starts what it places, records the
// pending reasons and plans elastic growth. Does nothing (`ran` false, no effects) when
// the queue is empty and no elastic job runs below its size.
PassResult Schedule(ClusterState& s, const Context& ctx, Now now);

}  // namespace cohort::head::core
