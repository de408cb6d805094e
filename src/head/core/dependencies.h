// Job dependencies in the head's core (api/job_dependency.h; `--dependency afterok:12`).
//
// At submit every job a dependency names must exist (CheckDependencyTargets). At each
// scheduling pass every pending job with a dependency is evaluated against the jobs it
// names: satisfied, it is scheduled like any other; waiting, it stays PENDING with reason
// "Dependency (...)"; never satisfiable (afterok on a job that failed, afternotok on one
// that succeeded, an element outside its array), it stays PENDING with reason
// "DependencyNeverSatisfied (...)", or is cancelled when its spec says kill_on_invalid_dep,
// as Slurm does. An array as a target stands for all its elements: it ends SUCCEEDED only
// when every element did (arrays.h). Single-threaded, like the whole core.
#pragma once

#include <map>
#include <string>

#include "api/types.h"
#include "common/error.h"
#include "head/core/schedule.h"
#include "head/core/tx.h"

namespace cohort::head::core {

enum class DependencyState { kSatisfied, kWaiting, kNever };

struct DependencyVerdict {
  DependencyState state = DependencyState::kSatisfied;
  std::string reason;  // "" when satisfied
};

// kInvalidArgument naming `dependency` if the spec's dependency names a job this head does
// not have.
Result<void> CheckDependencyTargets(const ClusterState& s, const api::JobSpec& spec);

// Where `job`'s dependency stands now.
DependencyVerdict EvaluateDependency(const ClusterState& s, const api::Job& job);

// Takes out of the pass's pending jobs those whose dependency is not satisfied, with their
// reasons (in.dependency_reasons), and cancels those never satisfiable that asked for it.
void WithholdForDependencies(Tx& tx, SchedulerInput& in);

}  // namespace cohort::head::core
