// SqliteStateStore: the embedded StateStore, one SQLite database file.
//
// Schema version 2 (PRAGMA user_version = 2; PRAGMA application_id marks the file as
// Cohort's, so another program's database is recognised and left alone):
//   jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT, submit_ms INTEGER, body TEXT)
//   nodes(name TEXT PRIMARY KEY, body TEXT)
//   meta(key TEXT PRIMARY KEY, value TEXT)
//   audit(id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms, caller, username, token_id, node,
//         client, method, path, status, error, job_id)   -- since version 2; api/audit.h
// `body` is the record of store/records.h (the value's ToJson); `state` and `submit_ms`
// repeat the job's fields so that a later version can select without decoding.
// AUTOINCREMENT keeps the highest id ever given in sqlite_sequence, so ids are never
// reused, even after the highest row is gone.
//
// Versions: a new file gets version 1's schema and then every migration, in one
// transaction; a file of an older version is migrated on open (each migration checks the
// version it starts from inside its transaction), one of a newer version is refused.
//
// Durability: journal_mode=WAL, synchronous=FULL. Every write is one BEGIN IMMEDIATE ...
// COMMIT, and a call returns only after the commit's fsync of the WAL; on any failure the
// transaction is rolled back and the Error carries sqlite3_errmsg.
//
// Ownership and threads: the store owns one connection and its cached prepared
// statements. Every method may be called from any thread; one mutex (`mu_`) serializes
// them around the connection. A forked child must open its own store. Other processes
// may read the file; a second writer waits up to busy_timeout (5 s), then gets
// kUnavailable.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "store/state_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace cohort::store {

class SqliteStateStore final : public StateStore {
 public:
  // See OpenSqliteStateStore (state_store.h): creates the file and its schema if the file
  // is missing or empty; kInvalidArgument "PATH is not a Cohort state database" for any
  // other file that is not ours (left byte-for-byte untouched); kFailedPrecondition for a
  // newer schema; kInvalidArgument if the file cannot be opened at all.
  static Result<std::unique_ptr<SqliteStateStore>> Open(const std::string& path);

  ~SqliteStateStore() override;
  SqliteStateStore(const SqliteStateStore&) = delete;
  SqliteStateStore& operator=(const SqliteStateStore&) = delete;

  // StateStore. Each also fails with kUnavailable (the file is locked by another writer
  // past busy_timeout) or kInternal (an I/O or SQLite error; its message included).
  Result<std::vector<api::JobId>> Commit(const WriteBatch& batch) override;
  Result<api::Job> GetJob(api::JobId id) override;
  Result<std::vector<api::Job>> LoadJobs() override;
  Result<std::vector<api::Node>> LoadNodes() override;
  Result<std::optional<std::string>> GetMeta(const std::string& key) override;
  Result<void> AppendAudit(const std::vector<api::AuditEntry>& entries) override;
  Result<std::vector<api::AuditEntry>> QueryAudit(const AuditQuery& q) override;
  Result<int64_t> TrimAudit(int64_t before_ms, int64_t max_rows) override;

 private:
  struct StmtDeleter {
    void operator()(sqlite3_stmt* stmt) const;
  };
  using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

  SqliteStateStore(std::string path, sqlite3* db);

  // Prepares one statement for the cache. Requires mu_ held.
  Result<Stmt> PrepareLocked(std::string_view sql);
  // Creates the schema if the file is empty, or migrates an older one to this version,
  // re-checking inside the transaction in case another process got there first. Requires
  // mu_ held.
  Result<void> InitSchemaLocked();
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT; rolls back if `body` or the commit
  // fails and returns the first error. Requires mu_ held.
  template <typename F>
  Result<void> InTransactionLocked(F&& body);

  const std::string path_;
  std::mutex mu_;
  sqlite3* db_;  // guarded by mu_; owned, closed by the destructor
  // Cached statements; guarded by mu_ (they belong to db_).
  Stmt begin_, commit_, rollback_;
  Stmt insert_job_, update_job_, select_job_, select_jobs_;
  Stmt upsert_node_, select_nodes_, delete_node_;
  Stmt upsert_meta_, select_meta_;
  Stmt insert_audit_, select_audit_, select_audit_of_user_, trim_audit_;
};

}  // namespace cohort::store
