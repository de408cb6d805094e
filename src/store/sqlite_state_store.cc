#include "store/sqlite_state_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "common/log.h"
#include "store/records.h"

namespace cohort::store {
namespace {

constexpr int64_t kSchemaVersion = 2;
// PRAGMA application_id of a Cohort state database: "Cohr".
constexpr int64_t kApplicationId = 0x436f6872;

// Version 1, as the first release made it. A new file gets it and then every migration,
// so a new database and a migrated one are the same by construction.
constexpr std::string_view kSchemaV1Sql = R"sql(
CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT NULL,
                  submit_ms INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE nodes(name TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
PRAGMA application_id = 1131374706;
PRAGMA user_version = 1;
)sql";
static_assert(kApplicationId == 1131374706, "keep kSchemaV1Sql in step");

// Migrations, each in the transaction that checked the version it starts from; each ends
// by setting user_version to `to`. Plain SQL (no SQLite-only types), so that another
// StateStore can create the same tables.
struct Migration {
  int64_t to;
  std::string_view sql;
};
constexpr Migration kMigrations[] = {
    // 2: the audit log (head/audit.h). `username` and not `user`, which PostgreSQL reserves.
    {2, R"sql(
CREATE TABLE audit(id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL, caller TEXT NOT NULL,
                   username TEXT NOT NULL, token_id TEXT NOT NULL, node TEXT NOT NULL, client TEXT NOT NULL,
                   method TEXT NOT NULL, path TEXT NOT NULL, status INTEGER NOT NULL, error TEXT NOT NULL,
                   job_id INTEGER NOT NULL);
CREATE INDEX audit_by_time ON audit(time_ms);
CREATE INDEX audit_by_user ON audit(username, id);
PRAGMA user_version = 2;
)sql"},
};
static_assert(std::size(kMigrations) == kSchemaVersion - 1 && kMigrations[std::size(kMigrations) - 1].to == kSchemaVersion,
              "one migration per version after the first");

constexpr std::string_view kAuditColumns =
    "id, time_ms, caller, username, token_id, node, client, method, path, status, error, job_id";

// "state database PATH: WHAT: ERRMSG (sqlite error N)". A lock held past busy_timeout is
// kUnavailable (retrying may help); anything else is kInternal.
Error SqlError(sqlite3* db, std::string_view path, std::string_view what) {
  int rc = db ? sqlite3_extended_errcode(db) : SQLITE_NOMEM;
  ErrorCode code = ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
                       ? ErrorCode::kUnavailable
                       : ErrorCode::kInternal;
  const char* msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return Error{code, fmt::format("state database {}: {}: {} (sqlite error {})", path, what, msg, rc), {}};
}

// One use of a cached statement: binds, steps, reads columns, and resets the statement
// (clearing its bindings) when it goes out of scope.
class Call {
 public:
  Call(sqlite3_stmt* stmt, std::string_view path) : stmt_(stmt), path_(path) {}
  ~Call() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  Call& BindText(int index, std::string_view text) {
    Note(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
    return *this;
  }
  Call& BindInt(int index, int64_t value) {
    Note(sqlite3_bind_int64(stmt_, index, value));
    return *this;
  }

  // true: a row is ready to read; false: the statement is done.
  Result<bool> Step(std::string_view what) {
    if (bind_rc_ != SQLITE_OK) return std::unexpected(SqlError(db(), path_, what));
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return std::unexpected(SqlError(db(), path_, what));
  }
  Result<void> Run(std::string_view what) {
    COHORT_TRY_VOID(Step(what));
    return {};
  }

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  std::string Text(int column) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
  }

 private:
  sqlite3* db() const { return sqlite3_db_handle(stmt_); }
  void Note(int rc) {
    if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }

  sqlite3_stmt* stmt_;
  std::string_view path_;
  int bind_rc_ = SQLITE_OK;
};

Result<void> Exec(sqlite3* db, std::string_view path, const std::string& sql, std::string_view what) {
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    return std::unexpected(SqlError(db, path, what));
  }
  return {};
}

// The first column of the first row of a one-off query.
Result<std::string> QueryText(sqlite3* db, std::string_view path, const std::string& sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
    return std::unexpected(SqlError(db, path, sql));
  }
  std::string out;
  int rc = sqlite3_step(raw);
  if (rc == SQLITE_ROW) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
    if (p) out.assign(p, static_cast<size_t>(sqlite3_column_bytes(raw, 0)));
  }
  Result<std::string> result = out;
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) result = std::unexpected(SqlError(db, path, sql));
  sqlite3_finalize(raw);
  return result;
}

Result<int64_t> QueryInt(sqlite3* db, std::string_view path, const std::string& sql) {
  std::string text = COHORT_TRY(QueryText(db, path, sql));
  try {
    return text.empty() ? 0 : std::stoll(text);
  } catch (const std::exception&) {
    return Errorf(ErrorCode::kInternal, "state database {}: {} returned '{}'", path, sql, text);
  }
}

enum class FileKind { kEmpty, kOlder, kCohort };

// Decides, by reading only, whether the file is a fresh (empty) database, a Cohort state
// database of an older schema (to migrate), or one of this binary's.
Result<FileKind> Classify(sqlite3* db, const std::string& path) {
  auto app_id = QueryInt(db, path, "PRAGMA application_id");
  if (!app_id) {
    if ((sqlite3_errcode(db) & 0xff) == SQLITE_NOTADB) {
      return Errorf(ErrorCode::kInvalidArgument, "{} is not a Cohort state database (not a SQLite file)",
                    path);
    }
    return std::unexpected(app_id.error());
  }
  int64_t version = COHORT_TRY(QueryInt(db, path, "PRAGMA user_version"));
  int64_t objects = COHORT_TRY(QueryInt(db, path, "SELECT count(*) FROM sqlite_master"));
  if (*app_id == 0 && version == 0 && objects == 0) return FileKind::kEmpty;
  if (*app_id != kApplicationId) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "{} is not a Cohort state database (a SQLite database of another program)", path);
  }
  if (version > kSchemaVersion) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "{} has state schema version {}, newer than this cohort understands ({}); run a "
                  "newer cohort",
                  path, version, kSchemaVersion);
  }
  if (version < 1) {
    return Errorf(ErrorCode::kInternal, "{} is a damaged Cohort state database (schema version {})", path,
                  version);
  }
  return version < kSchemaVersion ? FileKind::kOlder : FileKind::kCohort;
}

}  // namespace

void SqliteStateStore::StmtDeleter::operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }

SqliteStateStore::SqliteStateStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

SqliteStateStore::~SqliteStateStore() {
  std::lock_guard lock(mu_);
  for (Stmt* s : {&begin_, &commit_, &rollback_, &insert_job_, &update_job_, &select_job_, &select_jobs_,
                  &upsert_node_, &select_nodes_, &delete_node_, &upsert_meta_, &select_meta_, &insert_audit_,
                  &select_audit_, &select_audit_of_user_, &trim_audit_}) {
    s->reset();
  }
  sqlite3_close_v2(db_);
}

Result<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(const std::string& path) {
  if (path.empty()) return MakeError(ErrorCode::kInvalidArgument, "the state database path is empty");
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  // The store owns the handle from here on, even on failure (sqlite3_open_v2 may return one).
  std::unique_ptr<SqliteStateStore> store(new SqliteStateStore(path, raw));
  if (rc != SQLITE_OK) {
    return Errorf(ErrorCode::kInvalidArgument, "cannot open state database {}: {}", path,
                  raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc));
  }
  std::lock_guard lock(store->mu_);
  sqlite3* db = store->db_;
  sqlite3_extended_result_codes(db, 1);
  // Until the file is known to be ours, do nothing that writes to it: closing the last
  // connection of a WAL database would otherwise checkpoint it.
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  COHORT_TRY_VOID(Exec(db, path, "PRAGMA busy_timeout = 5000", "setting busy_timeout"));
  FileKind kind = COHORT_TRY(Classify(db, path));

  std::string mode = COHORT_TRY(QueryText(db, path, "PRAGMA journal_mode = WAL"));
  if (mode != "wal") {
    return Errorf(ErrorCode::kInternal, "state database {}: cannot use WAL mode (journal_mode is '{}')",
                  path, mode);
  }
  COHORT_TRY_VOID(Exec(db, path, "PRAGMA synchronous = FULL", "setting synchronous"));
  COHORT_TRY_VOID(Exec(db, path, "PRAGMA foreign_keys = ON", "setting foreign_keys"));
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, nullptr);

  store->begin_ = COHORT_TRY(store->PrepareLocked("BEGIN IMMEDIATE"));
  store->commit_ = COHORT_TRY(store->PrepareLocked("COMMIT"));
  store->rollback_ = COHORT_TRY(store->PrepareLocked("ROLLBACK"));
  if (kind != FileKind::kCohort) COHORT_TRY_VOID(store->InitSchemaLocked());

  store->insert_job_ = COHORT_TRY(store->PrepareLocked(
      "INSERT INTO jobs(state, submit_ms, body) VALUES(?1, ?2, '')"));
  store->update_job_ = COHORT_TRY(store->PrepareLocked(
      "UPDATE jobs SET state = ?2, submit_ms = ?3, body = ?4 WHERE id = ?1"));
  store->select_job_ = COHORT_TRY(store->PrepareLocked("SELECT body FROM jobs WHERE id = ?1"));
  store->select_jobs_ = COHORT_TRY(store->PrepareLocked("SELECT id, body FROM jobs ORDER BY id"));
  store->upsert_node_ = COHORT_TRY(store->PrepareLocked(
      "INSERT INTO nodes(name, body) VALUES(?1, ?2) ON CONFLICT(name) DO UPDATE SET body = excluded.body"));
  store->select_nodes_ = COHORT_TRY(store->PrepareLocked("SELECT name, body FROM nodes ORDER BY name"));
  store->delete_node_ = COHORT_TRY(store->PrepareLocked("DELETE FROM nodes WHERE name = ?1"));
  store->upsert_meta_ = COHORT_TRY(store->PrepareLocked(
      "INSERT INTO meta(key, value) VALUES(?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value"));
  store->select_meta_ = COHORT_TRY(store->PrepareLocked("SELECT value FROM meta WHERE key = ?1"));
  store->insert_audit_ = COHORT_TRY(store->PrepareLocked(
      "INSERT INTO audit(time_ms, caller, username, token_id, node, client, method, path, status, error, job_id) "
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"));
  // ?4 = 0: no cursor (ids start at 1).
  const std::string window = "time_ms >= ?1 AND time_ms < ?2 AND (?4 = 0 OR id < ?4)";
  store->select_audit_ = COHORT_TRY(store->PrepareLocked(fmt::format(
      "SELECT {} FROM audit WHERE {} AND ?3 = '' ORDER BY id DESC LIMIT ?5", kAuditColumns, window)));
  store->select_audit_of_user_ = COHORT_TRY(store->PrepareLocked(fmt::format(
      "SELECT {} FROM audit WHERE username = ?3 AND {} ORDER BY id DESC LIMIT ?5", kAuditColumns, window)));
  store->trim_audit_ = COHORT_TRY(store->PrepareLocked(
      "DELETE FROM audit WHERE time_ms < ?1 OR (?2 > 0 AND id <= (SELECT max(id) FROM audit) - ?2)"));
  return store;
}

Result<SqliteStateStore::Stmt> SqliteStateStore::PrepareLocked(std::string_view sql) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT,
                              &raw, nullptr);
  Stmt stmt(raw);
  if (rc != SQLITE_OK) return std::unexpected(SqlError(db_, path_, fmt::format("preparing '{}'", sql)));
  return stmt;
}

Result<void> SqliteStateStore::InitSchemaLocked() {
  return InTransactionLocked([&]() -> Result<void> {
    // Another process may have created or migrated the schema since Classify looked.
    const FileKind kind = COHORT_TRY(Classify(db_, path_));
    if (kind == FileKind::kCohort) return {};
    if (kind == FileKind::kEmpty) {
      LOG_INFO("creating Cohort state database {}", path_);
      COHORT_TRY_VOID(Exec(db_, path_, std::string(kSchemaV1Sql), "creating the schema"));
    }
    const int64_t from = COHORT_TRY(QueryInt(db_, path_, "PRAGMA user_version"));
    for (const Migration& m : kMigrations) {
      if (m.to <= from) continue;
      if (kind == FileKind::kOlder) LOG_INFO("state database {}: migrating the schema to version {}", path_, m.to);
      COHORT_TRY_VOID(Exec(db_, path_, std::string(m.sql), fmt::format("migrating the schema to version {}", m.to)));
    }
    return {};
  });
}

template <typename F>
Result<void> SqliteStateStore::InTransactionLocked(F&& body) {
  COHORT_TRY_VOID(Call(begin_.get(), path_).Run("BEGIN IMMEDIATE"));
  Result<void> result = body();
  if (result) {
    result = Call(commit_.get(), path_).Run("COMMIT");
    if (result) return result;
  }
  if (!sqlite3_get_autocommit(db_)) {
    if (auto r = Call(rollback_.get(), path_).Run("ROLLBACK"); !r) {
      LOG_ERROR("{}", r.error().message);
    }
  }
  return result;
}

Result<std::vector<api::JobId>> SqliteStateStore::Commit(const WriteBatch& batch) {
  std::vector<api::JobId> ids;
  if (batch.empty()) return ids;
  // Encode outside the lock; a job that would not load back fails the batch here.
  std::vector<json> created;
  created.reserve(batch.create.size());
  for (const auto& job : batch.create) {
    api::Job j = job;
    j.id = 0;
    created.push_back(COHORT_TRY(JobRecord(j)));
  }
  std::vector<std::string> job_records;
  job_records.reserve(batch.jobs.size());
  for (const auto& job : batch.jobs) job_records.push_back(DumpRecord(COHORT_TRY(JobRecord(job))));
  std::vector<std::string> node_records;
  node_records.reserve(batch.nodes.size());
  for (const auto& node : batch.nodes) node_records.push_back(DumpRecord(api::ToJson(node)));

  std::lock_guard lock(mu_);
  COHORT_TRY_VOID(InTransactionLocked([&]() -> Result<void> {
    ids.clear();
    for (size_t i = 0; i < batch.create.size(); ++i) {
      const api::Job& job = batch.create[i];
      const std::string state(api::JobStateName(job.state));
      COHORT_TRY_VOID(Call(insert_job_.get(), path_).BindText(1, state).BindInt(2, job.submit_ms)
                          .Run("creating a job"));
      const api::JobId id = sqlite3_last_insert_rowid(db_);
      created[i]["id"] = id;
      COHORT_TRY_VOID(Call(update_job_.get(), path_)
                          .BindInt(1, id)
                          .BindText(2, state)
                          .BindInt(3, job.submit_ms)
                          .BindText(4, DumpRecord(created[i]))
                          .Run(fmt::format("storing new job {}", id)));
      ids.push_back(id);
    }
    for (size_t i = 0; i < batch.jobs.size(); ++i) {
      const api::Job& job = batch.jobs[i];
      Call update(update_job_.get(), path_);
      COHORT_TRY_VOID(update.BindInt(1, job.id)
                          .BindText(2, api::JobStateName(job.state))
                          .BindInt(3, job.submit_ms)
                          .BindText(4, job_records[i])
                          .Run(fmt::format("updating job {}", job.id)));
      if (sqlite3_changes(db_) == 0) return Errorf(ErrorCode::kNotFound, "job {} does not exist", job.id);
    }
    for (size_t i = 0; i < batch.nodes.size(); ++i) {
      COHORT_TRY_VOID(Call(upsert_node_.get(), path_)
                          .BindText(1, batch.nodes[i].name)
                          .BindText(2, node_records[i])
                          .Run(fmt::format("storing node '{}'", batch.nodes[i].name)));
    }
    for (const auto& [key, value] : batch.meta) {
      COHORT_TRY_VOID(Call(upsert_meta_.get(), path_)
                          .BindText(1, key)
                          .BindText(2, value)
                          .Run(fmt::format("storing meta '{}'", key)));
    }
    for (const auto& name : batch.remove_nodes) {
      COHORT_TRY_VOID(Call(delete_node_.get(), path_).BindText(1, name).Run(fmt::format("removing node '{}'", name)));
    }
    return {};
  }));
  return ids;
}

Result<api::Job> SqliteStateStore::GetJob(api::JobId id) {
  std::string body;
  {
    std::lock_guard lock(mu_);
    Call select(select_job_.get(), path_);
    bool found = COHORT_TRY(select.BindInt(1, id).Step(fmt::format("reading job {}", id)));
    if (!found) return Errorf(ErrorCode::kNotFound, "job {} does not exist", id);
    body = select.Text(0);
  }
  return DecodeJobRecord(id, body);
}

Result<std::vector<api::Job>> SqliteStateStore::LoadJobs() {
  std::vector<std::pair<api::JobId, std::string>> rows;
  {
    std::lock_guard lock(mu_);
    Call select(select_jobs_.get(), path_);
    while (COHORT_TRY(select.Step("loading jobs"))) rows.emplace_back(select.Int(0), select.Text(1));
  }
  std::vector<api::Job> jobs;
  jobs.reserve(rows.size());
  for (const auto& [id, body] : rows) jobs.push_back(COHORT_TRY(DecodeJobRecord(id, body)));
  return jobs;
}

Result<std::vector<api::Node>> SqliteStateStore::LoadNodes() {
  std::vector<std::pair<std::string, std::string>> rows;
  {
    std::lock_guard lock(mu_);
    Call select(select_nodes_.get(), path_);
    while (COHORT_TRY(select.Step("loading nodes"))) rows.emplace_back(select.Text(0), select.Text(1));
  }
  std::vector<api::Node> nodes;
  nodes.reserve(rows.size());
  for (const auto& [name, body] : rows) nodes.push_back(COHORT_TRY(DecodeNodeRecord(name, body)));
  return nodes;
}

Result<std::optional<std::string>> SqliteStateStore::GetMeta(const std::string& key) {
  std::lock_guard lock(mu_);
  Call select(select_meta_.get(), path_);
  bool found = COHORT_TRY(select.BindText(1, key).Step(fmt::format("reading meta '{}'", key)));
  if (!found) return std::optional<std::string>();
  return std::optional<std::string>(select.Text(0));
}

Result<void> SqliteStateStore::AppendAudit(const std::vector<api::AuditEntry>& entries) {
  if (entries.empty()) return {};
  std::lock_guard lock(mu_);
  return InTransactionLocked([&]() -> Result<void> {
    for (const auto& e : entries) {
      COHORT_TRY_VOID(Call(insert_audit_.get(), path_)
                          .BindInt(1, e.time_ms)
                          .BindText(2, e.caller)
                          .BindText(3, e.user)
                          .BindText(4, e.token_id)
                          .BindText(5, e.node)
                          .BindText(6, e.client)
                          .BindText(7, e.method)
                          .BindText(8, e.path)
                          .BindInt(9, e.status)
                          .BindText(10, e.error)
                          .BindInt(11, e.job_id)
                          .Run("appending to the audit log"));
    }
    return {};
  });
}

Result<std::vector<api::AuditEntry>> SqliteStateStore::QueryAudit(const AuditQuery& q) {
  std::vector<api::AuditEntry> out;
  std::lock_guard lock(mu_);
  Call select(q.user.empty() ? select_audit_.get() : select_audit_of_user_.get(), path_);
  select.BindInt(1, q.since_ms)
      .BindInt(2, q.until_ms)
      .BindText(3, q.user)
      .BindInt(4, q.before_id)
      .BindInt(5, static_cast<int64_t>(std::min<size_t>(q.limit, INT64_MAX)));
  while (COHORT_TRY(select.Step("reading the audit log"))) {
    api::AuditEntry e;
    e.id = select.Int(0);
    e.time_ms = select.Int(1);
    e.caller = select.Text(2);
    e.user = select.Text(3);
    e.token_id = select.Text(4);
    e.node = select.Text(5);
    e.client = select.Text(6);
    e.method = select.Text(7);
    e.path = select.Text(8);
    e.status = static_cast<int>(select.Int(9));
    e.error = select.Text(10);
    e.job_id = select.Int(11);
    out.push_back(std::move(e));
  }
  return out;
}

Result<int64_t> SqliteStateStore::TrimAudit(int64_t before_ms, int64_t max_rows) {
  std::lock_guard lock(mu_);
  int64_t deleted = 0;
  COHORT_TRY_VOID(InTransactionLocked([&]() -> Result<void> {
    COHORT_TRY_VOID(Call(trim_audit_.get(), path_).BindInt(1, before_ms).BindInt(2, max_rows).Run("trimming the audit log"));
    deleted = sqlite3_changes64(db_);
    return {};
  }));
  return deleted;
}

Result<std::unique_ptr<StateStore>> OpenSqliteStateStore(const std::string& path) {
  auto store = COHORT_TRY(SqliteStateStore::Open(path));
  return std::unique_ptr<StateStore>(std::move(store));
}

}  // namespace cohort::store
