#include "head/core/job_control.h"

#include <vector>

#include <fmt/format.h>

#include "api/job_array.h"
#include "common/clock.h"
#include "head/core/job_limits.h"
#include "head/core/lifecycle.h"
#include "head/core/preempt.h"
#include "head/core/tx.h"

namespace cohort::head::core {

using api::Job;
using api::JobState;

namespace {

// The job `id` if it is PENDING; the transition's errors otherwise.
Result<Job*> PendingJob(ClusterState& s, api::JobId id, std::string_view verb) {
  auto it = s.jobs.find(id);
  if (it == s.jobs.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  Job& job = it->second;
  if (job.state != JobState::kPending) {
    return Errorf(ErrorCode::kFailedPrecondition, "job {} is {}: only a PENDING job can be {}", id,
                  api::JobStateName(job.state), verb);
  }
  return &job;
}

// The PENDING elements of array `array` (none for another job): a hold, release or
// update of an array applies to them too, as Slurm's does to every pending element.
std::vector<Job*> PendingElements(ClusterState& s, const Job& array) {
  std::vector<Job*> out;
  if (!array.spec.is_array()) return out;
  auto rt = s.arrays.find(array.id);
  if (rt == s.arrays.end()) return out;
  for (api::JobId id : rt->second.live) {
    Job& e = s.jobs.at(id);
    if (e.state == JobState::kPending) out.push_back(&e);
  }
  return out;
}

void HoldOne(Tx& tx, Job& job, const std::string& by) {
  job.held = true;
  job.held_by = by;
  job.reason = HeldReason(job);
  tx.s.pending_reasons.erase(job.id);
  tx.fx.StoreJob(job);
}

void ReleaseOne(Tx& tx, Job& job) {
  job.held = false;
  job.held_by.clear();
  job.reason = "waiting for the scheduler";
  tx.s.pending_reasons.erase(job.id);
  tx.fx.StoreJob(job);
}

}  // namespace

std::string HeldReason(const Job& job) {
  return fmt::format("held by {} (cohort release {})", job.held_by.empty() ? "request" : job.held_by, job.id);
}

Result<Effects> Hold(ClusterState& s, const Context& ctx, api::JobId id, const std::string& by, Now now) {
  Job* job = COHORT_TRY(PendingJob(s, id, "held"));
  if (job->held) return Errorf(ErrorCode::kFailedPrecondition, "job {} is already {}", id, HeldReason(*job));
  Tx tx(s, ctx, now);
  HoldOne(tx, *job, by);  // an array makes no more elements while held (arrays.h)
  for (Job* e : PendingElements(s, *job)) {
    if (!e->held) HoldOne(tx, *e, by);
  }
  tx.fx.Info("job {} held by {}", id, by);
  tx.RequestSchedule();  // its reservation, if it had one, no longer holds others back
  return std::move(tx.fx);
}

Result<Effects> Release(ClusterState& s, const Context& ctx, api::JobId id, Now now) {
  Job* job = COHORT_TRY(PendingJob(s, id, "released"));
  if (!job->held) return Errorf(ErrorCode::kFailedPrecondition, "job {} is not held", id);
  Tx tx(s, ctx, now);
  // An array's elements held with it (by the same holder) are released with it; one held
  // by someone else keeps that hold.
  for (Job* e : PendingElements(s, *job)) {
    if (e->held && e->held_by == job->held_by) ReleaseOne(tx, *e);
  }
  ReleaseOne(tx, *job);
  tx.fx.Info("job {} released", id);
  tx.RequestSchedule();
  return std::move(tx.fx);
}

Result<Effects> Update(ClusterState& s, const Context& ctx, api::JobId id, const JobUpdate& update, Now now) {
  if (update.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "nothing to update: give time_limit_s, priority, name, array_throttle or begin_ms");
  }
  // A running job's time limit and name may change too (as scontrol update of a running
  // job's TimeLimit): liveness and backfill read the limit from the spec at each pass.
  Job* job = nullptr;
  if (auto it = s.jobs.find(id); it != s.jobs.end() && it->second.state == JobState::kRunning) {
    if (update.priority || update.array_throttle || update.begin_ms) {
      return Errorf(ErrorCode::kFailedPrecondition,
                    "job {} is RUNNING: only its time limit and name can change now (priority, begin time and an "
                    "array's throttle only while PENDING)",
                    id);
    }
    job = &it->second;
  } else {
    job = COHORT_TRY(PendingJob(s, id, "updated"));
  }
  api::JobSpec spec = job->spec;
  if (update.array_throttle) {
    if (!spec.is_array()) {
      return FieldError("array_throttle", "job {} is not a job array: only an array has a throttle", id);
    }
    if (*update.array_throttle < 0 || *update.array_throttle > api::kMaxArrayElements) {
      return FieldError("array_throttle", "must be between 0 (no throttle) and {}, got {}", api::kMaxArrayElements,
                        *update.array_throttle);
    }
    api::ArraySpec a = COHORT_TRY(api::ParseArraySpec(spec.array, "array"));
    a.throttle = static_cast<int>(*update.array_throttle);
    spec.array = a.ToString();
    if (spec.sweep.is_object()) {  // a sweep's array is its section's: parallel is its throttle
      if (a.throttle > 0) {
        spec.sweep["parallel"] = a.throttle;
      } else {
        spec.sweep.erase("parallel");
      }
    }
  }
  if (update.time_limit_s) {
    if (*update.time_limit_s < 0 || *update.time_limit_s > api::kMaxTimeLimitS) {
      return FieldError("time_limit_s", "must be between 0 (unlimited) and {} seconds, got {}", api::kMaxTimeLimitS,
                        *update.time_limit_s);
    }
    spec.time_limit_s = *update.time_limit_s;
  }
  if (update.priority) {
    if (*update.priority < -api::kMaxPriority || *update.priority > api::kMaxPriority) {
      return FieldError("priority", "must be between {} and {}, got {}", -api::kMaxPriority, api::kMaxPriority,
                        *update.priority);
    }
    spec.priority = *update.priority;
  }
  if (update.name) spec.name = *update.name;
  if (update.begin_ms) {
    if (*update.begin_ms < 0 || *update.begin_ms > api::kMaxBeginMs) {
      return FieldError("begin_ms", "must be between 0 (no wait) and {} (Unix ms), got {}", api::kMaxBeginMs,
                        *update.begin_ms);
    }
    spec.begin_ms = *update.begin_ms;
  }
  COHORT_TRY_VOID(api::ValidateJobSpec(spec));
  // An array's pending elements take the update too (the elements it makes later copy
  // its spec); each is checked before any changes.
  std::vector<std::pair<Job*, api::JobSpec>> elements;
  for (Job* e : PendingElements(s, *job)) {
    api::JobSpec es = e->spec;
    if (update.time_limit_s) es.time_limit_s = spec.time_limit_s;
    if (update.priority) es.priority = spec.priority;
    if (update.name) es.name = spec.name;
    if (update.begin_ms) es.begin_ms = spec.begin_ms;
    COHORT_TRY_VOID(api::ValidateJobSpec(es));
    elements.emplace_back(e, std::move(es));
  }
  Tx tx(s, ctx, now);
  std::string what;
  if (update.time_limit_s) what += fmt::format(" time_limit_s {} -> {}", job->spec.time_limit_s, spec.time_limit_s);
  if (update.priority) what += fmt::format(" priority {} -> {}", job->spec.priority, spec.priority);
  if (update.name) what += fmt::format(" name {} -> {}", job->spec.name, spec.name);
  if (update.array_throttle) what += fmt::format(" array {} -> {}", job->spec.array, spec.array);
  if (update.begin_ms) {
    what += fmt::format(" begin {} -> {}", FormatTimestamp(job->spec.begin_ms), FormatTimestamp(spec.begin_ms));
  }
  job->spec = std::move(spec);
  tx.fx.StoreJob(*job);
  for (auto& [e, es] : elements) {
    e->spec = std::move(es);
    tx.fx.StoreJob(*e);
  }
  if (!elements.empty()) what += fmt::format(" (and {} pending elements)", elements.size());
  tx.fx.Info("job {} updated:{}", id, what);
  tx.RequestSchedule();  // a new priority or limit may change the order or let a backfill in; a throttle, elements
  return std::move(tx.fx);
}

Result<Effects> Requeue(ClusterState& s, const Context& ctx, api::JobId id, const std::string& by, bool hold, Now now) {
  auto it = s.jobs.find(id);
  if (it == s.jobs.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  Job& job = it->second;
  const api::JobSpec& spec = job.spec;
  if (spec.is_array()) {
    return Errorf(ErrorCode::kFailedPrecondition, "job {} is a job array: requeue its running elements ({}_N)", id, id);
  }
  if (spec.is_service()) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "job {} is a replica of service {}: a replica restarts by itself (cohort serve scale {} N sets how "
                  "many run)",
                  id, spec.service, spec.service);
  }
  if (spec.is_allocation()) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "job {} is an allocation: only batch jobs are requeued (its holder ends it; cohort alloc makes "
                  "another)",
                  id);
  }
  if (job.state == JobState::kPending) {
    return Errorf(ErrorCode::kFailedPrecondition, "job {} is PENDING already: only a running or ended job is requeued",
                  id);
  }
  const bool ended = api::IsTerminal(job.state);
  if (ended && job.is_array_element()) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "job {} is an element of array {} that has ended ({}): an array's elements are requeued while "
                  "they run; submit the index again (--array {})",
                  id, job.array_job_id, api::JobStateName(job.state), job.array_task_id);
  }
  if (ended) COHORT_TRY_VOID(AdmitJob(s, ctx.job_limits, spec.user));
  Tx tx(s, ctx, now);
  const std::string why = fmt::format("requeued by {}", by);
  const std::string was = std::string(api::JobStateName(job.state));
  if (job.move && job.move->preempted_for) EndPreemption(job, now.unix_ms, why);
  if (ended) {
    CountOpenJob(s, spec.user, +1);  // open again until it ends (FinishJob counts it back)
    job.end_ms = 0;
    job.exit_code.reset();
  }
  core::Requeue(tx, job, why);
  job.moves += 1;  // asked for, not a failure: max_restarts stays for failures
  job.reason = fmt::format("{} (was {}; attempt {} next)", why, was, job.attempt);
  if (hold) HoldOne(tx, job, by);
  tx.RequestSchedule();
  tx.fx.Info("job {} {} as attempt {} (was {}){}", id, why, job.attempt, was, hold ? ", held" : "");
  return std::move(tx.fx);
}

}  // namespace cohort::head::core
