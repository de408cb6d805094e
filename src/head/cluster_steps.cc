// Cluster's allocations and steps: each is one transition of the core (core/steps.h),
// applied and made durable like Cancel.
#include "head/cluster.h"
#include "head/core/steps.h"

namespace cohort::head {

Result<api::StepRecord> Cluster::AddStep(api::JobId id, api::StepRecord step) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Effects fx = COHORT_TRY(core::AddStep(state_, context_, id, step, Now()));
  COHORT_TRY_VOID(Apply(std::move(fx), wakes));
  return step;
}

Result<void> Cluster::RecordStepExit(api::JobId id, const std::string& session, int exit_code) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  return Apply(core::RecordStepExit(state_, context_, id, session, exit_code, Now()), wakes);
}

Result<api::Job> Cluster::EndAllocation(api::JobId id, int exit_code, int signal) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Effects fx = COHORT_TRY(core::EndAllocation(state_, context_, id, exit_code, signal, Now()));
  COHORT_TRY_VOID(Apply(std::move(fx), wakes));
  return core::GetJob(state_, id);
}

}  // namespace cohort::head
