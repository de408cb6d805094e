// RenderTop: one `cohort top` frame from a /v1/dashboard reply, with and without the GPU
// telemetry and health fields, fitted to the width.
#include <gtest/gtest.h>

#include "cli/client.h"
#include "cli/table.h"

namespace cohort::cli {
namespace {

api::Job TopJob(api::JobId id, api::JobState state, const std::string& name, const std::string& user, int gpus,
                int priority) {
  api::Job j;
  j.id = id;
  j.state = state;
  j.spec.name = name;
  j.spec.user = user;
  j.spec.command = {"train"};
  j.spec.nodes = 1;
  j.spec.gpus_per_node = gpus;
  j.spec.priority = priority;
  return j;
}

// Goes through the wire: what the head would send, decoded as `cohort top` decodes it.
api::Dashboard Dashboard(bool telemetry) {
  api::NodeStatus n;
  n.node.name = "n1";
  n.node.cpus = 32;
  for (int i = 0; i < 2; ++i) {
    api::Gpu g;
    g.index = i;
    g.name = "H100";
    g.memory_bytes = 80LL << 30;
    n.node.gpus.push_back(g);
  }
  if (telemetry) {
    n.node.gpus[0].telemetry = api::GpuTelemetry{0.875, 40LL << 30, 80LL << 30, 64.4, 512.0, 1.98e9, 1};
    n.node.gpus[1].healthy = false;
    n.node.gpus[1].health_reason = "XID 79: fallen off the bus";
    n.unhealthy_gpus = 1;
  }
  n.display_state = "UP";
  n.gpus_allocated = 1;
  n.cpus_allocated = 1;
  n.jobs = {7};
  n.heartbeat_age_ms = 300;

  api::Job running = TopJob(7, api::JobState::kRunning, "gpt-small", "ada", 1, 0);
  running.start_ms = 1000;
  running.submit_ms = 500;
  api::NodeAllocation na;
  na.node = "n1";
  na.gpus = {0};
  running.allocation.nodes = {na};
  api::ProgressPoint p;
  p.step = 1200;
  p.loss = 2.3456;
  p.tokens_per_s = 151234.0;
  api::Job pending = TopJob(8, api::JobState::kPending, "big", "bob", 8, 3);
  pending.submit_ms = 61000;
  pending.reason = "waiting for 8 free GPUs on 1 node";

  api::Dashboard d;
  d.time_ms = 121000;
  d.summary = {1, 1, 2, 1, telemetry ? 1 : 0, 1, 1};
  d.nodes = {n};
  d.queue = {{{pending, 0, std::nullopt, std::nullopt}, std::nullopt, std::nullopt}};
  const api::ProgressEta eta{1200, 4800, 25.0, 2.0, 1800, 120000};
  d.running = {{{running, 60, std::vector<api::TaskUsage>{}, eta}, p, std::nullopt}};
  auto decoded = api::DashboardFromJson(api::ToJson(d));
  EXPECT_TRUE(decoded.has_value()) << decoded.error().message;
  return decoded ? *decoded : api::Dashboard{};
}

TEST(RenderTop, ShowsTelemetryAndHealth) {
  TopOptions o;
  o.head_url = "http://head:8470";
  o.width = 160;
  std::string out = RenderTop(Dashboard(true), o);
  EXPECT_NE(out.find("cohort top - http://head:8470"), std::string::npos) << out;
  EXPECT_NE(out.find("nodes 1/1 up   GPUs 1/2 allocated   running 1   pending 1   unhealthy GPUs 1"), std::string::npos) << out;
  EXPECT_NE(out.find("88%"), std::string::npos) << out;        // utilization
  EXPECT_NE(out.find("40.0/80.0"), std::string::npos) << out;  // memory
  EXPECT_NE(out.find("64C"), std::string::npos) << out;
  EXPECT_NE(out.find("512W"), std::string::npos) << out;
  EXPECT_NE(out.find("1980"), std::string::npos) << out;  // SM MHz, on a wide screen
  EXPECT_NE(out.find("UNHEALTHY: XID 79: fallen off the bus"), std::string::npos) << out;
  EXPECT_NE(out.find("1 bad"), std::string::npos) << out;
  EXPECT_NE(out.find("gpt-small"), std::string::npos) << out;
  EXPECT_NE(out.find("1200"), std::string::npos) << out;
  EXPECT_NE(out.find("2.346"), std::string::npos) << out;
  EXPECT_NE(out.find("151.2k"), std::string::npos) << out;
  EXPECT_NE(out.find("PROGRESS"), std::string::npos) << out;
  EXPECT_NE(out.find("25% 2.0/s ETA 30m"), std::string::npos) << out;
  EXPECT_NE(out.find("waiting for 8 free GPUs on 1 node"), std::string::npos) << out;
  EXPECT_NE(out.find("2m00s"), std::string::npos) << out;  // running since 1000, now 121000
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
}

TEST(RenderTop, ShowsDashesWithoutTelemetry) {
  TopOptions o;
  o.width = 100;
  std::string out = RenderTop(Dashboard(false), o);
  EXPECT_NE(out.find("GPUS (2)"), std::string::npos) << out;
  EXPECT_EQ(out.find("UNHEALTHY"), std::string::npos) << out;
  EXPECT_EQ(out.find("bad"), std::string::npos) << out;
  EXPECT_EQ(out.find("SM MHz"), std::string::npos) << "narrow screens drop the clock column:\n" << out;
  EXPECT_NE(out.find("-/80.0"), std::string::npos) << out;  // memory total from the GPU, use unknown
}

TEST(RenderTop, SectionsComeInOrderAndRecentJobsShowHowTheyEnded) {
  api::Dashboard d = Dashboard(true);
  api::Job done = TopJob(5, api::JobState::kFailed, "old", "cy", 1, 0);
  done.end_ms = 61000;
  done.reason = "rank 0 exited with code 1";
  d.recent = {{{done, 10, std::nullopt, std::nullopt}, std::nullopt, std::nullopt}};
  TopOptions o;
  o.width = 160;
  std::string out = RenderTop(d, o);
  size_t nodes = out.find("\nNODES (1)\n"), gpus = out.find("\nGPUS (2)\n"), running = out.find("\nRUNNING (1)\n"),
         queue = out.find("\nQUEUE (1)\n"), recent = out.find("\nRECENT\n");
  ASSERT_NE(recent, std::string::npos) << out;
  EXPECT_LT(nodes, gpus);
  EXPECT_LT(gpus, running);
  EXPECT_LT(running, queue);
  EXPECT_LT(queue, recent);
  EXPECT_NE(out.find("FAILED", recent), std::string::npos) << out;
  EXPECT_NE(out.find("1m00s ago", recent), std::string::npos) << out;
  EXPECT_NE(out.find("rank 0 exited with code 1", recent), std::string::npos) << out;

  d.summary.pending = 40;  // the head cut the queue short
  EXPECT_NE(RenderTop(d, o).find("\nQUEUE (1 of 40)\n"), std::string::npos);
}

// A sharing job's GPUs are the parts it holds or asks for, as in cohort queue: top showed
// 0 for two quarter-GPU tasks (nodes x gpus_per_node), and for a job asking GPU memory only.
TEST(RenderTop, SharingJobsShowTheirPartsOfGpus) {
  api::Dashboard d = Dashboard(true);
  api::Job quarters = TopJob(9, api::JobState::kPending, "quarters", "cy", 0, 0);
  quarters.spec.tasks_per_node = 2;
  quarters.spec.gpu_share = 1;  // a quarter of a GPU per task
  api::Job memory = TopJob(10, api::JobState::kPending, "memory", "cy", 0, 0);
  memory.spec.gpu_memory_mib = 20 * 1024;
  d.queue = {{{quarters, 0, std::nullopt, std::nullopt}, std::nullopt, std::nullopt},
             {{memory, 0, std::nullopt, std::nullopt}, std::nullopt, std::nullopt}};
  TopOptions o;
  o.width = 160;
  const std::string out = RenderTop(d, o);
  const size_t queue = out.find("\nQUEUE (");
  ASSERT_NE(queue, std::string::npos) << out;
  const std::string section = out.substr(queue);
  auto row = [&](const std::string& name) {
    const size_t at = section.find(name);
    return at == std::string::npos ? std::string() : section.substr(at, section.find('\n', at) - at);
  };
  EXPECT_NE(row("quarters").find(" 0.5 "), std::string::npos) << out;
  EXPECT_NE(row("memory").find(" 20GiB "), std::string::npos) << out;
}

TEST(RenderTop, FitsTheWidthAndSurvivesAnEmptyReply) {
  TopOptions o;
  for (size_t width : {40, 60, 80, 200}) {
    o.width = width;
    std::string out = RenderTop(Dashboard(true), o);
    size_t start = 0;
    while (start < out.size()) {
      size_t end = out.find('\n', start);
      EXPECT_LE(DisplayWidth(out.substr(start, end - start)), width) << out.substr(start, end - start);
      start = end + 1;
    }
  }
  std::string empty = RenderTop(api::Dashboard{}, o);
  EXPECT_NE(empty.find("NODES (0)"), std::string::npos) << empty;
  EXPECT_NE(empty.find("(none)"), std::string::npos) << empty;
}

}  // namespace
}  // namespace cohort::cli
