// MemoryStateStore: a StateStore that keeps everything in this process's memory, for tests.
//
// Same semantics as SqliteStateStore, checked by the shared suite in tests/store: ids
// start at 1, increase and are never reused; a Commit is all-or-nothing (an unknown job id
// is kNotFound and nothing is applied); records are kept as the same JSON text, so what
// GetJob returns is exactly what a SqliteStateStore would return, and a job that would not
// load back is refused the same way. Nothing survives the object.
//
// Threads: every method may be called from any thread; each takes `mu_` for its duration.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "store/state_store.h"

namespace cohort::store {

class MemoryStateStore final : public StateStore {
 public:
  MemoryStateStore() = default;

  Result<std::vector<api::JobId>> Commit(const WriteBatch& batch) override;
  Result<api::Job> GetJob(api::JobId id) override;
  Result<std::vector<api::Job>> LoadJobs() override;
  Result<std::vector<api::Node>> LoadNodes() override;
  Result<std::optional<std::string>> GetMeta(const std::string& key) override;
  Result<void> AppendAudit(const std::vector<api::AuditEntry>& entries) override;
  Result<std::vector<api::AuditEntry>> QueryAudit(const AuditQuery& q) override;
  Result<int64_t> TrimAudit(int64_t before_ms, int64_t max_rows) override;

 private:
  std::mutex mu_;
  api::JobId last_id_ = 0;                    // guarded by mu_; the highest id ever given
  std::map<api::JobId, std::string> jobs_;    // guarded by mu_; id → record
  std::map<std::string, std::string> nodes_;  // guarded by mu_; name → record
  std::map<std::string, std::string> meta_;   // guarded by mu_
  int64_t last_audit_id_ = 0;                 // guarded by mu_; the highest audit id ever given
  std::map<int64_t, api::AuditEntry> audit_;  // guarded by mu_; id → row
};

}  // namespace cohort::store
