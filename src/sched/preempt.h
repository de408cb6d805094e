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
// Quotas count GPU share units (gpu_units.h): a borrower's sharing jobs are reclaimable
// like its whole-GPU jobs, and a sharing job within its team's quota may reclaim.
// Victims are chosen node by node for the gang (`nodes` nodes, each with the job's GPUs
// and CPUs once its victims are gone), so that the gang gets whole nodes and no job is
// preempted on a node the gang will not use. A node's victims are the fewest cheapest
// candidates there: lower priority first, then the least work lost (GPU-seconds since
// their last reported checkpoint); a victim whose freeing the member does not need is
// dropped again (most expensive first), so every victim is one without which it would not
// fit there. Of the nodes that can host a member, the gang takes those whose victims cost
// least (nodes that fit as they are cost nothing).
//
// In detail (issue 18), on nodes whose devices the snapshot lists: a node hosts a member
// when FitMember (gpu_fit.h) accepts the devices as they would be once the victims are
// gone (their whole devices and their sharing slices given back, Usage::devices/slices),
// so a typed, MIG, sharing or topology-bound job preempts only jobs whose devices it can
// use, and never a job whose freeing would not let it start. A member of k > 1 whole GPUs
// wants them connected: the victims are also chosen domain by domain (NVLink island, else
// PCIe switch) and, at the same victim priority, a choice whose freed GPUs and free ones
// form one domain that holds the member (required: the only acceptable one) beats a
// cheaper scattered one; among those, the least work lost. A gang of n > 1 nodes over
// switch-labelled nodes takes its n nodes under one switch when preemption can free n
// there (the switch whose n cheapest cost least); topology required waits for one.
// Constrained jobs (constraints.h) consider only the nodes they may use, their --nodelist
// nodes always among the gang's, and count the memory a victim's --mem frees.
//
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sched/constraints.h"
#include "sched/gang_fit.h"
#include "sched/node_pool.h"
#include "sched/quota.h"
#include "sched/snapshot.h"

namespace cohort::sched {

// Work lost if `job` stopped at `now_ms`: GPU-seconds since its last checkpoint (a
// sharing job's slices count their share: half a GPU for an hour is 1,800).
double WorkAtRiskGpuSeconds(const RunningJob& job, int64_t now_ms);

class PreemptionPlanner {
 public:
  // `snapshot`, `pool` and `constraints` must outlive the planner; `pool` and
  // `constraints` are the pass's (read only).
  PreemptionPlanner(const Snapshot& snapshot, const NodePool& pool, const ConstraintBook& constraints);

  // The preemptions that let `job` (its gang `demand`, `units` GPU share units in all,
  // gpu_units.h) start, or nullopt (and why not in `*why`) when no candidates free enough.
  // Does not change the planner.
  // Never preempts on `excluded` nodes (held for other nominated jobs).
  std::optional<std::vector<Preemption>> Plan(const JobRequest& job, const GangDemand& demand, int64_t units,
                                              const QuotaBook& quotas, std::span<const int> excluded,
                                              std::string* why) const;

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

  // What one node would give the gang: the victims to stop there, and what they cost.
  struct NodeChoice {
    int node = 0;
    int max_priority = 0;  // of its victims; INT_MIN when none
    bool connected = true;  // the member's GPUs form one domain (or need not)
    double work = 0;
    std::vector<int> victims;  // running indices
  };
  // What the member needs of one node beyond GPUs and CPUs.
  struct MemberNeed {
    const JobRequest* job = nullptr;
    GangDemand demand;
    int64_t mem_mb = 0;
    bool wants_connected = false;  // k > 1 whole GPUs
  };
  // The cheapest victims among `here` (candidates on `node`, cheapest first) that make
  // room for a member on `node`; nullopt if even all of them do not.
  std::optional<NodeChoice> ChooseOnNode(int node, const MemberNeed& need, std::vector<Candidate>& here) const;
  // ChooseOnNode on counts alone, for a plain job on a node without device detail.
  std::optional<NodeChoice> ByCount(int node, const MemberNeed& need, const std::vector<Candidate>& here) const;
  // True if a member fits on `node` once `victims` are gone; `*connected` says whether
  // it fits with its GPUs in one domain.
  bool FitsWithout(int node, const MemberNeed& need, std::span<const int> victims, bool connected_only,
                   bool* connected) const;

  const Snapshot& snapshot_;
  const NodePool& pool_;
  const ConstraintBook& constraints_;
  std::vector<bool> detail_;  // pool node -> its devices are listed with topology or shared slices
  std::vector<std::vector<std::pair<int, Usage>>> on_node_;  // pool node -> (running index, its use there)
  std::vector<int64_t> units_of_;                            // running index -> GPU share units held in all
  std::vector<bool> taken_;                                  // running index -> promised this pass
  std::map<std::string, int64_t, std::less<>> released_;     // team -> units of its victims this pass
  // What the running jobs hold, without this pass's starts: a team borrows (and may be
  // reclaimed from) only if it held more than its quota when the pass began, so a pass
  // never starts a team's job and preempts an older one of it for the same GPUs.
  QuotaBook held_;
};

}  // namespace cohort::sched
