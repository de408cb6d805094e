// SqliteStateStore-only behaviour: persistence across reopen, id reuse, refusing files
// that are not ours without touching them, schema versions, corrupt rows, and rollback
// of a transaction that fails inside SQLite.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "store/sqlite_state_store.h"
#include "store/state_store.h"
#include "store_test_util.h"

namespace cohort::store {
namespace {

using testing::ExpectJobEq;
using testing::ExpectNodeEq;
using testing::FullJob;
using testing::FullNode;
using testing::ReadFileBytes;
using testing::SmallJob;
using testing::TempDir;
using testing::WriteFileBytes;

// Runs SQL on the file through a separate raw connection (what another process or a
// person with the sqlite3 shell would do).
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

std::string RawQuery(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0)) {
    out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  } else {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

std::unique_ptr<StateStore> MustOpen(const std::string& path) {
  auto store = OpenSqliteStateStore(path);
  EXPECT_TRUE(store) << store.error().ToString();
  return store ? std::move(*store) : nullptr;
}

TEST(SqliteStateStoreTest, DataSurvivesCloseAndReopen) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  api::Job full = FullJob(7);
  api::Job small = SmallJob("small");
  {
    auto store = MustOpen(path);
    ASSERT_TRUE(store);
    full.id = store->CreateJob(full)->id;
    small.id = store->CreateJob(small)->id;
    small.state = api::JobState::kSucceeded;
    small.exit_code = 0;
    ASSERT_TRUE(store->Write({.jobs = {small}, .nodes = {FullNode("n1"), FullNode("n0", 0)},
                              .meta = {{"cluster_id", "abc"}}}));
  }
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs) << jobs.error().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  ExpectJobEq(full, (*jobs)[0], "full job");
  ExpectJobEq(small, (*jobs)[1], "small job");
  auto nodes = store->LoadNodes();
  ASSERT_TRUE(nodes) << nodes.error().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  ExpectNodeEq(FullNode("n0", 0), (*nodes)[0]);
  ExpectNodeEq(FullNode("n1"), (*nodes)[1]);
  EXPECT_EQ(store->GetMeta("cluster_id").value(), std::optional<std::string>("abc"));
}

TEST(SqliteStateStoreTest, FileHasWalModeSchemaVersionAndColumns) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  api::Job job = SmallJob();
  job.submit_ms = 4242;
  job.id = store->CreateJob(job)->id;
  job.state = api::JobState::kRunning;
  ASSERT_TRUE(store->Write({.jobs = {job}}));
  EXPECT_EQ(RawQuery(path, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), "2");
  EXPECT_EQ(RawQuery(path, "SELECT state || ' ' || submit_ms FROM jobs WHERE id = " + std::to_string(job.id)),
            "RUNNING 4242");
  // The body carries the assigned id.
  std::string body = RawQuery(path, "SELECT body FROM jobs WHERE id = " + std::to_string(job.id));
  EXPECT_NE(body.find("\"id\":" + std::to_string(job.id)), std::string::npos) << body;
}

TEST(SqliteStateStoreTest, IdsNotReusedAfterReopenEvenIfHighestRowIsGone) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  api::JobId last = 0;
  {
    auto store = MustOpen(path);
    ASSERT_TRUE(store);
    for (int i = 0; i < 3; ++i) last = store->CreateJob(SmallJob())->id;
  }
  // The API never deletes; a person with the sqlite3 shell might. A plain rowid table
  // would hand out `last` again.
  RawExec(path, "DELETE FROM jobs WHERE id = " + std::to_string(last));
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  auto next = store->CreateJob(SmallJob());
  ASSERT_TRUE(next) << next.error().ToString();
  EXPECT_GT(next->id, last);
}

TEST(SqliteStateStoreTest, EmptyFileIsInitialized) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  WriteFileBytes(path, "");
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->CreateJob(SmallJob()));
}

TEST(SqliteStateStoreTest, GarbageFileIsRefusedAndUntouched) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  for (std::string bytes : {std::string("hello"), std::string(8192, 'x')}) {
    WriteFileBytes(path, bytes);
    auto store = OpenSqliteStateStore(path);
    ASSERT_FALSE(store);
    EXPECT_EQ(store.error().code, ErrorCode::kInvalidArgument) << store.error().ToString();
    EXPECT_NE(store.error().message.find(path + " is not a Cohort state database"), std::string::npos)
        << store.error().message;
    EXPECT_EQ(ReadFileBytes(path), bytes);
  }
}

TEST(SqliteStateStoreTest, ForeignSqliteDatabaseIsRefusedAndUntouched) {
  TempDir dir;
  struct Case {
    std::string name;
    std::string sql;
  };
  for (const Case& c : {Case{"plain", "CREATE TABLE foo(x); INSERT INTO foo VALUES (1);"},
                        Case{"versioned", "CREATE TABLE jobs(x); PRAGMA user_version = 7;"},
                        Case{"versioned_empty", "PRAGMA user_version = 1;"},
                        Case{"wal", "PRAGMA journal_mode = WAL; CREATE TABLE foo(x); INSERT INTO foo VALUES (2);"}}) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.File(c.name + ".db");
    RawExec(path, c.sql);
    const std::string before = ReadFileBytes(path);
    ASSERT_FALSE(before.empty());
    auto store = OpenSqliteStateStore(path);
    ASSERT_FALSE(store);
    EXPECT_EQ(store.error().code, ErrorCode::kInvalidArgument) << store.error().ToString();
    EXPECT_NE(store.error().message.find(path + " is not a Cohort state database"), std::string::npos)
        << store.error().message;
    EXPECT_EQ(ReadFileBytes(path), before) << "the file was modified";
  }
}

TEST(SqliteStateStoreTest, NewerSchemaIsFailedPrecondition) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  { ASSERT_TRUE(MustOpen(path)); }
  RawExec(path, "PRAGMA user_version = 3");
  const std::string before = ReadFileBytes(path);
  auto store = OpenSqliteStateStore(path);
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::kFailedPrecondition) << store.error().ToString();
  EXPECT_EQ(ReadFileBytes(path), before);
}

// A database the first release made (schema version 1, no audit table) is migrated on
// open: its jobs, nodes and meta stay, the audit log works, and the next open finds it
// current.
TEST(SqliteStateStoreTest, VersionOneDatabaseIsMigratedKeepingItsData) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  api::Job job = SmallJob("old");
  {
    auto store = MustOpen(path);
    ASSERT_TRUE(store);
    job.id = store->CreateJob(job)->id;
    ASSERT_TRUE(store->Write({.nodes = {FullNode("n1")}, .meta = {{"k", "v"}}}));
  }
  // Back to what version 1 was.
  RawExec(path, "DROP TABLE audit; PRAGMA user_version = 1;");
  ASSERT_EQ(RawQuery(path, "SELECT count(*) FROM sqlite_master WHERE name = 'audit'"), "0");
  for (int open = 0; open < 2; ++open) {
    SCOPED_TRACE(open == 0 ? "migrating open" : "next open");
    auto store = MustOpen(path);
    ASSERT_TRUE(store);
    EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), "2");
    auto got = store->GetJob(job.id);
    ASSERT_TRUE(got) << got.error().ToString();
    ExpectJobEq(job, *got);
    auto nodes = store->LoadNodes();
    ASSERT_TRUE(nodes && nodes->size() == 1u);
    EXPECT_EQ(store->GetMeta("k").value(), std::optional<std::string>("v"));
    api::AuditEntry e;
    e.time_ms = 5;
    e.caller = "anonymous";
    e.method = "POST";
    e.path = "/v1/jobs";
    e.status = 401;
    ASSERT_TRUE(store->AppendAudit({e}));
    auto rows = store->QueryAudit({});
    ASSERT_TRUE(rows) << rows.error().ToString();
    EXPECT_EQ(rows->size(), size_t(open + 1));
  }
}

TEST(SqliteStateStoreTest, UnopenablePathIsAnError) {
  TempDir dir;
  auto store = OpenSqliteStateStore(dir.File("no/such/dir/state.db"));
  ASSERT_FALSE(store);
  EXPECT_EQ(store.error().code, ErrorCode::kInvalidArgument) << store.error().ToString();
  auto empty = OpenSqliteStateStore("");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
}

TEST(SqliteStateStoreTest, CorruptJobRowIsInternalNamingTheJob) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  api::JobId good = store->CreateJob(SmallJob())->id;
  api::JobId bad_json = store->CreateJob(SmallJob())->id;
  api::JobId bad_job = store->CreateJob(SmallJob())->id;
  api::JobId wrong_id = store->CreateJob(SmallJob())->id;
  RawExec(path, "UPDATE jobs SET body = '{\"id\": ' WHERE id = " + std::to_string(bad_json));
  RawExec(path, "UPDATE jobs SET body = '{\"id\": " + std::to_string(bad_job) +
                    ", \"state\": \"PENDING\"}' WHERE id = " + std::to_string(bad_job));
  RawExec(path, "UPDATE jobs SET body = (SELECT body FROM jobs WHERE id = " + std::to_string(good) +
                    ") WHERE id = " + std::to_string(wrong_id));

  EXPECT_TRUE(store->GetJob(good));
  for (api::JobId id : {bad_json, bad_job, wrong_id}) {
    auto got = store->GetJob(id);
    ASSERT_FALSE(got) << "job " << id;
    EXPECT_EQ(got.error().code, ErrorCode::kInternal) << got.error().ToString();
    EXPECT_NE(got.error().message.find("job " + std::to_string(id)), std::string::npos) << got.error().message;
  }
  auto all = store->LoadJobs();
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error().code, ErrorCode::kInternal);
  EXPECT_NE(all.error().message.find("job " + std::to_string(bad_json)), std::string::npos)
      << all.error().message;
}

TEST(SqliteStateStoreTest, CorruptNodeRowIsInternalNamingTheNode) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Write({.nodes = {FullNode("n1")}}));
  RawExec(path, "UPDATE nodes SET body = '[1,2' WHERE name = 'n1'");
  auto nodes = store->LoadNodes();
  ASSERT_FALSE(nodes);
  EXPECT_EQ(nodes.error().code, ErrorCode::kInternal);
  EXPECT_NE(nodes.error().message.find("'n1'"), std::string::npos) << nodes.error().message;
}

// A trigger makes SQLite fail in the middle of a transaction: the error carries SQLite's
// message, and everything the transaction did before is rolled back.
TEST(SqliteStateStoreTest, FailureInsideTransactionRollsBackWithSqliteMessage) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  api::Job job = *store->CreateJob(SmallJob("before"));
  RawExec(path, "CREATE TRIGGER fail_nodes BEFORE INSERT ON nodes BEGIN "
                "SELECT RAISE(ABORT, 'injected node failure'); END;");
  api::Job changed = job;
  changed.reason = "must not stick";
  auto r = store->Write({.jobs = {changed}, .nodes = {FullNode("n1")}, .meta = {{"k", "v"}}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInternal);
  EXPECT_NE(r.error().message.find("injected node failure"), std::string::npos) << r.error().message;
  EXPECT_EQ(store->GetJob(job.id)->reason, "");
  EXPECT_EQ(store->GetMeta("k").value(), std::nullopt);

  // CreateJob's second statement fails: the inserted row must not survive.
  RawExec(path, "DROP TRIGGER fail_nodes; CREATE TRIGGER fail_jobs BEFORE UPDATE ON jobs BEGIN "
                "SELECT RAISE(ABORT, 'injected job failure'); END;");
  auto created = store->CreateJob(SmallJob("doomed"));
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().message.find("injected job failure"), std::string::npos)
      << created.error().message;
  EXPECT_EQ(store->LoadJobs()->size(), 1u);

  // The store keeps working once the cause is gone.
  RawExec(path, "DROP TRIGGER fail_jobs");
  ASSERT_TRUE(store->Write({.jobs = {changed}, .nodes = {FullNode("n1")}}));
  EXPECT_EQ(store->GetJob(job.id)->reason, "must not stick");
  auto again = store->CreateJob(SmallJob("after"));
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_GT(again->id, job.id);
}

}  // namespace
}  // namespace cohort::store
