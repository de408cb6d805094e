// The shared StateStore suite (after Ray's store_client_test_base): every test runs
// against every implementation, SqliteStateStore on a fresh file in a temp dir and
// MemoryStateStore, so the fake the head's tests use behaves like the real store.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <thread>

#include "store/state_store.h"
#include "store_test_util.h"

namespace cohort::store {
namespace {

using testing::ExpectJobEq;
using testing::ExpectNodeEq;
using testing::FullJob;
using testing::FullNode;
using testing::SmallJob;
using testing::TempDir;

struct Backend {
  std::string name;
  std::function<Result<std::unique_ptr<StateStore>>(const TempDir&)> open;
};

// Names the backend in gtest's messages instead of dumping its bytes.
void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

class StateStoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    auto store = GetParam().open(dir_);
    ASSERT_TRUE(store) << store.error().ToString();
    store_ = std::move(*store);
  }

  api::Job MustCreate(api::Job job) {
    auto created = store_->CreateJob(std::move(job));
    EXPECT_TRUE(created) << created.error().ToString();
    return created ? *created : api::Job{};
  }

  TempDir dir_;
  std::unique_ptr<StateStore> store_;
};

TEST_P(StateStoreTest, EmptyStoreHasNothing) {
  auto jobs = store_->LoadJobs();
  ASSERT_TRUE(jobs) << jobs.error().ToString();
  EXPECT_TRUE(jobs->empty());
  auto nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes) << nodes.error().ToString();
  EXPECT_TRUE(nodes->empty());
  auto meta = store_->GetMeta("anything");
  ASSERT_TRUE(meta) << meta.error().ToString();
  EXPECT_FALSE(meta->has_value());
}

TEST_P(StateStoreTest, CreateThenGetRoundTripsEveryJobField) {
  api::Job want = FullJob(/*exit_code=*/3);
  api::Job created = MustCreate(want);
  EXPECT_GT(created.id, 0);
  EXPECT_NE(created.id, 77) << "the input id must be ignored";
  want.id = created.id;
  ExpectJobEq(want, created, "returned by CreateJob");

  auto got = store_->GetJob(created.id);
  ASSERT_TRUE(got) << got.error().ToString();
  ExpectJobEq(want, *got, "GetJob");

  auto all = store_->LoadJobs();
  ASSERT_TRUE(all) << all.error().ToString();
  ASSERT_EQ(all->size(), 1u);
  ExpectJobEq(want, all->front(), "LoadJobs");
}

TEST_P(StateStoreTest, ExitCodeUnsetAndZeroAreDistinct) {
  api::Job unset = MustCreate(FullJob(std::nullopt));
  api::Job zero = MustCreate(FullJob(0));
  auto got_unset = store_->GetJob(unset.id);
  auto got_zero = store_->GetJob(zero.id);
  ASSERT_TRUE(got_unset) << got_unset.error().ToString();
  ASSERT_TRUE(got_zero) << got_zero.error().ToString();
  EXPECT_FALSE(got_unset->exit_code.has_value());
  ASSERT_TRUE(got_zero->exit_code.has_value());
  EXPECT_EQ(*got_zero->exit_code, 0);
}

TEST_P(StateStoreTest, MinimalJobRoundTrips) {
  api::Job want = SmallJob("minimal");
  want.id = MustCreate(want).id;
  auto got = store_->GetJob(want.id);
  ASSERT_TRUE(got) << got.error().ToString();
  ExpectJobEq(want, *got);
}

TEST_P(StateStoreTest, IdsStrictlyIncreaseFromOne) {
  api::JobId prev = 0;
  for (int i = 0; i < 10; ++i) {
    api::Job job = SmallJob();
    job.id = 1000 - i;  // ignored
    api::JobId id = MustCreate(job).id;
    EXPECT_GT(id, prev) << "create #" << i;
    prev = id;
  }
}

TEST_P(StateStoreTest, GetUnknownJobIsNotFound) {
  for (api::JobId id : {api::JobId(0), api::JobId(-1), api::JobId(1), api::JobId(1) << 40}) {
    auto got = store_->GetJob(id);
    ASSERT_FALSE(got) << "id " << id;
    EXPECT_EQ(got.error().code, ErrorCode::kNotFound) << got.error().ToString();
  }
  api::JobId id = MustCreate(SmallJob()).id;
  auto got = store_->GetJob(id + 1);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, ErrorCode::kNotFound);
}

TEST_P(StateStoreTest, WriteUpdatesJobs) {
  api::Job job = MustCreate(SmallJob("updated"));
  api::Job want = FullJob(1);
  want.id = job.id;
  ASSERT_TRUE(store_->Write({.jobs = {want}}));
  auto got = store_->GetJob(job.id);
  ASSERT_TRUE(got) << got.error().ToString();
  ExpectJobEq(want, *got);
}

TEST_P(StateStoreTest, WriteWithUnknownJobWritesNothing) {
  api::Job a = MustCreate(SmallJob("a"));
  api::Job b = MustCreate(SmallJob("b"));
  ASSERT_TRUE(store_->Write({.nodes = {FullNode("n1")}, .meta = {{"k", "old"}}}));

  api::Job a2 = a;
  a2.state = api::JobState::kRunning;
  a2.reason = "changed";
  api::Job b2 = b;
  b2.state = api::JobState::kCancelled;
  api::Job ghost = SmallJob("ghost");
  ghost.id = b.id + 100;
  api::Node n1 = FullNode("n1", 1);
  n1.address = "changed";
  WriteBatch batch{.jobs = {a2, ghost, b2},
                   .nodes = {n1, FullNode("n2")},
                   .meta = {{"k", "new"}, {"k2", "v2"}}};
  auto r = store_->Write(batch);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound) << r.error().ToString();
  EXPECT_NE(r.error().message.find(std::to_string(ghost.id)), std::string::npos) << r.error().message;

  auto got_a = store_->GetJob(a.id);
  ASSERT_TRUE(got_a);
  ExpectJobEq(a, *got_a, "job a must be unchanged");
  auto got_b = store_->GetJob(b.id);
  ASSERT_TRUE(got_b);
  ExpectJobEq(b, *got_b, "job b must be unchanged");
  auto ghost_got = store_->GetJob(ghost.id);
  ASSERT_FALSE(ghost_got);
  EXPECT_EQ(ghost_got.error().code, ErrorCode::kNotFound);
  auto nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes);
  ASSERT_EQ(nodes->size(), 1u);
  ExpectNodeEq(FullNode("n1"), nodes->front(), "node n1 must be unchanged");
  EXPECT_EQ(store_->GetMeta("k").value(), std::optional<std::string>("old"));
  EXPECT_EQ(store_->GetMeta("k2").value(), std::nullopt);

  // The same batch without the ghost applies in full.
  batch.jobs = {a2, b2};
  ASSERT_TRUE(store_->Write(batch));
  EXPECT_EQ(store_->GetJob(a.id)->reason, "changed");
  EXPECT_EQ(store_->GetJob(b.id)->state, api::JobState::kCancelled);
  EXPECT_EQ(store_->LoadNodes()->size(), 2u);
  EXPECT_EQ(store_->GetMeta("k2").value(), std::optional<std::string>("v2"));
}

TEST_P(StateStoreTest, WriteToJobIdZeroIsNotFound) {
  MustCreate(SmallJob());
  api::Job never = SmallJob();  // id 0: never created
  auto r = store_->Write({.jobs = {never}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
}

TEST_P(StateStoreTest, JobThatWouldNotLoadBackIsRefused) {
  api::Job bad = SmallJob();
  bad.spec.user = "";  // JobFromJson rejects an empty user
  auto created = store_->CreateJob(bad);
  ASSERT_FALSE(created);
  EXPECT_EQ(created.error().code, ErrorCode::kInvalidArgument) << created.error().ToString();

  api::Job good = MustCreate(SmallJob("good"));
  api::Job broken = good;
  broken.spec.command.clear();
  auto r = store_->Write({.jobs = {broken}, .meta = {{"k", "v"}}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << r.error().ToString();
  auto got = store_->GetJob(good.id);
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(got->spec.command, std::vector<std::string>{"true"});
  EXPECT_EQ(store_->GetMeta("k").value(), std::nullopt);
  auto all = store_->LoadJobs();
  ASSERT_TRUE(all) << all.error().ToString();
  EXPECT_EQ(all->size(), 1u);
}

TEST_P(StateStoreTest, EmptyWriteSucceeds) { EXPECT_TRUE(store_->Write(WriteBatch{})); }

TEST_P(StateStoreTest, NodeRoundTripsAndUpsertReplaces) {
  api::Node full = FullNode("gpu-01", 8);
  ASSERT_TRUE(store_->Write({.nodes = {full}}));
  auto nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes) << nodes.error().ToString();
  ASSERT_EQ(nodes->size(), 1u);
  ExpectNodeEq(full, nodes->front(), "first write");

  // Replacement is whole: fewer GPUs, drain cleared, back UP.
  api::Node replaced = FullNode("gpu-01", 2);
  replaced.state = api::NodeState::kUp;
  replaced.reason = "";
  replaced.drain = false;
  replaced.drain_reason = "";
  replaced.incarnation = "inc-0043";
  ASSERT_TRUE(store_->Write({.nodes = {replaced}}));
  nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes) << nodes.error().ToString();
  ASSERT_EQ(nodes->size(), 1u);
  ExpectNodeEq(replaced, nodes->front(), "after upsert");
}

TEST_P(StateStoreTest, RemovedNodesAreGoneAndUnknownNamesAreNoError) {
  ASSERT_TRUE(store_->Write({.nodes = {FullNode("n1"), FullNode("n2"), FullNode("n3")}}));
  WriteBatch batch;
  batch.remove_nodes = {"n2", "never-there"};
  ASSERT_TRUE(store_->Write(batch));
  auto nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes) << nodes.error().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].name, "n1");
  EXPECT_EQ((*nodes)[1].name, "n3");
  // A removed name may join again.
  ASSERT_TRUE(store_->Write({.nodes = {FullNode("n2", 1)}}));
  nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes);
  EXPECT_EQ(nodes->size(), 3u);
}

TEST_P(StateStoreTest, LoadNodesInNameOrder) {
  ASSERT_TRUE(store_->Write({.nodes = {FullNode("node-b"), FullNode("node-10")}}));
  ASSERT_TRUE(store_->Write({.nodes = {FullNode("node-a"), FullNode("node-2")}}));
  auto nodes = store_->LoadNodes();
  ASSERT_TRUE(nodes) << nodes.error().ToString();
  std::vector<std::string> names;
  for (const auto& n : *nodes) names.push_back(n.name);
  EXPECT_EQ(names, (std::vector<std::string>{"node-10", "node-2", "node-a", "node-b"}));
}

TEST_P(StateStoreTest, LoadJobsInIdOrder) {
  std::vector<api::JobId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(MustCreate(SmallJob("j" + std::to_string(i))).id);
  // Update in reverse so that the most recently written is the lowest id.
  for (int i = 4; i >= 0; --i) {
    api::Job j = *store_->GetJob(ids[i]);
    j.reason = "touched " + std::to_string(i);
    ASSERT_TRUE(store_->Write({.jobs = {j}}));
  }
  auto jobs = store_->LoadJobs();
  ASSERT_TRUE(jobs) << jobs.error().ToString();
  ASSERT_EQ(jobs->size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ((*jobs)[i].id, ids[i]);
    EXPECT_EQ((*jobs)[i].spec.name, "j" + std::to_string(i));
    EXPECT_EQ((*jobs)[i].reason, "touched " + std::to_string(i));
  }
}

TEST_P(StateStoreTest, MetaGetAndPut) {
  EXPECT_EQ(store_->GetMeta("cluster_id").value(), std::nullopt);
  ASSERT_TRUE(store_->Write({.meta = {{"cluster_id", "c-123"}, {"empty", ""}}}));
  EXPECT_EQ(store_->GetMeta("cluster_id").value(), std::optional<std::string>("c-123"));
  EXPECT_EQ(store_->GetMeta("empty").value(), std::optional<std::string>(""));
  ASSERT_TRUE(store_->Write({.meta = {{"cluster_id", "c-456"}}}));
  EXPECT_EQ(store_->GetMeta("cluster_id").value(), std::optional<std::string>("c-456"));
  EXPECT_EQ(store_->GetMeta("Cluster_id").value(), std::nullopt) << "keys are case-sensitive";
}

TEST_P(StateStoreTest, ConcurrentCreatesGetDistinctIds) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 15;
  std::vector<std::vector<api::JobId>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto job = store_->CreateJob(SmallJob("t" + std::to_string(t)));
        if (job) ids[t].push_back(job->id);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<api::JobId> all;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(ids[t].size(), size_t(kPerThread)) << "thread " << t << " had failures";
    for (size_t i = 1; i < ids[t].size(); ++i) EXPECT_GT(ids[t][i], ids[t][i - 1]);
    all.insert(ids[t].begin(), ids[t].end());
  }
  EXPECT_EQ(all.size(), size_t(kThreads * kPerThread));
  auto jobs = store_->LoadJobs();
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->size(), all.size());
}

// An audit row with every field set; `n` makes it distinct.
api::AuditEntry AuditRow(int64_t time_ms, const std::string& user, int n = 0) {
  api::AuditEntry e;
  e.id = 999;  // ignored
  e.time_ms = time_ms;
  e.caller = user.empty() ? "anonymous" : user + " (admin, token 0123456789ab)";
  e.user = user;
  e.token_id = user.empty() ? "" : "0123456789ab";
  e.node = "n" + std::to_string(n);
  e.client = "10.0.0." + std::to_string(n);
  e.method = "POST";
  e.path = "/v1/jobs/" + std::to_string(n) + "/cancel";
  e.status = n % 2 ? 403 : 200;
  e.error = n % 2 ? "not yours" : "";
  e.job_id = n;
  return e;
}

std::vector<int64_t> Ids(const Result<std::vector<api::AuditEntry>>& rows) {
  EXPECT_TRUE(rows) << rows.error().ToString();
  std::vector<int64_t> out;
  if (rows) {
    for (const auto& e : *rows) out.push_back(e.id);
  }
  return out;
}

TEST_P(StateStoreTest, AuditRowsRoundTripNewestFirstWithIncreasingIds) {
  ASSERT_TRUE(store_->AppendAudit({AuditRow(1000, "alice", 1), AuditRow(2000, "bob", 2)}));
  ASSERT_TRUE(store_->AppendAudit({AuditRow(3000, "", 3)}));
  ASSERT_TRUE(store_->AppendAudit({}));
  auto rows = store_->QueryAudit({});
  ASSERT_TRUE(rows) << rows.error().ToString();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_GT((*rows)[0].id, (*rows)[1].id);
  EXPECT_GT((*rows)[1].id, (*rows)[2].id);
  api::AuditEntry want = AuditRow(1000, "alice", 1);
  const api::AuditEntry& got = (*rows)[2];
  EXPECT_GT(got.id, 0);
  EXPECT_NE(got.id, 999) << "the store gives the id";
  want.id = got.id;
  EXPECT_EQ(api::ToJson(got), api::ToJson(want));
  EXPECT_EQ((*rows)[0].job_id, 3);
  EXPECT_EQ((*rows)[0].user, "");
}

TEST_P(StateStoreTest, AuditQueryFiltersByTimeUserCursorAndLimit) {
  std::vector<api::AuditEntry> rows;
  for (int i = 1; i <= 10; ++i) rows.push_back(AuditRow(i * 100, i % 2 ? "alice" : "bob", i));
  ASSERT_TRUE(store_->AppendAudit(rows));
  const std::vector<int64_t> all = Ids(store_->QueryAudit({}));
  ASSERT_EQ(all.size(), 10u);
  auto times = [&](const AuditQuery& q) {
    std::vector<int64_t> out;
    auto r = store_->QueryAudit(q);
    EXPECT_TRUE(r) << r.error().ToString();
    if (r) {
      for (const auto& e : *r) out.push_back(e.time_ms);
    }
    return out;
  };
  EXPECT_EQ(times({.since_ms = 300, .until_ms = 600}), (std::vector<int64_t>{500, 400, 300}))
      << "since is inclusive, until exclusive";
  EXPECT_EQ(times({.user = "alice"}), (std::vector<int64_t>{900, 700, 500, 300, 100}));
  EXPECT_EQ(times({.user = "carol"}), std::vector<int64_t>{});
  EXPECT_EQ(times({.user = "bob", .limit = 2}), (std::vector<int64_t>{1000, 800}));
  EXPECT_EQ(times({.limit = 3}), (std::vector<int64_t>{1000, 900, 800}));
  // The next page: ids below the last one seen.
  EXPECT_EQ(times({.before_id = all[2], .limit = 3}), (std::vector<int64_t>{700, 600, 500}));
  EXPECT_EQ(times({.since_ms = 200, .user = "alice", .before_id = all[2]}), (std::vector<int64_t>{700, 500, 300}));
}

TEST_P(StateStoreTest, AuditTrimDropsOldRowsAndKeepsTheNewestMaxRows) {
  std::vector<api::AuditEntry> rows;
  for (int i = 1; i <= 10; ++i) rows.push_back(AuditRow(i * 100, "alice", i));
  ASSERT_TRUE(store_->AppendAudit(rows));
  auto by_time = store_->TrimAudit(/*before_ms=*/350, /*max_rows=*/0);
  ASSERT_TRUE(by_time) << by_time.error().ToString();
  EXPECT_EQ(*by_time, 3);
  auto by_rows = store_->TrimAudit(0, 4);
  ASSERT_TRUE(by_rows) << by_rows.error().ToString();
  EXPECT_EQ(*by_rows, 3);
  auto left = store_->QueryAudit({});
  ASSERT_TRUE(left);
  ASSERT_EQ(left->size(), 4u);
  EXPECT_EQ(left->front().time_ms, 1000);
  EXPECT_EQ(left->back().time_ms, 700);
  auto none = store_->TrimAudit(0, 0);
  ASSERT_TRUE(none);
  EXPECT_EQ(*none, 0);
  // Ids are never reused, even once every row is gone.
  const int64_t newest = left->front().id;
  ASSERT_TRUE(store_->TrimAudit(INT64_MAX, 0));
  ASSERT_TRUE(store_->AppendAudit({AuditRow(50, "bob")}));
  auto after = store_->QueryAudit({});
  ASSERT_TRUE(after);
  ASSERT_EQ(after->size(), 1u);
  EXPECT_GT(after->front().id, newest);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, StateStoreTest,
    ::testing::Values(
        Backend{"Sqlite",
                [](const TempDir& dir) { return OpenSqliteStateStore(dir.File("state.db")); }},
        Backend{"Memory",
                [](const TempDir&) -> Result<std::unique_ptr<StateStore>> { return NewMemoryStateStore(); }}),
    [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

}  // namespace
}  // namespace cohort::store
