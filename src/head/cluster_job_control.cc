// Cluster's job control (hold, release, update, requeue): each is one transition of the core
// (core/job_control.h), applied and made durable like Cancel.
#include "common/log.h"
#include "head/cluster.h"

namespace cohort::head {

Result<api::Job> Cluster::Hold(api::JobId id, const std::string& by) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Effects fx = COHORT_TRY(core::Hold(state_, context_, id, by, Now()));
  auto stored = Apply(std::move(fx), wakes);
  if (!stored) return std::unexpected(stored.error());
  return core::GetJob(state_, id);
}

Result<api::Job> Cluster::Release(api::JobId id) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Effects fx = COHORT_TRY(core::Release(state_, context_, id, Now()));
  auto stored = Apply(std::move(fx), wakes);
  if (!stored) return std::unexpected(stored.error());
  return core::GetJob(state_, id);
}

Result<api::Job> Cluster::Requeue(api::JobId id, const std::string& by, bool hold) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Effects fx = COHORT_TRY(core::Requeue(state_, context_, id, by, hold, Now()));
  auto stored = Apply(std::move(fx), wakes);
  if (!stored) return std::unexpected(stored.error());
  return core::GetJob(state_, id);
}

Result<api::Job> Cluster::Update(api::JobId id, const core::JobUpdate& update) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  core::Effects fx = COHORT_TRY(core::Update(state_, context_, id, update, Now()));
  auto stored = Apply(std::move(fx), wakes);
  if (!stored) return std::unexpected(stored.error());
  return core::GetJob(state_, id);
}

}  // namespace cohort::head
