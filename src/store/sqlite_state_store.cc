#include "store/sqlite_state_store.h"

#include <sqlite3.h>

#include <utility>

#include "common/log.h"
#include "store/records.h"

namespace cohort::store {
namespace {

constexpr int64_t kSchemaVersion = 1;
// PRAGMA application_id of a Cohort state database: "Cohr".
constexpr int64_t kApplicationId = 0x436f6872;

constexpr std::string_view kSchemaSql = R"sql(
CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT NULL,
                  submit_ms INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE nodes(name TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
PRAGMA application_id = 1131374706;
PRAGMA user_version = 1;
)sql";
static_assert(kApplicationId == 1131374706 && kSchemaVersion == 1, "keep kSchemaSql in step");

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

enum class FileKind { kEmpty, kCohort };

// Decides, by reading only, whether the file is a fresh (empty) database or a Cohort
// state database this binary understands.
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
  if (version < kSchemaVersion) {
    return Errorf(ErrorCode::kInternal, "{} is a damaged Cohort state database (schema version {})", path,
                  version);
  }
  return FileKind::kCohort;
}

}  // namespace

void SqliteStateStore::StmtDeleter::operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }

SqliteStateStore::SqliteStateStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

SqliteStateStore::~SqliteStateStore() {
  std::lock_guard lock(mu_);
  for (Stmt* s : {&begin_, &commit_, &rollback_, &insert_job_, &update_job_, &select_job_,
                  &select_jobs_, &upsert_node_, &select_nodes_, &upsert_meta_, &select_meta_}) {
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
  if (kind == FileKind::kEmpty) COHORT_TRY_VOID(store->InitSchemaLocked());

  store->insert_job_ = COHORT_TRY(store->PrepareLocked(
      "INSERT INTO jobs(state, submit_ms, body) VALUES(?1, ?2, '')"));
  store->update_job_ = COHORT_TRY(store->PrepareLocked(
      "UPDATE jobs SET state = ?2, submit_ms = ?3, body = ?4 WHERE id = ?1"));
  store->select_job_ = COHORT_TRY(store->PrepareLocked("SELECT body FROM jobs WHERE id = ?1"));
  store->select_jobs_ = COHORT_TRY(store->PrepareLocked("SELECT id, body FROM jobs ORDER BY id"));
  store->upsert_node_ = COHORT_TRY(store->PrepareLocked(
      "INSERT INTO nodes(name, body) VALUES(?1, ?2) ON CONFLICT(name) DO UPDATE SET body = excluded.body"));
  store->select_nodes_ = COHORT_TRY(store->PrepareLocked("SELECT name, body FROM nodes ORDER BY name"));
  store->upsert_meta_ = COHORT_TRY(store->PrepareLocked(
      "INSERT INTO meta(key, value) VALUES(?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value"));
  store->select_meta_ = COHORT_TRY(store->PrepareLocked("SELECT value FROM meta WHERE key = ?1"));
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
    // Another process may have created the schema since Classify looked.
    if (COHORT_TRY(Classify(db_, path_)) == FileKind::kCohort) return {};
    LOG_INFO("creating Cohort state database {}", path_);
    return Exec(db_, path_, std::string(kSchemaSql), "creating the schema");
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

Result<std::unique_ptr<StateStore>> OpenSqliteStateStore(const std::string& path) {
  auto store = COHORT_TRY(SqliteStateStore::Open(path));
  return std::unique_ptr<StateStore>(std::move(store));
}

}  // namespace cohort::store
