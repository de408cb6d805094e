// GET /v1/jobs against an in-process head: the list is sent from each job's JSON as the
// Cluster keeps it between requests (Cluster::ListJobsSerialized), so it must be the same
// object, field for field, as the projected list (?fields=..., built from api::ToJson of
// the JobStatus view), and show every change of a job at once.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>
#include <httplib.h>

#include "api/views.h"
#include "head/cluster.h"
#include "head/head.h"

namespace cohort::head {
namespace {

class JobsListTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-jobs-list-XXXXXX";
    dir_ = mkdtemp(tmpl);
    HeadConfig config;
    config.port = 0;
    config.state_dir = dir_ + "/head";
    config.http_threads = 4;
    // Nobody heartbeats on a clock here: keep every node UP for the test's lifetime.
    config.timing.heartbeat_interval_ms = 1000;
    config.timing.fence_timeout_ms = 300'000;
    config.timing.failure_timeout_ms = 600'000;
    auto h = HeadServer::Start(config);
    ASSERT_TRUE(h.has_value()) << h.error().message;
    head_ = std::move(*h);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", head_->port());
  }
  void TearDown() override {
    head_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  Cluster& cluster() { return head_->cluster(); }

  void AddNode(const std::string& name, int gpus) {
    api::Registration reg;
    reg.name = name;
    reg.address = "127.0.0.1";
    reg.agent_url = "http://127.0.0.1:1";
    reg.incarnation = "inc-" + name;
    reg.cpus = 16;
    for (int g = 0; g < gpus; ++g) {
      api::Gpu gpu;
      gpu.index = g;
      gpu.name = "Test GPU";
      gpu.uuid = name + "-gpu" + std::to_string(g);
      gpu.memory_bytes = 80LL << 30;
      gpu.simulated = true;
      reg.gpus.push_back(gpu);
    }
    ASSERT_TRUE(cluster().Register(reg).has_value());
  }

  api::Job Submit(const std::string& name, int gpus) {
    api::JobSpec spec;
    spec.name = name;
    spec.user = "alice";
    spec.command = {"/bin/true", "caf\xc3\xa9 \"quoted\"\n"};
    spec.nodes = 1;
    spec.gpus_per_node = gpus;
    auto j = cluster().Submit(spec);
    EXPECT_TRUE(j.has_value()) << j.error().message;
    return j ? *j : api::Job{};
  }

  json Get(const std::string& path) {
    auto res = http_->Get(path);
    EXPECT_TRUE(res) << "no reply to " << path;
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    return json::parse(res->body);
  }

  // Both forms of the list, gpu_seconds aside (it grows between the two requests).
  void ExpectListsAgree(const std::string& query) {
    static const std::string all =
        "allocation,attempt,end_ms,exit_code,exits,gpu_seconds,history,id,moves,reason,spec,start_ms,state,"
        "submit_ms,tasks_usage";
    json whole = Get("/v1/jobs?" + query);
    json projected = Get("/v1/jobs?" + query + "&fields=" + all);
    ASSERT_EQ(whole["jobs"].size(), projected["jobs"].size()) << query;
    EXPECT_EQ(whole.value("next_cursor", ""), projected.value("next_cursor", "")) << query;
    for (size_t i = 0; i < whole["jobs"].size(); ++i) {
      json a = whole["jobs"][i];
      json b = projected["jobs"][i];
      EXPECT_GE(a["gpu_seconds"].get<double>(), 0);
      a.erase("gpu_seconds");
      b.erase("gpu_seconds");
      EXPECT_EQ(a, b) << query << " item " << i;
      EXPECT_TRUE(api::JobStatusFromJson(whole["jobs"][i], "jobs[i]").has_value());
    }
  }

  std::string dir_;
  std::unique_ptr<HeadServer> head_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(JobsListTest, TheWholeListIsTheProjectedListFieldForField) {
  AddNode("n1", 4);
  api::Job a = Submit("a", 4);
  cluster().Schedule();
  Submit("b", 2);  // waits: n1 is full
  api::Job c = Submit("c", 1);
  ASSERT_TRUE(cluster().Cancel(c.id).has_value());
  cluster().Schedule();
  // n1 reports a's task with its resource use.
  api::Heartbeat hb;
  hb.incarnation = "inc-n1";
  api::TaskReport t;
  t.job = a.id;
  t.rank = 0;
  t.running = true;
  t.gpus = {0, 1, 2, 3};
  t.cpu_seconds = 12.5;
  t.rss_bytes = 1 << 30;
  hb.tasks = {t};
  ASSERT_TRUE(cluster().Heartbeat("n1", hb).has_value());

  for (int round = 0; round < 2; ++round) {  // the second from the kept texts
    ExpectListsAgree("state=all");
    ExpectListsAgree("state=PENDING,RUNNING");
    ExpectListsAgree("state=all&limit=1");
    ExpectListsAgree("state=all&limit=2&cursor=" + std::to_string(c.id));
  }
  json active = Get("/v1/jobs");
  ASSERT_EQ(active["jobs"].size(), 2u);
  EXPECT_EQ(active["jobs"][0]["state"], "RUNNING");
  ASSERT_EQ(active["jobs"][0]["tasks_usage"].size(), 1u);
  EXPECT_EQ(active["jobs"][0]["tasks_usage"][0]["rss_bytes"], 1 << 30);
  EXPECT_EQ(active["jobs"][1]["state"], "PENDING");
  EXPECT_FALSE(active["jobs"][1]["reason"].get<std::string>().empty()) << "the last pass's pending reason";
}

TEST_F(JobsListTest, AChangedJobIsListedAsItIsNow) {
  AddNode("n1", 4);
  api::Job a = Submit("a", 4);
  api::Job b = Submit("b", 4);
  cluster().Schedule();
  json before = Get("/v1/jobs");
  ASSERT_EQ(before["jobs"].size(), 2u);
  EXPECT_EQ(before["jobs"][0]["state"], "RUNNING");
  EXPECT_EQ(before["jobs"][1]["state"], "PENDING");
  // a is cancelled: it leaves the active list; b's reason changes with the next pass.
  ASSERT_TRUE(cluster().Cancel(a.id).has_value());
  json after = Get("/v1/jobs?state=all");
  ASSERT_EQ(after["jobs"].size(), 2u);
  EXPECT_EQ(after["jobs"][0]["state"], "CANCELLED");
  json active = Get("/v1/jobs");
  ASSERT_EQ(active["jobs"].size(), 1u);
  EXPECT_EQ(active["jobs"][0]["id"], b.id);
  ExpectListsAgree("state=all");
}

}  // namespace
}  // namespace cohort::head
