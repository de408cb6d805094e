// Cluster's job arrays (core/arrays.h): elements are created through the same commit
// rounds as submissions, each in the round that stores its array's shrunk index set.
#include "head/cluster.h"
#include "head/core/arrays.h"

namespace cohort::head {

void Cluster::StageArrayElements(Wakes& wakes) {
  if (state_.open_arrays.empty()) return;
  core::ArrayElements made = core::SettleArrays(state_, context_, Now());
  for (api::Job& job : made.create) {
    array_creations_.push_back(Creation{std::move(job), std::nullopt});
    creations_.push_back(&array_creations_.back());
  }
  Stage(std::move(made.effects), wakes);  // the arrays' records, in the same round
}

void Cluster::SettleArrayCreations(Wakes& wakes) {
  for (auto it = array_creations_.begin(); it != array_creations_.end();) {
    if (!it->result) {
      ++it;  // taken by a later round
      continue;
    }
    if (!*it->result) Stage(core::ReturnArrayElement(state_, context_, it->job, Now()), wakes);
    it = array_creations_.erase(it);
  }
}

Result<api::JobId> Cluster::ResolveJob(const api::JobRef& ref) const {
  if (!ref.is_element()) return ref.job;
  MutexLock lock(mu_);
  return core::ArrayElementId(state_, ref.job, ref.task);
}

Result<api::Job> Cluster::CancelArrayTask(api::JobId array, int64_t task) {
  Wakes wakes(*this);
  MutexLock lock(mu_);
  const auto element = core::ArrayElementId(state_, array, task);
  core::Effects fx = COHORT_TRY(core::CancelArrayTask(state_, context_, array, task, Now()));
  COHORT_TRY_VOID(Apply(std::move(fx), wakes));
  return state_.jobs.at(element ? *element : array);
}

std::map<std::string, int64_t> Cluster::ArraySummary(api::JobId id) const {
  MutexLock lock(mu_);
  auto it = state_.jobs.find(id);
  if (it == state_.jobs.end() || !it->second.spec.is_array()) return {};
  return core::ArraySummary(state_, it->second);
}

std::string Cluster::FailedArrayIndices(api::JobId id) const {
  MutexLock lock(mu_);
  auto it = state_.jobs.find(id);
  if (it == state_.jobs.end() || !it->second.spec.is_array()) return {};
  return core::FailedArrayIndices(state_, it->second);
}

Result<std::vector<api::Job>> Cluster::ArrayElementJobs(api::JobId id) const {
  MutexLock lock(mu_);
  auto it = state_.jobs.find(id);
  if (it == state_.jobs.end()) return Errorf(ErrorCode::kNotFound, "job {} not found", id);
  if (!it->second.spec.is_array()) return Errorf(ErrorCode::kNotFound, "job {} is not a job array or sweep", id);
  std::vector<api::Job> out;
  if (auto rt = state_.arrays.find(id); rt != state_.arrays.end()) {
    for (const auto& [task, element] : rt->second.elements) out.push_back(state_.jobs.at(element));
  }
  return out;
}

}  // namespace cohort::head
