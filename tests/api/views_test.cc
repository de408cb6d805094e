// Codecs of the views (views.h, dashboard.h, usage.h): each round-trips, and a bad field
// is named by its full path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "api/dashboard.h"
#include "api/usage.h"
#include "api/views.h"

namespace cohort::api {
namespace {

using ::testing::HasSubstr;

Node TestNode(const std::string& name) {
  Node n;
  n.name = name;
  n.address = "10.0.0.1";
  n.agent_url = "http://10.0.0.1:8471";
  n.incarnation = "inc";
  n.version = "0.1.0";
  n.cpus = 32;
  n.drain = true;
  n.drain_reason = "disk swap";
  n.registered_ms = 1000;
  n.last_heartbeat_ms = 2000;
  for (int i = 0; i < 2; ++i) {
    Gpu g;
    g.index = i;
    g.name = "H100";
    g.uuid = "GPU-" + std::to_string(i);
    g.memory_bytes = int64_t{80} << 30;
    n.gpus.push_back(g);
  }
  n.gpus[1].healthy = false;
  n.gpus[1].health_reason = "XID 79";
  n.gpus[0].telemetry = GpuTelemetry{0.5, 1 << 30, int64_t{80} << 30, 60.0, 300.0, 1.98e9, 1500};
  return n;
}

NodeStatus TestNodeStatus() {
  NodeStatus s;
  s.node = TestNode("n1");
  s.display_state = "DRAINING";
  s.gpus_allocated = 1;
  s.cpus_allocated = 4;
  s.jobs = {12, 14};
  s.heartbeat_age_ms = 450;
  s.unhealthy_gpus = 1;
  return s;
}

Job TestJob(JobId id, JobState state) {
  Job j;
  j.id = id;
  j.spec.name = "train";
  j.spec.user = "ada";
  j.spec.command = {"python3", "train.py"};
  j.spec.nodes = 1;
  j.spec.gpus_per_node = 2;
  j.state = state;
  j.attempt = 1;
  j.submit_ms = 100;
  j.start_ms = 200;
  j.allocation.master_addr = "10.0.0.1";
  j.allocation.master_port = 29500;
  NodeAllocation na;
  na.node = "n1";
  na.address = "10.0.0.1";
  na.gpus = {0, 1};
  na.cpus = 2;
  na.tasks = {{0, 0, {0, 1}}};
  na.version = 7;
  j.allocation.nodes.push_back(na);
  j.history.push_back({1, 200, 0, {"n1"}, "", 2});
  return j;
}

// The error's field, or "(accepted)".
template <typename T>
std::string FieldOf(const Result<T>& r) {
  return r ? std::string("(accepted)") : r.error().field;
}

// The field named when `base`, changed by `edit`, is decoded by `decode`.
template <typename Edit, typename Decode>
std::string FieldAfterEdit(json base, Edit edit, Decode decode) {
  edit(base);
  return FieldOf(decode(base));
}

TEST(NodeStatusCodecTest, RoundTrips) {
  NodeStatus s = TestNodeStatus();
  json j = ToJson(s);
  EXPECT_EQ(j["unhealthy_gpus"], 1);
  EXPECT_EQ(j["name"], "n1");  // the node's own fields, flat
  auto back = NodeStatusFromJson(j);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), j);
  EXPECT_EQ(back->unhealthy_gpus, 1);
  EXPECT_EQ(back->jobs, (std::vector<JobId>{12, 14}));
  EXPECT_FALSE(back->node.gpus[1].healthy);
  EXPECT_EQ(*back->node.gpus[0].telemetry->sm_clock_hz, 1.98e9);
}

TEST(NodeStatusCodecTest, BadFieldsAreNamed) {
  auto with = [](const char* key, json value) {
    json j = ToJson(TestNodeStatus());
    j[key] = std::move(value);
    return NodeStatusFromJson(j, "nodes[2]");
  };
  EXPECT_EQ(FieldOf(with("unhealthy_gpus", "one")), "nodes[2].unhealthy_gpus");
  EXPECT_EQ(FieldOf(with("gpus_allocated", -1)), "nodes[2].gpus_allocated");
  EXPECT_EQ(FieldOf(with("display_state", "SIDEWAYS")), "nodes[2].display_state");
  EXPECT_EQ(FieldOf(with("jobs", json::array({1, "x"}))), "nodes[2].jobs[1]");
  EXPECT_EQ(FieldOf(with("heartbeat_age_ms", json(nullptr))), "nodes[2].heartbeat_age_ms");
  json no_name = ToJson(TestNodeStatus());
  no_name.erase("name");
  auto bad = NodeStatusFromJson(no_name, "nodes[2]");
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("nodes[2]: "));
  EXPECT_THAT(bad.error().message, HasSubstr("name"));
  // A field the view does not know (a newer head) is ignored.
  EXPECT_EQ(FieldOf(with("added_later", 1)), "(accepted)");
}

TEST(NodeStatusCodecTest, NodeListRoundTripsAndNamesTheBadNode) {
  NodeStatus second = TestNodeStatus();
  second.node.name = "n2";
  json j = NodeListToJson({TestNodeStatus(), second});
  ASSERT_EQ(j["nodes"].size(), 2u);
  auto back = NodeListFromJson(j);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].node.name, "n2");
  EXPECT_EQ(NodeListToJson(*back), j);
  j["nodes"][1]["cpus_allocated"] = "four";
  EXPECT_EQ(FieldOf(NodeListFromJson(j)), "nodes[1].cpus_allocated");
  EXPECT_EQ(FieldOf(NodeListFromJson(json::object())), "nodes");
}

TEST(JobStatusCodecTest, RoundTripsWithAndWithoutTaskUsage) {
  JobStatus s{TestJob(3, JobState::kRunning), 123.5,
              std::vector<TaskUsage>{{0, "n1", 1.25, 4096, {2}, int64_t{50} << 30, "over its share", "0-3"},
                                     {1, "n1", 0.5, 1024, {}, 0, "", ""}},
              ProgressEta{40, 100, 40.0, 2.5, 24, 5000}};
  json j = ToJson(s);
  EXPECT_EQ(j["tasks_usage"][0]["rss_bytes"], 4096);
  EXPECT_EQ(j["tasks_usage"][0]["gpus"], json({2}));
  EXPECT_EQ(j["tasks_usage"][0]["gpu_memory_bytes"], int64_t{50} << 30);
  EXPECT_EQ(j["tasks_usage"][0]["gpu_memory_warning"], "over its share");
  EXPECT_FALSE(j["tasks_usage"][1].contains("gpu_memory_warning")) << "written only when set";
  EXPECT_EQ(j["tasks_usage"][0]["cpu_list"], "0-3");
  EXPECT_FALSE(j["tasks_usage"][1].contains("cpu_list")) << "written only when bound";
  auto back = JobStatusFromJson(j);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), j);
  ASSERT_TRUE(back->tasks_usage.has_value());
  EXPECT_EQ((*back->tasks_usage)[0].cpu_seconds, 1.25);
  ASSERT_TRUE(back->progress_eta.has_value());
  EXPECT_EQ(back->progress_eta->eta_s, 24);

  JobStatus done{TestJob(4, JobState::kSucceeded), 10, std::nullopt, std::nullopt};
  json dj = ToJson(done);
  EXPECT_FALSE(dj.contains("tasks_usage"));
  auto done_back = JobStatusFromJson(dj);
  ASSERT_TRUE(done_back.has_value());
  EXPECT_FALSE(done_back->tasks_usage.has_value());
  EXPECT_FALSE(dj.contains("progress_eta"));

  // A view from before GPU memory (no gpus, gpu_memory_bytes) still reads; bad GPUs are named.
  json old = j;
  old["tasks_usage"][1].erase("gpus");
  old["tasks_usage"][1].erase("gpu_memory_bytes");
  ASSERT_TRUE(JobStatusFromJson(old).has_value());
  old["tasks_usage"][0]["gpus"] = json({-1});
  EXPECT_EQ(FieldOf(JobStatusFromJson(old)), "tasks_usage[0].gpus");
  j["tasks_usage"][0]["cpu_seconds"] = "lots";
  EXPECT_EQ(FieldOf(JobStatusFromJson(j, "running[0]")), "running[0].tasks_usage[0].cpu_seconds");
  j.erase("gpu_seconds");
  EXPECT_EQ(FieldOf(JobStatusFromJson(j)), "gpu_seconds");
}

Dashboard TestDashboard() {
  Dashboard d;
  d.time_ms = 121000;
  d.summary = {1, 1, 2, 1, 1, 1, 1};
  d.nodes = {TestNodeStatus()};
  Job pending = TestJob(8, JobState::kPending);
  pending.allocation = {};
  pending.reason = "waiting for 8 free GPUs";
  d.queue = {{{pending, 0, std::nullopt, std::nullopt}, std::nullopt, std::nullopt}};
  ProgressPoint p;
  p.time_ms = 5000;
  p.attempt = 1;
  p.step = 1200;
  p.loss = 2.3456;
  p.tokens_per_s = 151234.0;
  d.running = {{{TestJob(7, JobState::kRunning), 60, std::vector<TaskUsage>{}, std::nullopt}, p,
                LossCurve{0, 3, {{1, 9.5}, {1200, 2.3456}}}}};
  return d;
}

TEST(DashboardCodecTest, RoundTripsAndLeavesOutWhatOnlyAJobsDetailShows) {
  Dashboard d = TestDashboard();
  json j = ToJson(d);
  const json& running = j["running"][0];
  EXPECT_FALSE(running.contains("exits"));
  EXPECT_FALSE(running.contains("history"));
  EXPECT_FALSE(running["allocation"]["nodes"][0].contains("tasks"));
  EXPECT_FALSE(running["allocation"]["nodes"][0].contains("version"));
  EXPECT_EQ(running["loss"]["points"], json::parse("[[1, 9.5], [1200, 2.3456]]"));
  EXPECT_EQ(running["progress"]["step"], 1200);
  EXPECT_FALSE(running["progress"].contains("samples_per_s"));
  EXPECT_FALSE(j["queue"][0].contains("progress"));
  EXPECT_EQ(j["summary"], json::parse(R"({"nodes": 1, "nodes_up": 1, "gpus": 2, "gpus_allocated": 1,
                                          "unhealthy_gpus": 1, "pending": 1, "running": 1})"));

  auto back = DashboardFromJson(j);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), j);
  EXPECT_EQ(back->running[0].progress->tokens_per_s, 151234.0);
  EXPECT_FALSE(back->running[0].progress->samples_per_s.has_value());
  EXPECT_EQ(back->running[0].loss->points.size(), 2u);
  EXPECT_TRUE(back->running[0].status.job.history.empty());
  EXPECT_EQ(back->queue[0].status.job.reason, "waiting for 8 free GPUs");
}

TEST(DashboardCodecTest, BadFieldsAreNamed) {
  json j = ToJson(TestDashboard());
  auto field_with = [&](auto edit) { return FieldAfterEdit(j, edit, [](const json& c) { return DashboardFromJson(c); }); };
  EXPECT_EQ(field_with([](json& c) { c["summary"]["pending"] = "many"; }), "summary.pending");
  EXPECT_EQ(field_with([](json& c) { c.erase("summary"); }), "summary");
  EXPECT_EQ(field_with([](json& c) { c["nodes"][0]["gpus_allocated"] = 1.5; }), "nodes[0].gpus_allocated");
  EXPECT_EQ(field_with([](json& c) { c["running"][0]["progress"]["step"] = -3; }), "running[0].progress.step");
  EXPECT_EQ(field_with([](json& c) { c["running"][0]["loss"]["points"][1] = json::array({1}); }),
            "running[0].loss.points[1]");
  EXPECT_EQ(field_with([](json& c) { c["queue"] = json::object(); }), "queue");
  EXPECT_EQ(field_with([](json& c) { c.erase("recent"); }), "recent");
  EXPECT_EQ(field_with([](json& c) { c["time_ms"] = "now"; }), "time_ms");
  EXPECT_FALSE(DashboardFromJson(json()).has_value());
}

UsageReport TestUsage() {
  UsageReport r;
  r.window = {5000, 9000};
  r.now_ms = 8000;
  r.total_gpu_seconds = 9000;
  r.users = {{"alice", 7200, 1}, {"bob", 1800, 1}};
  r.jobs = {{1, "train", "alice", "ml", JobState::kSucceeded, 2, 1, 7200}, {2, "eval", "bob", "default", JobState::kRunning, 1, 2, 1800}};
  return r;
}

TEST(UsageCodecTest, RoundTripsWithAnOpenOrClosedWindow) {
  UsageReport r = TestUsage();
  json j = ToJson(r);
  EXPECT_EQ(j["until_ms"], 9000);
  EXPECT_EQ(j["total_gpu_hours"], 2.5);
  EXPECT_EQ(j["jobs"][1]["state"], "RUNNING");
  EXPECT_EQ(j["users"][0]["gpu_hours"], 2.0);
  auto back = UsageReportFromJson(j);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), j);

  r.window.until_ms = std::numeric_limits<int64_t>::max();
  json open = ToJson(r);
  EXPECT_TRUE(open["until_ms"].is_null());
  auto open_back = UsageReportFromJson(open);
  ASSERT_TRUE(open_back.has_value());
  EXPECT_EQ(open_back->window.until_ms, std::numeric_limits<int64_t>::max());
}

TEST(UsageCodecTest, BadFieldsAreNamed) {
  json j = ToJson(TestUsage());
  auto field_with = [&](auto edit) { return FieldAfterEdit(j, edit, [](const json& c) { return UsageReportFromJson(c); }); };
  EXPECT_EQ(field_with([](json& c) { c["jobs"][1]["state"] = "SLEEPING"; }), "jobs[1].state");
  EXPECT_EQ(field_with([](json& c) { c["users"][0]["jobs"] = "one"; }), "users[0].jobs");
  EXPECT_EQ(field_with([](json& c) { c["users"][1].erase("user"); }), "users[1].user");
  EXPECT_EQ(field_with([](json& c) { c.erase("until_ms"); }), "until_ms");
  EXPECT_EQ(field_with([](json& c) { c["total_gpu_seconds"] = -1; }), "total_gpu_seconds");
  EXPECT_EQ(FieldOf(UsageReportFromJson(json::object())), "since_ms");
}

}  // namespace
}  // namespace cohort::api
