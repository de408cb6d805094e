#include "store/memory_state_store.h"

#include <utility>

#include "store/records.h"

namespace cohort::store {

Result<std::vector<api::JobId>> MemoryStateStore::Commit(const WriteBatch& batch) {
  // Encode everything first, so that nothing is applied unless everything can be.
  std::vector<json> created;
  for (const auto& job : batch.create) {
    api::Job j = job;
    j.id = 0;
    created.push_back(COHORT_TRY(JobRecord(j)));
  }
  std::vector<std::pair<api::JobId, std::string>> jobs;
  for (const auto& job : batch.jobs) jobs.emplace_back(job.id, DumpRecord(COHORT_TRY(JobRecord(job))));
  std::vector<std::pair<std::string, std::string>> nodes;
  for (const auto& node : batch.nodes) nodes.emplace_back(node.name, DumpRecord(api::ToJson(node)));

  std::lock_guard lock(mu_);
  const api::JobId first = last_id_ + 1;
  const api::JobId last = last_id_ + static_cast<api::JobId>(created.size());
  for (const auto& [id, record] : jobs) {
    if (!jobs_.contains(id) && (id < first || id > last)) {
      return Errorf(ErrorCode::kNotFound, "job {} does not exist", id);
    }
  }
  std::vector<api::JobId> ids;
  for (auto& record : created) {
    api::JobId id = ++last_id_;
    record["id"] = id;
    jobs_[id] = DumpRecord(record);
    ids.push_back(id);
  }
  for (auto& [id, record] : jobs) jobs_[id] = std::move(record);
  for (auto& [name, record] : nodes) nodes_[name] = std::move(record);
  for (const auto& name : batch.remove_nodes) nodes_.erase(name);
  for (const auto& [key, value] : batch.meta) meta_[key] = value;
  return ids;
}

Result<api::Job> MemoryStateStore::GetJob(api::JobId id) {
  std::string record;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return Errorf(ErrorCode::kNotFound, "job {} does not exist", id);
    record = it->second;
  }
  return DecodeJobRecord(id, record);
}

Result<std::vector<api::Job>> MemoryStateStore::LoadJobs() {
  std::map<api::JobId, std::string> records;
  {
    std::lock_guard lock(mu_);
    records = jobs_;
  }
  std::vector<api::Job> out;
  out.reserve(records.size());
  for (const auto& [id, record] : records) out.push_back(COHORT_TRY(DecodeJobRecord(id, record)));
  return out;
}

Result<std::vector<api::Node>> MemoryStateStore::LoadNodes() {
  std::map<std::string, std::string> records;
  {
    std::lock_guard lock(mu_);
    records = nodes_;
  }
  std::vector<api::Node> out;
  out.reserve(records.size());
  for (const auto& [name, record] : records) out.push_back(COHORT_TRY(DecodeNodeRecord(name, record)));
  return out;
}

Result<std::optional<std::string>> MemoryStateStore::GetMeta(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = meta_.find(key);
  if (it == meta_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

Result<void> MemoryStateStore::AppendAudit(const std::vector<api::AuditEntry>& entries) {
  std::lock_guard lock(mu_);
  for (const auto& e : entries) {
    api::AuditEntry row = e;
    row.id = ++last_audit_id_;
    audit_[row.id] = std::move(row);
  }
  return {};
}

Result<std::vector<api::AuditEntry>> MemoryStateStore::QueryAudit(const AuditQuery& q) {
  std::vector<api::AuditEntry> out;
  std::lock_guard lock(mu_);
  auto it = q.before_id > 0 ? audit_.lower_bound(q.before_id) : audit_.end();
  while (it != audit_.begin() && out.size() < q.limit) {
    --it;
    const api::AuditEntry& e = it->second;
    if (e.time_ms < q.since_ms || e.time_ms >= q.until_ms) continue;
    if (!q.user.empty() && e.user != q.user) continue;
    out.push_back(e);
  }
  return out;
}

Result<int64_t> MemoryStateStore::TrimAudit(int64_t before_ms, int64_t max_rows) {
  std::lock_guard lock(mu_);
  int64_t deleted = 0;
  // Rows with ids up to keep_from go: the newest max_rows ids stay.
  const int64_t keep_from = max_rows > 0 && !audit_.empty() ? audit_.rbegin()->first - max_rows : 0;
  for (auto it = audit_.begin(); it != audit_.end();) {
    if (it->second.time_ms < before_ms || it->first <= keep_from) {
      it = audit_.erase(it);
      ++deleted;
    } else {
      ++it;
    }
  }
  return deleted;
}

std::unique_ptr<StateStore> NewMemoryStateStore() { return std::make_unique<MemoryStateStore>(); }

}  // namespace cohort::store
