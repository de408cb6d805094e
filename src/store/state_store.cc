#include "store/state_store.h"

namespace cohort::store {

Result<api::Job> StateStore::CreateJob(api::Job job) {
  WriteBatch batch;
  batch.create.push_back(std::move(job));
  std::vector<api::JobId> ids = COHORT_TRY(Commit(batch));
  api::Job created = std::move(batch.create.front());
  created.id = ids.front();
  return created;
}

Result<void> StateStore::Write(const WriteBatch& batch) {
  COHORT_TRY_VOID(Commit(batch));
  return {};
}

}  // namespace cohort::store
