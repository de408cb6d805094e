// Preemption: which running jobs to give back their GPUs so that a blocked job can start.
//
// Two reasons, as in Kueue: **reclaim** (a team within its quota takes back GPUs that
// teams borrowing beyond theirs hold) and **priority** (a job takes the GPUs of lower
// priority jobs of its own team). A running job is a candidate only if:
//   - it has run at least the policy's min_runtime (a job that just started is protected);
//   - no preemption or move of it is under way (RunningJob::preemptible);
//   - it never preempted the blocked job (JobRequest::preempted_by): two jobs never
//     preempt each other back and forth;
//   - reclaim: its team is another and holds more than its quota, and stays borrowing
//     until its last victim is chosen (no team is pushed below its quota; both as the
//     pass began, before the jobs it started); the blocked
//     job's team stays within its quota once it starts;
//   - priority: its team is the blocked job's and its priority is strictly lower; the
//     blocked job's team stays within quota + borrow limit once it starts.
// Victims are chosen node by node for the gang (`nodes` nodes, each with the job's GPUs
// and CPUs once its victims are gone), so that the gang gets whole nodes and no job is
// preempted on a node the gang will not use. A node's victims are the fewest cheapest
// candidates there: lower priority first, then the least work lost (GPU-seconds since
// their last reported checkpoint). Of the nodes that can host a member, the gang takes
// those whose victims cost least (nodes that fit as they are cost nothing).
//
// The planner belongs to one pass (scheduler.h): it reads the snapshot and the pass's
// NodePool and QuotaBook, and remembers the victims already promised to earlier jobs of
// the pass. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sched/gang_fit.h"
#include "sched/node_pool.h"
#include "sched/quota.h"
#include "sched/snapshot.h"

namespace cohort::sched {

// Work lost if `job` stopped at `now_ms`: GPU-seconds since its last checkpoint.
double WorkAtRiskGpuSeconds(const RunningJob& job, int64_t now_ms);

class PreemptionPlanner {
 public:
  // `snapshot` and `pool` must outlive the planner; `pool` is the pass's (read only).
  PreemptionPlanner(const Snapshot& snapshot, const NodePool& pool);

  // The preemptions that let `job` (its gang `demand`, `gpus` in all) start, or nullopt
  // (and why not in `*why`) when no candidates free enough. Does not change the planner.
  std::optional<std::vector<Preemption>> Plan(const JobRequest& job, const GangDemand& demand, int64_t gpus,
                                              const QuotaBook& quotas, std::string* why) const;

  // The victims of `plan` are taken: no later job of the pass may pick them.
  void Commit(const std::vector<Preemption>& plan);

 private:
  struct Candidate {
    int running = 0;  // index into snapshot.running
    PreemptKind kind = PreemptKind::kReclaim;
    double work = 0;  // GPU-seconds at risk
  };
  // Lower priority first, then less work lost, then the most recently started.
  bool Cheaper(const Candidate& a, const Candidate& b) const;

  const Snapshot& snapshot_;
  const NodePool& pool_;
  std::vector<std::vector<std::pair<int, Usage>>> on_node_;  // pool node -> (running index, its use there)
  std::vector<int64_t> gpus_of_;                             // running index -> GPUs held in all
  std::vector<bool> taken_;                                  // running index -> promised this pass
  std::map<std::string, int64_t, std::less<>> released_;     // team -> GPUs of its victims this pass
  // What the running jobs hold, without this pass's starts: a team borrows (and may be
  // reclaimed from) only if it held more than its quota when the pass began, so a pass
  // never starts a team's job and preempts an older one of it for the same GPUs.
  QuotaBook held_;
};

}  // namespace cohort::sched
