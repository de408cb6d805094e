// GET /v1/dashboard and the dashboard's static files, against an in-process head whose
// "agents" are calls into its Cluster (no processes, no sleeps: the state is set up
// directly and read back over HTTP on a kernel-chosen port).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "api/dashboard.h"
#include "head/cluster.h"
#include "head/head.h"
#include "head_server_fixture.h"
#include "head/progress.h"
#include "head/routes.h"
#include "head/web_assets.h"

namespace cohort::head {
namespace {

class DashboardTest : public HeadServerTest {
 protected:
  api::Job Submit(const std::string& name, int nodes, int gpus_per_node, int priority = 0,
                  const std::string& team = "") {
    api::JobSpec spec;
    spec.name = name;
    spec.team = team;
    spec.user = "alice";
    spec.command = {"/bin/true"};
    spec.nodes = nodes;
    spec.gpus_per_node = gpus_per_node;
    spec.priority = priority;
    auto j = cluster().Submit(spec);
    EXPECT_TRUE(j.has_value()) << j.error().message;
    return j ? *j : api::Job{};
  }

  json Dashboard(const std::string& query = "") { return GetJson("/v1/dashboard" + query); }

};

TEST_F(DashboardTest, ShowsNodesQueueRunningAndRecentJobs) {
  AddNode("n1", 4);
  AddNode("n2", 4);
  api::Job train = Submit("train", 1, 4);
  cluster().Schedule();
  api::Job big = Submit("big", 2, 4, /*priority=*/5);   // needs both nodes; n1 is busy
  api::Job small = Submit("small", 2, 2, /*priority=*/1);  // also needs n1, which is full
  api::Job gone = Submit("gone", 1, 1);
  ASSERT_TRUE(cluster().Cancel(gone.id).has_value());
  cluster().Schedule();
  ProgressPoint p;
  p.step = 7;
  p.loss = 2.5;
  p.tokens_per_s = 1234.5;
  cluster().progress().Add(train.id, p);

  json d = Dashboard();
  EXPECT_GT(d["time_ms"].get<int64_t>(), 0);
  ASSERT_EQ(d["nodes"].size(), 2u);
  EXPECT_EQ(d["nodes"][0]["name"], "n1");
  ASSERT_EQ(d["nodes"][0]["gpus"].size(), 4u);
  EXPECT_EQ(d["nodes"][0]["gpus"][0]["name"], "Test GPU 80GB");
  EXPECT_EQ(d["nodes"][0]["gpus_allocated"], 4);
  EXPECT_EQ(d["nodes"][0]["display_state"], "UP");
  // The node JSON is GET /v1/nodes's, field for field.
  auto nodes = http_->Get("/v1/nodes");
  ASSERT_TRUE(nodes);
  json listed = json::parse(nodes->body)["nodes"][1];
  json shown = d["nodes"][1];
  listed.erase("heartbeat_age_ms");
  shown.erase("heartbeat_age_ms");
  EXPECT_EQ(listed, shown);

  const json& s = d["summary"];
  EXPECT_EQ(s["nodes"], 2);
  EXPECT_EQ(s["nodes_up"], 2);
  EXPECT_EQ(s["gpus"], 8);
  EXPECT_EQ(s["gpus_allocated"], 4);
  EXPECT_EQ(s["running"], 1);
  EXPECT_EQ(s["pending"], 2);

  ASSERT_EQ(d["running"].size(), 1u);
  const json& r = d["running"][0];
  EXPECT_EQ(r["id"], train.id);
  EXPECT_EQ(r["state"], "RUNNING");
  EXPECT_EQ(r["progress"]["step"], 7);
  EXPECT_DOUBLE_EQ(r["progress"]["loss"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(r["progress"]["tokens_per_s"].get<double>(), 1234.5);
  EXPECT_EQ(r["loss"]["points"], json::parse("[[7, 2.5]]"));
  // Lists leave the per-task detail to GET /v1/jobs/{id}.
  EXPECT_FALSE(r.contains("history"));
  EXPECT_FALSE(r.contains("exits"));
  ASSERT_EQ(r["allocation"]["nodes"].size(), 1u);
  EXPECT_EQ(r["allocation"]["nodes"][0]["node"], "n1");
  EXPECT_EQ(r["allocation"]["nodes"][0]["gpus"], json::parse("[0, 1, 2, 3]"));
  EXPECT_FALSE(r["allocation"]["nodes"][0].contains("tasks"));
  EXPECT_TRUE(r.contains("gpu_seconds")) << "usage flows through from GET /v1/jobs";

  // The queue in priority order, each job with why it waits.
  ASSERT_EQ(d["queue"].size(), 2u);
  EXPECT_EQ(d["queue"][0]["id"], big.id);
  EXPECT_EQ(d["queue"][1]["id"], small.id);
  for (const auto& j : d["queue"]) {
    EXPECT_EQ(j["state"], "PENDING");
    EXPECT_FALSE(j["reason"].get<std::string>().empty()) << j.dump();
  }

  ASSERT_EQ(d["recent"].size(), 1u);
  EXPECT_EQ(d["recent"][0]["id"], gone.id);
  EXPECT_EQ(d["recent"][0]["state"], "CANCELLED");
}

// The queue is in the scheduler's order, as `cohort queue --priority` gives it: a job
// within its team's quota before one that would borrow, whatever their own priorities.
TEST_F(DashboardTest, TheQueueIsInTheSchedulersOrder) {
  AddNode("n1", 4);
  for (auto [name, quota] : {std::pair{"ml", 2}, {"cv", 3}}) {
    api::Team t;
    t.name = name;
    t.quota_gpus = quota;
    ASSERT_TRUE(cluster().CreateTeam(t).has_value());
  }
  Submit("ml-run", 1, 2, 0, "ml");
  Submit("cv-run", 1, 2, 0, "cv");
  cluster().Schedule();
  const api::JobId borrows = Submit("ml-more", 1, 1, 5, "ml").id;  // ml would go past its quota of 2
  const api::JobId within = Submit("cv-more", 1, 1, 0, "cv").id;   // cv has 1 GPU of quota left
  cluster().Schedule();
  std::vector<api::JobId> ranked;
  for (const auto& p : cluster().Priorities().jobs) ranked.push_back(p.id);
  ASSERT_EQ(ranked, (std::vector<api::JobId>{within, borrows})) << "the scheduler's order";
  json d = Dashboard();
  ASSERT_EQ(d["queue"].size(), 2u) << d["queue"].dump();
  EXPECT_EQ(d["queue"][0]["id"], within);
  EXPECT_EQ(d["queue"][1]["id"], borrows) << "its priority 5 does not put it first";
}

// The reply is the api::Dashboard view: it decodes strictly and encodes back to itself,
// and a job in it is GET /v1/jobs's entry less what only a job's detail shows.
TEST_F(DashboardTest, IsTheDashboardViewAndListsJobsAsGetJobsDoes) {
  AddNode("n1", 2);
  api::Job train = Submit("train", 1, 2);
  Submit("waits", 1, 2);
  cluster().Schedule();
  ProgressPoint p;
  p.step = 3;
  p.loss = 1.25;
  cluster().progress().Add(train.id, p);

  json d = Dashboard();
  auto view = api::DashboardFromJson(d);
  ASSERT_TRUE(view.has_value()) << view.error().message;
  EXPECT_EQ(api::ToJson(*view), d);
  ASSERT_EQ(view->running.size(), 1u);
  EXPECT_EQ(view->running[0].progress->step, 3);
  ASSERT_TRUE(view->running[0].loss.has_value());
  EXPECT_EQ(view->queue.size(), 1u);

  auto jobs = http_->Get("/v1/jobs?state=RUNNING");
  ASSERT_TRUE(jobs);
  json listed = json::parse(jobs->body)["jobs"][0];
  listed.erase("exits");
  listed.erase("history");
  for (auto& na : listed["allocation"]["nodes"]) {
    na.erase("tasks");
    na.erase("version");
  }
  json shown = d["running"][0];
  shown.erase("progress");
  shown.erase("loss");
  listed.erase("gpu_seconds");  // grows with time
  shown.erase("gpu_seconds");
  EXPECT_EQ(listed, shown);
}

// After Stop (the head server stops the snapshots before its cluster goes) nothing
// refreshes a snapshot, so every request is built afresh and sees changes at once.
TEST_F(DashboardTest, StoppedSnapshotsBuildEachReplyAfresh) {
  AddNode("n1", 1);
  DashboardSnapshots snapshots(cluster());
  DashboardQuery q;
  json before = json::parse(*snapshots.Get(q));
  EXPECT_EQ(before["summary"]["pending"], 0);
  snapshots.Stop();
  snapshots.Stop();  // twice is harmless
  Submit("one", 1, 1);
  Submit("two", 1, 1);
  json after = json::parse(*snapshots.Get(q));
  // The control loop may have placed one of them meanwhile.
  EXPECT_EQ(after["summary"]["pending"].get<int>() + after["summary"]["running"].get<int>(), 2) << after.dump();
}

TEST_F(DashboardTest, LimitsTheQueueAndRecentJobs) {
  AddNode("n1", 1);
  for (int i = 0; i < 5; ++i) Submit("q" + std::to_string(i), 1, 1);  // the first runs
  std::vector<api::JobId> done;
  for (int i = 0; i < 4; ++i) {
    done.push_back(Submit("d" + std::to_string(i), 1, 1).id);
    ASSERT_TRUE(cluster().Cancel(done.back()).has_value());
  }
  cluster().Schedule();
  json d = Dashboard("?recent=2&queue=3");
  EXPECT_EQ(d["queue"].size(), 3u);
  EXPECT_EQ(d["summary"]["pending"], 4);
  ASSERT_EQ(d["recent"].size(), 2u);
  EXPECT_EQ(d["recent"][0]["id"], done[3]);  // newest first
  EXPECT_EQ(d["recent"][1]["id"], done[2]);
  EXPECT_EQ(Dashboard("?recent=0")["recent"].size(), 0u);
}

// Replies come from snapshots refreshed in the background while the query is in use: a
// change shows up within a refresh or two, and each query has its own snapshot.
TEST_F(DashboardTest, SnapshotsFollowChangesWhileInUse) {
  AddNode("n1", 1);
  json before = Dashboard();
  EXPECT_EQ(before["summary"]["pending"], 0);
  Submit("late", 1, 1);   // runs on n1's one GPU
  Submit("later", 1, 1);  // waits for it
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  json d;
  do {
    d = Dashboard();
    if (d["summary"]["running"] == 1 && d["summary"]["pending"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(d["summary"]["running"], 1) << d.dump();
  EXPECT_EQ(d["summary"]["pending"], 1) << d.dump();
  EXPECT_GT(d["time_ms"].get<int64_t>(), before["time_ms"].get<int64_t>());
  // Another query is built for itself, and sees the change at once.
  EXPECT_EQ(Dashboard("?queue=1")["queue"].size(), 1u);
}

TEST_F(DashboardTest, DownsamplesTheLossCurve) {
  AddNode("n1", 2);
  api::Job job = Submit("train", 1, 2);
  cluster().Schedule();
  for (int step = 0; step < 5000; ++step) {
    ProgressPoint p;
    p.step = step;
    p.loss = 10.0 - step / 1000.0;
    cluster().progress().Add(job.id, p);
    if (step % 10 == 0) {  // another rank reports too; its points are not the curve
      p.rank = 1;
      p.loss = 99;
      cluster().progress().Add(job.id, p);
    }
  }
  ProgressPoint no_loss;  // a point without a loss is progress, not curve
  no_loss.step = 5000;
  cluster().progress().Add(job.id, no_loss);

  json d = Dashboard("?points=50");
  ASSERT_EQ(d["running"].size(), 1u);
  const json& loss = d["running"][0]["loss"];
  EXPECT_EQ(loss["rank"], 0);
  EXPECT_EQ(loss["total"], 5000);
  ASSERT_EQ(loss["points"].size(), 50u);
  int64_t prev = -1;
  for (const auto& pt : loss["points"]) {
    EXPECT_GT(pt[0].get<int64_t>(), prev);
    prev = pt[0].get<int64_t>();
    EXPECT_LT(pt[1].get<double>(), 10.01);  // never rank 1's 99
  }
  EXPECT_EQ(loss["points"].back(), json::parse("[4999, 5.001]"));
  EXPECT_EQ(loss["points"][0][1].get<double>(), 9.9505);  // the mean of steps 0..99
  EXPECT_EQ(d["running"][0]["progress"]["step"], 5000);
  EXPECT_EQ(Dashboard()["running"][0]["loss"]["points"].size(), 40u);  // the default
}

TEST(DownsampleLoss, KeepsShortSeriesAndTheNewestPoint) {
  std::vector<LossPoint> pts = {{1, 3.0}, {2, 2.0}, {3, 1.0}};
  auto same = DownsampleLoss(pts, 3);
  ASSERT_EQ(same.size(), 3u);
  EXPECT_EQ(same[2].step, 3);
  auto two = DownsampleLoss(pts, 0);  // below 2 means 2
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].step, 1);
  EXPECT_DOUBLE_EQ(two[0].loss, 3.0);
  EXPECT_EQ(two[1].step, 3);
  EXPECT_DOUBLE_EQ(two[1].loss, 1.0);
  std::vector<LossPoint> four = {{10, 4}, {20, 2}, {30, 6}, {40, 8}};
  auto half = DownsampleLoss(four, 2);
  ASSERT_EQ(half.size(), 2u);
  EXPECT_EQ(half[0].step, 20);
  EXPECT_DOUBLE_EQ(half[0].loss, 3.0);  // the mean of its run
  EXPECT_EQ(half[1].step, 40);
  EXPECT_DOUBLE_EQ(half[1].loss, 8.0);  // the newest, exactly
  EXPECT_TRUE(DownsampleLoss({}, 10).empty());
}

// The dashboard serves one snapshot to every token, viewers and other users included, so
// no job's environment values (secrets; `submit --export=ALL` sends a whole shell's) may
// be in it: GET /v1/jobs hides them from whoever does not own the job, and so must this.
TEST_F(DashboardTest, HidesEveryJobsEnvironmentValues) {
  AddNode("n1", 2);
  auto submit = [&](const std::string& name, int gpus) {
    api::JobSpec spec;
    spec.name = name;
    spec.user = "alice";
    spec.command = {"/bin/true"};
    spec.gpus_per_node = gpus;
    spec.env = {{"AWS_SECRET_ACCESS_KEY", "s3cr3t-" + name}};
    auto j = cluster().Submit(spec);
    EXPECT_TRUE(j.has_value()) << j.error().message;
    return j ? j->id : 0;
  };
  const api::JobId running = submit("running", 2);
  cluster().Schedule();
  const api::JobId pending = submit("pending", 2);  // waits for n1
  const api::JobId done = submit("done", 1);
  ASSERT_TRUE(cluster().Cancel(done).has_value());
  cluster().Schedule();

  const std::string bob = MakeToken("bob", "viewer");
  auto res = Send("GET", "/v1/dashboard", bob);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->body.find("s3cr3t"), std::string::npos) << res->body;
  json d = json::parse(res->body);
  ASSERT_EQ(d["running"].size(), 1u);
  ASSERT_EQ(d["queue"].size(), 1u);
  ASSERT_EQ(d["recent"].size(), 1u);
  EXPECT_EQ(d["running"][0]["id"], running);
  EXPECT_EQ(d["queue"][0]["id"], pending);
  EXPECT_EQ(d["recent"][0]["id"], done);
  for (const char* list : {"running", "queue", "recent"}) {
    EXPECT_EQ(d[list][0]["spec"]["env"], (json{{"AWS_SECRET_ACCESS_KEY", "(hidden)"}})) << list;
  }
  // Its owner still reads them where the caller is known.
  const std::string alice = MakeToken("alice", "user");
  auto own = Send("GET", "/v1/jobs/" + std::to_string(running), alice);
  ASSERT_TRUE(own);
  EXPECT_EQ(json::parse(own->body)["spec"]["env"]["AWS_SECRET_ACCESS_KEY"], "s3cr3t-running");
}

// A batch script (cohort batch) may hold secrets as env values do: another user reads a
// placeholder that still decodes as a script (the CLI decodes every listed job), in the
// job, the job list and the dashboard; its owner reads the script.
TEST_F(DashboardTest, HidesABatchScriptFromOtherUsers) {
  AddNode("n1", 2);
  api::JobSpec spec;
  spec.name = "batch";
  spec.user = "alice";
  spec.allocation = true;
  spec.script = "#!/bin/sh\nexport TOKEN=s3cr3t\n";
  auto job = cluster().Submit(spec);
  ASSERT_TRUE(job.has_value()) << job.error().message;
  const std::string id = std::to_string(job->id);
  const std::string bob = MakeToken("bob", "user");
  for (const std::string& path : {"/v1/jobs/" + id, std::string("/v1/jobs?state=all"), std::string("/v1/dashboard")}) {
    auto res = Send("GET", path, bob);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << path << ": " << res->body;
    EXPECT_EQ(res->body.find("s3cr3t"), std::string::npos) << path << ": " << res->body;
    EXPECT_NE(res->body.find("hidden: a batch script is shown to its job's owner and admins"), std::string::npos)
        << path << ": " << res->body;
  }
  auto theirs = Send("GET", "/v1/jobs/" + id, bob);
  ASSERT_TRUE(theirs);
  auto decoded = api::JobFromJson(json::parse(theirs->body));
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message;
  EXPECT_TRUE(decoded->spec.is_batch_script());
  auto own = Send("GET", "/v1/jobs/" + id, MakeToken("alice", "user"));
  ASSERT_TRUE(own);
  EXPECT_EQ(json::parse(own->body)["spec"]["script"], spec.script);
}

TEST_F(DashboardTest, RejectsBadQueryParameters) {
  struct Case {
    std::string query;
    std::string field;
  } cases[] = {
      {"?recent=-1", "recent"},  {"?recent=1001", "recent"}, {"?recent=abc", "recent"},
      {"?points=1", "points"},   {"?points=", "points"},     {"?queue=1e3", "queue"},
      {"?limit=5", "limit"},
  };
  for (const auto& c : cases) {
    auto res = http_->Get("/v1/dashboard" + c.query);
    ASSERT_TRUE(res) << c.query;
    EXPECT_EQ(res->status, 400) << c.query << ": " << res->body;
    json body = json::parse(res->body);
    EXPECT_EQ(body["error"]["code"], "invalid_argument") << c.query;
    EXPECT_EQ(body["error"]["field"], c.field) << c.query;
    EXPECT_NE(body["error"]["message"].get<std::string>().find(c.field), std::string::npos) << body.dump();
  }
  auto res = http_->Get("/v1/dashboard?limit=5");
  EXPECT_NE(res->body.find("accepted: recent, queue, points"), std::string::npos) << res->body;
}

TEST_F(DashboardTest, PassesGpuTelemetryAndHealthThrough) {
  AddNode("n1", 2);
  api::Heartbeat hb;
  hb.incarnation = "inc-n1";
  api::GpuReport g;
  g.index = 1;
  g.telemetry.utilization = 0.75;
  g.telemetry.memory_used_bytes = 10LL << 30;
  g.telemetry.memory_total_bytes = 80LL << 30;
  g.telemetry.temperature_celsius = 61;
  hb.gpus.push_back(g);
  ASSERT_TRUE(cluster().Heartbeat("n1", hb).has_value());
  json d = Dashboard();
  const json& gpu = d["nodes"][0]["gpus"][1];
  ASSERT_TRUE(gpu.contains("telemetry")) << gpu.dump();
  EXPECT_DOUBLE_EQ(gpu["telemetry"]["utilization"].get<double>(), 0.75);
  EXPECT_EQ(gpu["telemetry"]["memory_used_bytes"], 10LL << 30);
  EXPECT_EQ(gpu["healthy"], true);
  EXPECT_EQ(d["summary"]["unhealthy_gpus"], 0);
}

// ---- static files ----

TEST_F(DashboardTest, ServesThePageWithTypesAndValidators) {
  struct Case {
    std::string path;
    std::string type;
    std::string needle;
  } cases[] = {
      {"/", "text/html; charset=utf-8", "<title>Cohort</title>"},
      {"/index.html", "text/html; charset=utf-8", "app.js"},
      {"/app.js", "text/javascript; charset=utf-8", "/v1/dashboard"},
      {"/style.css", "text/css; charset=utf-8", ".gpu"},
  };
  for (const auto& c : cases) {
    auto res = http_->Get(c.path);
    ASSERT_TRUE(res) << c.path;
    EXPECT_EQ(res->status, 200) << c.path;
    EXPECT_EQ(res->get_header_value("Content-Type"), c.type) << c.path;
    EXPECT_NE(res->body.find(c.needle), std::string::npos) << c.path;
    EXPECT_EQ(res->get_header_value("Cache-Control"), "no-cache") << c.path;
    EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff") << c.path;
    std::string etag = res->get_header_value("ETag");
    ASSERT_GE(etag.size(), 3u) << c.path;
    EXPECT_EQ(etag.front(), '"');
    EXPECT_EQ(etag.back(), '"');
    // The bytes are the file's, as embedded.
    const WebAsset* a = FindWebAsset(c.path);
    ASSERT_NE(a, nullptr) << c.path;
    EXPECT_EQ(res->body, a->bytes);

    // Revalidation: the same ETag gets 304 and no body; another gets the file again.
    auto again = http_->Get(c.path, {{"If-None-Match", etag}});
    ASSERT_TRUE(again);
    EXPECT_EQ(again->status, 304) << c.path;
    EXPECT_TRUE(again->body.empty());
    auto listed = http_->Get(c.path, {{"If-None-Match", "\"other\", W/" + etag}});
    ASSERT_TRUE(listed);
    EXPECT_EQ(listed->status, 304) << c.path;
    auto stale = http_->Get(c.path, {{"If-None-Match", "\"stale\""}});
    ASSERT_TRUE(stale);
    EXPECT_EQ(stale->status, 200) << c.path;
    EXPECT_EQ(stale->body, res->body);
  }
  auto page = http_->Get("/");
  std::string csp = page->get_header_value("Content-Security-Policy");
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
}

TEST_F(DashboardTest, UnknownPathsAre404) {
  for (std::string path : {"/nope.js", "/favicon.ico", "/index.htm", "/web/app.js", "/../etc/passwd",
                           "/%2e%2e/etc/passwd", "/v1/nope", "/v1"}) {
    auto res = http_->Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path << ": " << res->body;
    json body = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << path << ": " << res->body;
    EXPECT_EQ(body["error"]["code"], "not_found") << path;
  }
  // The API still answers beside the static routes.
  auto health = http_->Get("/v1/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(DashboardTest, BrowsersGetGzipNotBrotli) {
  // What Chromium sends; httplib's Brotli (quality 11) would take seconds on a large reply.
  for (std::string path : {"/app.js", "/v1/dashboard"}) {
    auto res = http_->Get(path, {{"Accept-Encoding", "gzip, deflate, br"}});
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_EQ(res->get_header_value("Content-Encoding"), "gzip") << path;
    auto only_br = http_->Get(path, {{"Accept-Encoding", "br;q=1.0"}});
    ASSERT_TRUE(only_br) << path;
    EXPECT_EQ(only_br->status, 200) << path;
    EXPECT_FALSE(only_br->has_header("Content-Encoding")) << path;
  }
}

TEST(WebAssets, EveryFileIsEmbeddedSortedWithAType) {
  const auto& assets = WebAssets();
  ASSERT_GE(assets.size(), 3u);
  for (size_t i = 0; i < assets.size(); ++i) {
    EXPECT_FALSE(assets[i].bytes.empty()) << assets[i].path;
    EXPECT_NE(assets[i].content_type, "application/octet-stream") << assets[i].path;
    if (i > 0) {
      EXPECT_LT(assets[i - 1].path, assets[i].path);
    }
  }
  EXPECT_NE(FindWebAsset("/"), nullptr);
  EXPECT_EQ(FindWebAsset("/"), FindWebAsset("/index.html"));
  EXPECT_EQ(FindWebAsset("/missing"), nullptr);
}

}  // namespace
}  // namespace cohort::head
