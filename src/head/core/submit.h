// Submitting and cancelling jobs in the head's core.
//
// Submission is two steps because the store assigns the job's id: NewJob checks the spec
// against the cluster and builds the PENDING record; the shell creates it in the store
// (the acknowledgement waits for that commit); AddJob then takes it into the state.
#pragma once

#include "api/types.h"
#include "common/error.h"
#include "head/core/effects.h"
#include "head/core/state.h"

namespace cohort::head::core {

// The PENDING record for `spec` (no id yet), submitted at `now`. kUnsatisfiable when no
// node has registered, or when no placement on the registered nodes could ever satisfy it
// (the error says why).
Result<api::Job> NewJob(const ClusterState& s, api::JobSpec spec, Now now);

// NewJob for the shell: first the job limits (job_limits.h: kResourceExhausted when
// `spec.user` or the cluster has no room), then NewJob; the job counts as open from here.
// AddJob takes it in; DropNewJob gives its count back when it is not stored after all.
Result<api::Job> AcceptJob(ClusterState& s, const Context& ctx, api::JobSpec spec, Now now);
void DropNewJob(ClusterState& s, const api::Job& job);

// Takes a stored PENDING job (with its id) into the queue.
Effects AddJob(ClusterState& s, const Context& ctx, api::Job job, Now now);

// Cancels a job that has not ended: its gang stops everywhere. kNotFound for an unknown
// id; kFailedPrecondition if the job has already ended. Nothing changes on error.
Result<Effects> Cancel(ClusterState& s, const Context& ctx, api::JobId id, Now now);

}  // namespace cohort::head::core
