// Scheduler: one pass over a snapshot, composing the policies of this module.
//
// `Schedule` walks the pending queue in priority order (priority.h). Each job is placed as
// a whole gang (gang_fit.h) on the resources still free after the jobs placed before it in
// this pass, with its pack or spread policy (placement.h). The first job that does not fit
// now but could fit once running jobs end becomes the head job and gets the pass's only
// reservation; every later job starts now only if it does not delay the head job
// (backfill.h; for a head job that needs devices in detail or has node constraints,
// detail_backfill.h), and is then marked `backfilled`. Every job left pending gets a reason
// (reasons.h). A job that cannot fit even on the full capacity of the schedulable nodes
// gets no reservation, so it cannot hold the queue up.
//
// With `Snapshot::shares` (fair share, quotas with borrowing, preemption), the queue runs
// in fair_share.h's order (jobs waiting on GPUs they preempted for, then jobs within their
// team's quota, then borrowers, each class by multifactor priority), a job starts only
// within its team's quota + borrow limit (quota.h), and a blocked job may preempt running
// jobs (preempt.h): the decision then lists the victims, and the job waits for them.
//
// The pass is a pure function of the snapshot: no I/O, no clock, no threads; any thread
// may call it. It runs in about O(jobs × (GPU-count buckets × log nodes + gang size)).
#pragma once

#include "sched/feasibility.h"
#include "sched/snapshot.h"

namespace cohort::sched {

// Decides which pending jobs start now and where, and why the others wait.
Decision Schedule(const Snapshot& snapshot);

}  // namespace cohort::sched
