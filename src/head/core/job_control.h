// Job control in the head's core: holding, releasing and updating a PENDING job (Slurm's
// `scontrol hold/release/update`), and requeueing a running or ended one (`scontrol requeue`).
//
// A held job stays PENDING and in the queue but the scheduler passes it over (it gets no
// reservation either), its reason saying who held it and how to release it. An update
// changes a pending job's time limit, priority or name; the new spec is checked as a
// submitted one is. Each transition changes nothing and returns an error when it does not
// apply: kNotFound for an unknown job, kFailedPrecondition for one that is not PENDING (or
// is already held / not held), kInvalidArgument for an update out of range (naming the
// field). Who may call them is the HTTP handler's business (head/jobs_control_api.cc).
//
// A job array (its record stays PENDING while it has elements to run) is held, released
// and updated as Slurm's: a hold holds its PENDING elements and makes no new ones until
// released; a release releases it and the elements held by the same holder; an update
// applies to it (so to the elements it makes later) and to its PENDING elements; its
// throttle changes from the next element made (a lower one starts none until fewer live).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "api/types.h"
#include "common/error.h"
#include "head/core/effects.h"
#include "head/core/state.h"

namespace cohort::head::core {

// The reason a held job shows: "held by alice (cohort release 12)".
std::string HeldReason(const api::Job& job);

// Holds a PENDING job on behalf of `by` (a user name).
Result<Effects> Hold(ClusterState& s, const Context& ctx, api::JobId id, const std::string& by, Now now);

// Releases a held job: it waits for the scheduler again.
Result<Effects> Release(ClusterState& s, const Context& ctx, api::JobId id, Now now);

// What `cohort update` may change; an unset field stays.
struct JobUpdate {
  std::optional<int64_t> time_limit_s;  // 0..api::kMaxTimeLimitS; 0: unlimited
  std::optional<int> priority;          // -api::kMaxPriority..api::kMaxPriority
  std::optional<std::string> name;      // as JobSpec::name
  // A job array's throttle (its "%N": at most N elements live at once), 0..kMaxArrayElements;
  // 0: none. Slurm's ArrayTaskThrottle; a sweep's `parallel` with it.
  std::optional<int64_t> array_throttle;
  // Not before this time (JobSpec::begin_ms, Unix ms), 0..api::kMaxBeginMs; 0: no wait.
  // Slurm's StartTime: only while PENDING.
  std::optional<int64_t> begin_ms;
  bool empty() const { return !time_limit_s && !priority && !name && !array_throttle && !begin_ms; }
};

// Applies `update` to a PENDING job (held or not). kInvalidArgument for an empty update.
Result<Effects> Update(ClusterState& s, const Context& ctx, api::JobId id, const JobUpdate& update, Now now);

// Requeues a RUNNING or ended batch job on behalf of `by` (a user name), as Slurm's
// `scontrol requeue` (`requeuehold` with `hold`: it comes back held by `by`). A running
// attempt is stopped (its agents stop the tasks: SIGTERM, then SIGKILL after the grace).
// The job is PENDING again as attempt + 1 under the same id, so COHORT_CHECKPOINT_DIR and
// the checkpoints in it carry over, with a new time limit for the new attempt. It counts
// as a move, not against max_restarts. An ended job is open again (job_limits.h:
// kResourceExhausted when its user has no room left). kFailedPrecondition, saying what
// to do instead, for a PENDING job, a job array's own record (requeue its elements), an
// ended element of an array, a service replica (it restarts itself) and an allocation.
Result<Effects> Requeue(ClusterState& s, const Context& ctx, api::JobId id, const std::string& by, bool hold, Now now);

}  // namespace cohort::head::core
