// Allocations and their steps in the head's core (`cohort alloc`, api/step.h).
//
// An allocation is a job that holds its resources without a command; its holder (the
// `cohort alloc` process) ends it when its shell exits, and its steps are recorded in
// Job::steps: the step and its tasks' sessions when it starts, each task's exit code as
// the head relays the end of its output. Each transition changes nothing and returns an
// error when it does not apply (kNotFound, kFailedPrecondition naming the state). Who may
// call them is the HTTP handlers' business (head/exec_api.cc, head/jobs_control_api.cc).
#pragma once

#include <string>

#include "api/types.h"
#include "common/error.h"
#include "head/core/effects.h"
#include "head/core/state.h"

namespace cohort::head::core {

// Records a started step of RUNNING allocation `id`: numbers it (`step.id`, one more than
// the last), stamps its start and keeps at most api::kMaxSteps (the oldest go).
Result<Effects> AddStep(ClusterState& s, const Context& ctx, api::JobId id, api::StepRecord& step, Now now);

// Records `exit_code` for the step task of job `id` whose exec session is `session`; the
// step ends when its last task has one. No change (empty effects) when no step of the job
// has that session or its exit is known already: a plain exec session of a batch job.
Effects RecordStepExit(ClusterState& s, const Context& ctx, api::JobId id, const std::string& session,
                       int exit_code, Now now);

// The holder of allocation `id` ends it: SUCCEEDED when its command exited 0, FAILED with
// that exit code otherwise, CANCELLED when the holder was stopped by `signal` (non-zero).
// kFailedPrecondition for a job that is not an allocation or has ended.
Result<Effects> EndAllocation(ClusterState& s, const Context& ctx, api::JobId id, int exit_code, int signal, Now now);

}  // namespace cohort::head::core
