#include "head/core/submit.h"

#include "head/core/arrays.h"
#include "head/core/dependencies.h"
#include "head/core/gpu_detail.h"
#include "head/core/job_control.h"
#include "head/core/job_limits.h"
#include "head/core/lifecycle.h"
#include "head/core/schedule.h"
#include "head/core/tx.h"
#include "sched/constraints.h"
#include "sched/feasibility.h"
#include "sched/gpu_fit.h"

namespace cohort::head::core {

using api::Job;
using api::JobState;

Result<Job> NewJob(const ClusterState& s, api::JobSpec spec, Now now) {
  // Feasibility reads only the nodes' shapes: from their counts, not a walk over every
  // node (10,000 of them made each submit slow).
  std::vector<sched::NodeCapacity> capacity;
  capacity.reserve(s.nodes.size());
  for (const auto& [shape, count] : s.node_shapes) capacity.insert(capacity.end(), count, {{}, shape.first, shape.second, {}, 0});
  Job job;
  job.spec = std::move(spec);
  job.submit_ms = now.unix_ms;
  job.state = JobState::kPending;
  if (capacity.empty()) {
    return MakeError(ErrorCode::kUnsatisfiable,
                     "no nodes have registered with this head yet; start an agent (cohort agent --head URL) and "
                     "submit again");
  }
  if (job.spec.gpu_memory_enforce == "kill" && !job.spec.shares_gpu()) {
    // Checked at submit only: jobs stored before this check still load (api::ValidateGpuSpec).
    return FieldError("gpu_memory_enforce",
                      "'kill' stops a task over its part of a shared GPU, but this job asks for no part (give "
                      "gpus_per_task 0.25-0.75 or gpu_memory); whole GPUs and MIG instances are never judged");
  }
  const sched::JobRequest request = ToRequest(job);
  if (sched::IsConstrained(request)) {
    COHORT_TRY_VOID(sched::CheckConstraintSyntax(request));
    if (sched::NeedsGpuDetail(request)) {
      // The two placement paths (constraints.h, gpu_fit.h) do not compose yet.
      return FieldError("constraint",
                        "--nodelist, --exclude, --constraint and --mem cannot yet be combined with a GPU type, a "
                        "fraction of a GPU, gpu_memory or topology: required");
    }
  }
  if (sched::NeedsGpuDetail(request)) {
    // A typed or sharing job: its devices decide (gpu_fit.h), so walk the nodes; plain
    // jobs keep the shape counts.
    std::vector<sched::NodeDevices> detailed;
    detailed.reserve(s.nodes.size());
    for (const auto& [name, n] : s.nodes) detailed.push_back({name, n.cpus, CapacityViews(n), NetworkSwitch(n)});
    if (auto ok = sched::CheckGpuFeasible(detailed, request); !ok) return std::unexpected(ok.error());
  } else if (auto ok = sched::CheckFeasible(capacity, request); !ok) {
    return std::unexpected(ok.error());
  }
  if (sched::IsConstrained(request)) {
    // Constraints name nodes and features: a walk over the nodes, for these jobs only.
    std::vector<sched::NodeCapacity> nodes;
    nodes.reserve(s.nodes.size());
    for (const auto& [name, n] : s.nodes) {
      nodes.push_back({name, static_cast<int>(n.gpus.size()), n.cpus, n.features, n.memory_bytes >> 20});
    }
    COHORT_TRY_VOID(sched::CheckConstraintsFeasible(nodes, request));
  }
  COHORT_TRY_VOID(CheckDependencyTargets(s, job.spec));  // every job it names exists
  job.reason = "waiting for the scheduler";
  if (job.spec.is_array()) job.array_left = ArrayIndices(job.spec);  // every index waits (arrays.h)
  return job;
}

Result<Job> AcceptJob(ClusterState& s, const Context& ctx, api::JobSpec spec, Now now) {
  COHORT_TRY_VOID(AdmitJob(s, ctx.job_limits, spec.user));
  Job job = COHORT_TRY(NewJob(s, std::move(spec), now));
  CountOpenJob(s, job.spec.user, +1);
  return job;
}

void DropNewJob(ClusterState& s, const Job& job) { CountOpenJob(s, job.spec.user, -1); }

Effects AddJob(ClusterState& s, const Context& ctx, Job job, Now now) {
  Tx tx(s, ctx, now);
  if (!job.is_array_element()) {  // an array's elements are logged as they start
    tx.fx.Info("job {} ({}) submitted by {}: {} node(s) x {} task(s), {} GPU(s)/node{}", job.id, job.spec.name,
               job.spec.user, job.spec.nodes, job.spec.tasks_per_node, job.spec.gpus_per_node,
               job.spec.is_array() ? ", array " + job.spec.array : std::string());
  }
  if (job.held) job.reason = HeldReason(job);  // submitted held (sbatch --hold): now it has its id
  const api::JobId id = job.id;
  if (job.spec.is_array()) {
    // An array never queues: its elements do, a few at a time (arrays.h).
    IndexArrayJob(s, job);
  } else {
    s.pending.insert(id);
  }
  s.jobs[id] = std::move(job);
  tx.CountTransition(std::nullopt, JobState::kPending);
  if (s.jobs[id].is_array_element()) AdoptArrayElement(tx, s.jobs[id]);
  tx.RequestSchedule();
  return std::move(tx.fx);
}

Result<Effects> Cancel(ClusterState& s, const Context& ctx, api::JobId id, Now now) {
  auto it = s.jobs.find(id);
  if (it == s.jobs.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  Job& job = it->second;
  if (api::IsTerminal(job.state)) {
    return Errorf(ErrorCode::kFailedPrecondition, "job {} has already ended ({})", id, api::JobStateName(job.state));
  }
  if (job.spec.is_array()) return CancelArray(s, ctx, job, now);  // every element with it
  Tx tx(s, ctx, now);
  FinishJob(tx, job, JobState::kCancelled, "cancelled by request", std::nullopt);
  return std::move(tx.fx);
}

}  // namespace cohort::head::core
