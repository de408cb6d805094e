// The audit log (head/audit.h): which requests get a row and what it holds, over HTTP
// against an in-process head (successes, refusals at every check and of bodies, none for a
// successful heartbeat, a failed one recorded); GET /v1/audit's filters, paging and the validation
// of each parameter; rows surviving a restart. Then the AuditLog alone over a store it
// can stall or fail: retention and row-cap trims on a fake clock, a full queue dropping
// and counting, a failed write reported by Flush, Stop writing what is queued.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "../common/raw_http.h"
#include "head/audit.h"
#include "head/router.h"
#include "head_server_fixture.h"

namespace cohort::head {
namespace {

class AuditTest : public HeadServerTest {
 protected:
  // Every row so far (written first), oldest first.
  std::vector<api::AuditEntry> Rows(const std::string& query = "") {
    json reply = GetJson("/v1/audit?limit=10000" + query);
    auto page = api::AuditPageFromJson(reply);
    EXPECT_TRUE(page) << page.error().message;
    return page ? page->entries : std::vector<api::AuditEntry>{};
  }

  // The error of GET /v1/audit?`query`: its status and field.
  std::pair<int, std::string> QueryError(const std::string& query) {
    auto r = http_->Get("/v1/audit?" + query);
    EXPECT_TRUE(r) << query;
    if (!r) return {0, ""};
    Error e = ErrorFromResponse(r->status, r->body);
    return {r->status, e.field};
  }

  // Registers node `name` over HTTP with the admin token; its credential.
  std::string RegisterOverHttp(const std::string& name) {
    auto r = http_->Post("/v1/agents/register",
                         json{{"name", name}, {"address", "127.0.0.1"}, {"incarnation", "i-" + name}, {"cpus", 1}}.dump(),
                         "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no reply");
    return r ? json::parse(r->body).value("node_credential", "") : "";
  }
};

TEST_F(AuditTest, ChangesAndRefusalsAreRecordedWithWhoWhatAndTheAnswer) {
  AddNode("gpu-1", 1);
  const std::string alice = MakeToken("alice", "user");
  const std::string bob = MakeToken("bob", "user");
  const int64_t before = NowUnixMs();
  const json spec = {{"command", {"sleep", "100"}}, {"gpus_per_node", 1}};
  auto submitted = Send("POST", "/v1/jobs", alice, spec.dump());
  ASSERT_TRUE(submitted && submitted->status == 201);
  const int64_t id = json::parse(submitted->body).value("id", int64_t{0});
  EXPECT_EQ(submitted->get_header_value("Location"), "/v1/jobs/" + std::to_string(id));
  ASSERT_EQ(Send("POST", "/v1/jobs/" + std::to_string(id) + "/cancel", bob)->status, 403);
  ASSERT_EQ(Send("POST", "/v1/jobs", "", spec.dump())->status, 401);
  ASSERT_EQ(Send("POST", "/v1/jobs", "cohort_000000000000_" + std::string(64, 'a'), spec.dump())->status, 401);
  ASSERT_EQ(Send("POST", "/v1/jobs", alice, spec.dump(), {}, "text/plain")->status, 400);
  ASSERT_EQ(Send("POST", "/v1/jobs", alice, spec.dump(), {{"Origin", "http://evil.example"}})->status, 403);
  ASSERT_EQ(Send("GET", "/v1/jobs", alice)->status, 200);

  std::vector<api::AuditEntry> rows = Rows("&since=" + std::to_string(before));
  std::erase_if(rows, [](const api::AuditEntry& r) { return r.path == "/v1/tokens"; });  // made above
  ASSERT_EQ(rows.size(), 6u) << "one row per change asked for, none for the GET";
  for (const auto& r : rows) {
    EXPECT_GE(r.time_ms, before);
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.client, "127.0.0.1");
  }
  const api::AuditEntry& ok = rows[0];
  EXPECT_EQ(ok.user, "alice");
  EXPECT_FALSE(ok.token_id.empty());
  EXPECT_NE(ok.caller.find("alice (user, token " + ok.token_id), std::string::npos) << ok.caller;
  EXPECT_EQ(ok.path, "/v1/jobs");
  EXPECT_EQ(ok.status, 201);
  EXPECT_EQ(ok.job_id, id) << "the job the submission made";
  EXPECT_EQ(ok.error, "");

  const api::AuditEntry& denied = rows[1];
  EXPECT_EQ(denied.user, "bob");
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(denied.job_id, id);
  EXPECT_NE(denied.error.find("may not cancel job"), std::string::npos) << denied.error;

  for (size_t i : {2u, 3u}) {
    EXPECT_EQ(rows[i].caller, "anonymous");
    EXPECT_EQ(rows[i].user, "");
    EXPECT_EQ(rows[i].status, 401);
    EXPECT_FALSE(rows[i].error.empty());
  }
  EXPECT_NE(rows[3].error.find("not one this head knows"), std::string::npos) << rows[3].error;
  EXPECT_EQ(rows[4].user, "alice") << "refused after it was identified: the caller is known";
  EXPECT_EQ(rows[4].status, 400);
  EXPECT_NE(rows[4].error.find("Content-Type"), std::string::npos) << rows[4].error;
  EXPECT_EQ(rows[5].status, 403);
  EXPECT_NE(rows[5].error.find("cross-origin"), std::string::npos) << rows[5].error;
}

TEST_F(AuditTest, BodiesRefusedBeforeTheChecksAreRecorded) {
  const std::string alice = MakeToken("alice", "user");
  const int64_t before = NowUnixMs();
  ASSERT_EQ(Send("POST", "/v1/jobs", alice, "--x--", {}, "multipart/form-data; boundary=x")->status, 415);
  ASSERT_EQ(testing::RawUpload(head_->port(), testing::ChunkedPost("/v1/jobs"), 5 << 20, /*chunked=*/true).status, 413);
  std::vector<api::AuditEntry> rows = Rows("&since=" + std::to_string(before));
  std::erase_if(rows, [](const api::AuditEntry& r) { return r.path == "/v1/tokens"; });
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, 415);
  EXPECT_EQ(rows[0].user, "alice");
  EXPECT_NE(rows[0].error.find("multipart"), std::string::npos) << rows[0].error;
  EXPECT_EQ(rows[1].status, 413);
  EXPECT_EQ(rows[1].caller, "anonymous");
  EXPECT_NE(rows[1].error.find("too large"), std::string::npos) << rows[1].error;
}

TEST_F(AuditTest, SuccessfulHeartbeatsGetNoRowButJoinsAndFailuresDo) {
  const int64_t before = NowUnixMs();
  const std::string node = RegisterOverHttp("n1");
  ASSERT_FALSE(node.empty());
  const json hb = {{"incarnation", "i-n1"}};
  auto beat = Send("POST", "/v1/agents/n1/heartbeat", node, hb.dump());
  ASSERT_TRUE(beat);
  ASSERT_EQ(beat->status, 200) << beat->body;
  ASSERT_EQ(Send("POST", "/v1/agents/n2/heartbeat", node, hb.dump())->status, 403);
  ASSERT_EQ(Send("POST", "/v1/agents/n1/heartbeat", node, json{{"incarnation", "other"}}.dump())->status, 409);
  // A task route's failure, its capability's MAC left out of the row.
  ASSERT_EQ(Send("PUT", "/v1/rendezvous/7-0-deadbeef/keys/k", "", "v", {}, "text/plain")->status, 404);

  std::vector<api::AuditEntry> rows = Rows("&since=" + std::to_string(before));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].path, "/v1/agents/register");
  EXPECT_EQ(rows[0].status, 200);
  EXPECT_EQ(rows[0].node, "n1") << "a join names the node it registers";
  EXPECT_NE(rows[0].caller.find("admin"), std::string::npos);
  EXPECT_EQ(rows[1].node, "n1");
  EXPECT_EQ(rows[1].caller, "node n1");
  EXPECT_EQ(rows[1].path, "/v1/agents/n2/heartbeat");
  EXPECT_EQ(rows[1].status, 403);
  EXPECT_EQ(rows[2].status, 409);
  EXPECT_NE(rows[2].error.find("register again"), std::string::npos) << rows[2].error;
  EXPECT_EQ(rows[3].method, "PUT");
  EXPECT_EQ(rows[3].path, "/v1/rendezvous/7-0-(redacted)/keys/k");
  EXPECT_EQ(rows[3].job_id, 7);
  EXPECT_EQ(rows[3].status, 404);
}

TEST_F(AuditTest, QueryFiltersByUserAndTimeAndPagesFromTheNewest) {
  const std::string alice = MakeToken("alice", "user");
  const std::string bob = MakeToken("bob", "user");
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(Send("POST", "/v1/jobs/" + std::to_string(100 + i) + "/cancel", i % 2 ? bob : alice)->status, 404);
  }
  std::vector<api::AuditEntry> mine = Rows("&user=alice");
  ASSERT_EQ(mine.size(), 3u);
  EXPECT_EQ(mine[0].job_id, 100);
  EXPECT_EQ(mine[2].job_id, 104);
  EXPECT_EQ(Rows("&user=bob").size(), 2u);
  EXPECT_EQ(Rows("&user=nobody").size(), 0u);

  const std::vector<api::AuditEntry> all = Rows();
  ASSERT_EQ(all.size(), 7u) << "two tokens made, five cancels";
  const std::string window =
      "&since=" + std::to_string(all[3].time_ms) + "&until=" + std::to_string(all[6].time_ms + 1);
  for (const auto& r : Rows(window)) EXPECT_GE(r.time_ms, all[3].time_ms);
  EXPECT_TRUE(Rows("&until=" + std::to_string(all[0].time_ms)).empty());

  // Pages of 3, newest first; each page oldest first.
  json page = GetJson("/v1/audit?limit=3");
  ASSERT_EQ(page["entries"].size(), 3u);
  EXPECT_EQ(page["entries"][2].value("id", 0), all[6].id);
  EXPECT_EQ(page["entries"][0].value("id", 0), all[4].id);
  ASSERT_TRUE(page.contains("next_cursor"));
  json next = GetJson("/v1/audit?limit=3&cursor=" + page.value("next_cursor", ""));
  ASSERT_EQ(next["entries"].size(), 3u);
  EXPECT_EQ(next["entries"][2].value("id", 0), all[3].id);
  json last = GetJson("/v1/audit?limit=3&cursor=" + next.value("next_cursor", ""));
  ASSERT_EQ(last["entries"].size(), 1u);
  EXPECT_FALSE(last.contains("next_cursor"));
}

TEST_F(AuditTest, EveryQueryParameterIsCheckedAndNamed) {
  for (const auto& [query, field] : std::vector<std::pair<std::string, std::string>>{
           {"since=abc", "since"},
           {"since=-1", "since"},
           {"until=0", "until"},
           {"since=100&until=100", "until"},
           {"user=", "user"},
           {"user=a%20b", "user"},
           {"user=" + std::string(65, 'u'), "user"},
           {"limit=0", "limit"},
           {"limit=10001", "limit"},
           {"limit=ten", "limit"},
           {"cursor=x", "cursor"},
           {"cursor=0", "cursor"},
           {"usr=alice", "usr"},
       }) {
    SCOPED_TRACE(query);
    auto [status, named] = QueryError(query);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(named, field);
  }
  // Admins only.
  EXPECT_EQ(Send("GET", "/v1/audit", MakeToken("vera", "viewer"))->status, 403);
  EXPECT_EQ(Send("GET", "/v1/audit", MakeToken("ulla", "user"))->status, 403);
}

TEST_F(AuditTest, RowsSurviveARestartAndShowInMetrics) {
  ASSERT_EQ(Send("POST", "/v1/nodes/ghost/drain", admin_token_)->status, 404);
  auto metrics = http_->Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_NE(metrics->body.find("cohort_audit_dropped_total{reason=\"queue_full\"} 0"), std::string::npos);
  EXPECT_NE(metrics->body.find("cohort_audit_written_total"), std::string::npos);
  Restart();
  std::vector<api::AuditEntry> rows = Rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].path, "/v1/nodes/ghost/drain");
  EXPECT_EQ(rows[0].status, 404);
  EXPECT_NE(rows[0].error.find("ghost"), std::string::npos) << rows[0].error;
}

TEST(AuditEntryForTest, ReadsAndAgentSuccessesGetNoRow) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/agents/n1/heartbeat";
  httplib::Response res;
  res.status = 200;
  Caller node;
  node.kind = Caller::Kind::kNode;
  node.node = "n1";
  EXPECT_FALSE(AuditEntryFor({"POST", "", Access::kNode}, node, req, res, 1));
  EXPECT_FALSE(AuditEntryFor({"GET", "", Access::kAdmin}, node, req, res, 1));
  res.status = 500;
  auto failed = AuditEntryFor({"POST", "", Access::kNode}, node, req, res, 7);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->time_ms, 7);
  EXPECT_EQ(failed->node, "n1");
  req.path = "/v1/jobs";
  res.status = 201;
  res.set_header("Location", "/v1/jobs/42");
  auto made = AuditEntryFor({"POST", "", Access::kUser}, Caller{}, req, res, 1);
  ASSERT_TRUE(made);
  EXPECT_EQ(made->job_id, 42);
  req.path = "/v1/jobs/" + std::string(5000, '9');
  auto long_path = AuditEntryFor({"POST", "", Access::kUser}, Caller{}, req, res, 1);
  ASSERT_TRUE(long_path);
  EXPECT_LE(long_path->path.size(), 1024u + 3);
}

// A store whose audit writes can be held at a gate or made to fail.
class GatedStore {
 public:
  GatedStore() : inner_(store::NewMemoryStateStore()) {}

  class Store;
  std::unique_ptr<store::StateStore> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;     // AppendAudit waits while true
  int entered_ = 0;       // AppendAudit calls begun
  bool fail_ = false;     // AppendAudit fails
};

class GatedStore::Store final : public store::StateStore {
 public:
  explicit Store(GatedStore& g) : g_(g) {}
  Result<std::vector<api::JobId>> Commit(const store::WriteBatch& b) override { return g_.inner_->Commit(b); }
  Result<api::Job> GetJob(api::JobId id) override { return g_.inner_->GetJob(id); }
  Result<std::vector<api::Job>> LoadJobs() override { return g_.inner_->LoadJobs(); }
  Result<std::vector<api::Node>> LoadNodes() override { return g_.inner_->LoadNodes(); }
  Result<std::optional<std::string>> GetMeta(const std::string& k) override { return g_.inner_->GetMeta(k); }
  Result<void> AppendAudit(const std::vector<api::AuditEntry>& e) override {
    std::unique_lock lock(g_.mu_);
    ++g_.entered_;
    g_.cv_.notify_all();
    g_.cv_.wait(lock, [&] { return !g_.hold_; });
    if (g_.fail_) return MakeError(ErrorCode::kUnavailable, "disk gone");
    return g_.inner_->AppendAudit(e);
  }
  Result<std::vector<api::AuditEntry>> QueryAudit(const store::AuditQuery& q) override {
    return g_.inner_->QueryAudit(q);
  }
  Result<int64_t> TrimAudit(int64_t before_ms, int64_t max_rows) override {
    return g_.inner_->TrimAudit(before_ms, max_rows);
  }

 private:
  GatedStore& g_;
};

api::AuditEntry Row(int64_t time_ms, std::string user = "alice") {
  api::AuditEntry e;
  e.time_ms = time_ms;
  e.user = std::move(user);
  e.caller = e.user;
  e.method = "POST";
  e.path = "/v1/jobs";
  e.status = 201;
  return e;
}

constexpr int64_t kDay = 24 * 3600 * 1000;

// The writer also trims when it starts, on the same clock: the outcome, not who trimmed,
// is checked.
TEST(AuditLogTest, TrimsPastTheRetentionAndTheRowCap) {
  GatedStore g;
  GatedStore::Store store(g);
  std::atomic<int64_t> now = 100 * kDay;
  AuditLog::Options o;
  o.retention_ms = 10 * kDay;
  o.max_rows = 3;
  o.now_ms = [&now] { return now.load(); };
  AuditLog log(store, o);
  for (int64_t day : {80, 89, 91, 95, 99}) log.Record(Row(day * kDay));
  ASSERT_TRUE(log.Flush());
  ASSERT_TRUE(log.Trim());
  auto kept = log.Query({});
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->size(), 3u) << "days 80 and 89 are past 10 days";
  now = 104 * kDay;
  log.Record(Row(103 * kDay));
  ASSERT_TRUE(log.Flush());
  ASSERT_TRUE(log.Trim());
  auto rows = log.Query({});
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 3u) << "day 91 is past the retention, and 3 rows at most";
  EXPECT_EQ(rows->back().time_ms, 95 * kDay);
  EXPECT_EQ(log.stats().trimmed, 3u);
}

TEST(AuditLogTest, TheWriterTrimsByItself) {
  GatedStore g;
  GatedStore::Store store(g);
  ASSERT_TRUE(store.AppendAudit({Row(1), Row(2)}));
  AuditLog::Options o;
  o.retention_ms = kDay;
  o.trim_interval = Millis(10);
  AuditLog log(store, o);
  const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
  while (log.stats().trimmed < 2 && SteadyClock::now() < deadline) std::this_thread::sleep_for(Millis(5));
  EXPECT_EQ(log.stats().trimmed, 2u);
  EXPECT_TRUE(log.Query({})->empty());
}

TEST(AuditLogTest, AFullQueueDropsAndCountsWithoutBlocking) {
  GatedStore g;
  GatedStore::Store store(g);
  AuditLog::Options o;
  o.max_queued = 2;
  o.flush_interval = Millis(0);
  o.retention_ms = 0;
  o.max_rows = 0;
  AuditLog log(store, o);
  {
    std::unique_lock lock(g.mu_);
    g.hold_ = true;
  }
  log.Record(Row(1));
  {
    // The writer took the first row and is stuck writing it.
    std::unique_lock lock(g.mu_);
    ASSERT_TRUE(g.cv_.wait_for(lock, std::chrono::seconds(30), [&] { return g.entered_ == 1; }));
  }
  log.Record(Row(2));
  log.Record(Row(3));
  log.Record(Row(4));
  EXPECT_EQ(log.stats().dropped_queue_full, 1u);
  {
    std::unique_lock lock(g.mu_);
    g.hold_ = false;
    g.cv_.notify_all();
  }
  ASSERT_TRUE(log.Flush());
  EXPECT_EQ(log.stats().written, 3u);
  EXPECT_EQ(log.Query({})->size(), 3u);
}

TEST(AuditLogTest, AFailedWriteIsReportedAndCounted) {
  GatedStore g;
  GatedStore::Store store(g);
  g.fail_ = true;
  AuditLog log(store, {});
  log.Record(Row(1));
  auto flushed = log.Flush();
  ASSERT_FALSE(flushed);
  EXPECT_NE(flushed.error().message.find("disk gone"), std::string::npos);
  EXPECT_EQ(log.stats().dropped_write_failed, 1u);
  {
    std::unique_lock lock(g.mu_);
    g.fail_ = false;
  }
  log.Record(Row(2));
  EXPECT_TRUE(log.Flush()) << "a later batch that is written is fine";
}

TEST(AuditLogTest, StopWritesWhatIsQueued) {
  GatedStore g;
  GatedStore::Store store(g);
  {
    AuditLog::Options o;
    o.flush_interval = Millis(3'600'000);  // never by the interval
    AuditLog log(store, o);
    for (int i = 0; i < 10; ++i) log.Record(Row(NowUnixMs()));
  }
  EXPECT_EQ(store.QueryAudit({})->size(), 10u);
}

}  // namespace
}  // namespace cohort::head
