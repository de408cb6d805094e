// StateStore: durable storage of the head's state (jobs, nodes, a few meta values) and
// of its audit log.
//
// The head keeps its working state in memory and writes every change through a
// StateStore before it acknowledges it; on restart it loads everything back. A call
// returns only when its write is durable (a SqliteStateStore commit in WAL mode with
// synchronous=FULL survives kill -9 of the process and power loss of the machine).
// Implementations: SqliteStateStore (the embedded default) and MemoryStateStore (tests);
// both pass the shared suite in tests/store. All methods are thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/audit.h"
#include "api/types.h"
#include "common/error.h"

namespace cohort::store {

// New jobs and upserts applied in one atomic, durable transaction.
struct WriteBatch {
  std::vector<api::Job> create;  // new jobs, given the next ids in order (their `id` is ignored)
  std::vector<api::Job> jobs;    // each must already exist (created before, or earlier in `create`)
  std::vector<api::Node> nodes;  // inserted or replaced by name
  std::vector<std::pair<std::string, std::string>> meta;  // key → value
  std::vector<std::string> remove_nodes;  // deleted by name after the upserts (absent ones: nothing)

  bool empty() const {
    return create.empty() && jobs.empty() && nodes.empty() && meta.empty() && remove_nodes.empty();
  }
};

// Which rows of the audit log QueryAudit returns: all of these hold.
struct AuditQuery {
  int64_t since_ms = 0;                                    // time_ms >= since_ms
  int64_t until_ms = std::numeric_limits<int64_t>::max();  // time_ms < until_ms
  std::string user;                                        // "": any user; else user == this
  int64_t before_id = 0;                                   // > 0: id < before_id (the next page)
  size_t limit = 100;                                      // at most this many rows
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // Applies `batch` atomically: each job of `create` gets the next id (ids increase and
  // are never reused, even across restarts) and is stored, then every upsert. Returns the
  // ids given to `create`, in order. kInvalidArgument (and nothing written) if a job would
  // not load back through api::JobFromJson, e.g. an empty command or user; kNotFound (and
  // nothing written) if a job of `jobs` was never created.
  virtual Result<std::vector<api::JobId>> Commit(const WriteBatch& batch) = 0;

  // Commit of one new job: returns it with its id set.
  Result<api::Job> CreateJob(api::Job job);
  // Commit of upserts only.
  Result<void> Write(const WriteBatch& batch);

  // Returns kNotFound if no job has `id`.
  virtual Result<api::Job> GetJob(api::JobId id) = 0;
  // All jobs in id order.
  virtual Result<std::vector<api::Job>> LoadJobs() = 0;
  // All nodes in name order.
  virtual Result<std::vector<api::Node>> LoadNodes() = 0;
  // The value stored under `key`, or nullopt.
  virtual Result<std::optional<std::string>> GetMeta(const std::string& key) = 0;

  // ---- the audit log (head/audit.h) ----
  // Appends `entries` in one durable transaction, in order; each gets the next id (ids
  // increase and are never reused; an entry's own `id` is ignored).
  virtual Result<void> AppendAudit(const std::vector<api::AuditEntry>& entries) = 0;
  // The rows `q` selects, newest (highest id) first, at most q.limit.
  virtual Result<std::vector<api::AuditEntry>> QueryAudit(const AuditQuery& q) = 0;
  // Deletes the rows older than `before_ms` (time_ms < before_ms) and, when max_rows > 0,
  // those whose id is not among the newest max_rows ids (so at most max_rows stay);
  // returns how many went.
  virtual Result<int64_t> TrimAudit(int64_t before_ms, int64_t max_rows) = 0;
};

// Opens (creating if needed) the SQLite database at `path`. Fails with kInvalidArgument
// if the file exists but is not a Cohort state database (it is left untouched), and
// kFailedPrecondition if its schema is newer than this binary understands.
Result<std::unique_ptr<StateStore>> OpenSqliteStateStore(const std::string& path);

// A store that lives in memory only; for tests.
std::unique_ptr<StateStore> NewMemoryStateStore();

}  // namespace cohort::store
