// Codecs of the telemetry, health and accounting fields.
#include <gtest/gtest.h>

#include "api/types.h"

namespace cohort::api {
namespace {

json Heartbeat(json gpus) {
  return json{{"incarnation", "abc"}, {"applied_version", 1}, {"tasks", json::array()}, {"gpus", std::move(gpus)}};
}

TEST(TelemetryCodecTest, HeartbeatGpuReportsRoundTrip) {
  api::Heartbeat hb;
  hb.incarnation = "abc";
  GpuReport g;
  g.index = 0;
  g.telemetry.utilization = 0.5;
  g.telemetry.memory_used_bytes = 1 << 30;
  g.telemetry.memory_total_bytes = int64_t{80} << 30;
  g.telemetry.temperature_celsius = 60;
  g.telemetry.power_watts = 300.5;
  g.telemetry.sm_clock_hz = 1.98e9;
  g.health_events = 2;
  g.health_event = "XID 79";
  hb.gpus.push_back(g);
  GpuReport unknown;  // every reading unknown
  unknown.index = 1;
  hb.gpus.push_back(unknown);
  TaskReport t;
  t.job = 3;
  t.cpu_seconds = 1.25;
  t.rss_bytes = 4096;
  t.gpu_memory_bytes = int64_t{50} << 30;
  t.gpu_memory_warning = "task 0 used 50 GiB of GPU 1, over its share of 40 GiB (gpu_memory_enforce: report)";
  t.cpu_list = "0-3,8";
  hb.tasks.push_back(t);
  TaskReport unbound;
  unbound.job = 4;
  hb.tasks.push_back(unbound);

  json j = ToJson(hb);
  EXPECT_FALSE(j["tasks"][1].contains("cpu_list")) << "an unbound task's report reads as an older agent's";
  EXPECT_FALSE(j["gpus"][1].contains("utilization"));  // unknown readings are left out
  auto back = HeartbeatFromJson(j);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ASSERT_EQ(back->gpus.size(), 2u);
  EXPECT_EQ(*back->gpus[0].telemetry.utilization, 0.5);
  EXPECT_EQ(*back->gpus[0].telemetry.memory_total_bytes, int64_t{80} << 30);
  EXPECT_EQ(*back->gpus[0].telemetry.sm_clock_hz, 1.98e9);
  EXPECT_EQ(back->gpus[0].health_events, 2);
  EXPECT_EQ(back->gpus[0].health_event, "XID 79");
  EXPECT_FALSE(back->gpus[1].telemetry.utilization.has_value());
  EXPECT_FALSE(back->gpus[1].telemetry.power_watts.has_value());
  EXPECT_EQ(back->tasks[0].cpu_seconds, 1.25);
  EXPECT_EQ(back->tasks[0].rss_bytes, 4096);
  EXPECT_EQ(back->tasks[0].gpu_memory_bytes, int64_t{50} << 30);
  EXPECT_EQ(back->tasks[0].gpu_memory_warning, t.gpu_memory_warning);
  EXPECT_EQ(back->tasks[0].cpu_list, "0-3,8");
  EXPECT_EQ(back->tasks[1].cpu_list, "");
  json bad_list = j;
  bad_list["tasks"][0]["cpu_list"] = "0-3; rm -rf";
  auto refused = HeartbeatFromJson(bad_list);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().field, "tasks[0].cpu_list");

  // A heartbeat without the new fields (an older agent) still decodes.
  auto old = HeartbeatFromJson(json{{"incarnation", "abc"}, {"tasks", json::array()}});
  ASSERT_TRUE(old.has_value());
  EXPECT_TRUE(old->gpus.empty());
}

TEST(TelemetryCodecTest, BadReportsNameTheField) {
  auto field_of = [](json gpus) {
    auto r = HeartbeatFromJson(Heartbeat(std::move(gpus)));
    return r ? std::string("(accepted)") : r.error().field;
  };
  EXPECT_EQ(field_of(json::array({{{"index", 0}, {"utilization", 1.5}}})), "gpus[0].utilization");
  EXPECT_EQ(field_of(json::array({{{"index", 0}, {"utilization", "high"}}})), "gpus[0].utilization");
  EXPECT_EQ(field_of(json::array({{{"index", 0}, {"power_watts", -1}}})), "gpus[0].power_watts");
  EXPECT_EQ(field_of(json::array({{{"index", 0}, {"memory_used_bytes", 1.5}}})), "gpus[0].memory_used_bytes");
  EXPECT_EQ(field_of(json::array({{{"index", -1}}})), "gpus[0].index");
  EXPECT_EQ(field_of(json::array({{{"utilization", 0.5}}})), "gpus[0].index");
  EXPECT_EQ(field_of(json::array({{{"index", 0}, {"health_events", -1}}})), "gpus[0].health_events");
  // A field this head does not know is a newer agent's, ignored (codecs.cc, UnknownFields::kIgnore).
  EXPECT_EQ(field_of(json::array({{{"index", 0}, {"temprature_celsius", 50}}})), "(accepted)");
  EXPECT_EQ(field_of(json::array({{{"index", 0}, {"health_event", std::string(2000, 'x')}}})), "gpus[0].health_event");
  EXPECT_EQ(field_of(json("no")), "gpus");
  EXPECT_EQ(field_of(json::array({{{"index", 0}, {"utilization", nullptr}}})), "(accepted)");  // null: unknown

  json bad_task = {{"incarnation", "abc"},
                   {"tasks", json::array({{{"job", 1}, {"attempt", 0}, {"rank", 0}, {"running", true},
                                           {"cpu_seconds", -2}}})}};
  auto r = HeartbeatFromJson(bad_task);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "tasks[0].cpu_seconds");
}

TEST(TelemetryCodecTest, NodeGpuHealthAndTelemetry) {
  Node n;
  n.name = "n1";
  Gpu g;
  g.index = 0;
  g.uuid = "GPU-1";
  g.healthy = false;
  g.health_reason = "XID 79";
  GpuTelemetry t;
  t.utilization = 0.25;
  t.updated_ms = 123;
  g.telemetry = t;
  n.gpus.push_back(g);
  json j = ToJson(n);
  EXPECT_EQ(j["gpus"][0]["healthy"], false);
  EXPECT_EQ(j["gpus"][0]["health_reason"], "XID 79");
  EXPECT_EQ(j["gpus"][0]["telemetry"]["utilization"], 0.25);
  EXPECT_TRUE(j["gpus"][0]["telemetry"]["power_watts"].is_null());
  EXPECT_EQ(j["gpus"][0]["telemetry"]["updated_ms"], 123);
  auto back = NodeFromJson(j);
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->gpus[0].healthy);
  EXPECT_EQ(back->gpus[0].health_reason, "XID 79");
  ASSERT_TRUE(back->gpus[0].telemetry.has_value());
  EXPECT_EQ(*back->gpus[0].telemetry->utilization, 0.25);
  EXPECT_FALSE(back->gpus[0].telemetry->power_watts.has_value());

  // A node stored before health existed: healthy, no telemetry.
  auto old = NodeFromJson(json{{"name", "n1"}, {"gpus", json::array({{{"index", 0}, {"uuid", "GPU-1"}}})}});
  ASSERT_TRUE(old.has_value());
  EXPECT_TRUE(old->gpus[0].healthy);
  EXPECT_TRUE(old->gpus[0].health_reason.empty());
  EXPECT_FALSE(old->gpus[0].telemetry.has_value());

  // A registration carries the inventory only, and the strict reader accepts it back.
  Registration reg;
  reg.name = "n1";
  reg.address = "127.0.0.1";
  reg.incarnation = "abc";
  reg.gpus.push_back(g);
  json rj = ToJson(reg);
  EXPECT_FALSE(rj["gpus"][0].contains("healthy"));
  EXPECT_TRUE(RegistrationFromJson(rj).has_value());
}

TEST(TelemetryCodecTest, AttemptGpusStoredAndOldRecordsLoad) {
  Job job;
  job.id = 5;
  job.spec.command = {"x"};
  job.spec.user = "alice";
  job.spec.name = "x";
  AttemptRecord a;
  a.attempt = 0;
  a.start_ms = 1000;
  a.end_ms = 2000;
  a.gpus = 8;
  job.history.push_back(a);
  auto back = JobFromJson(ToJson(job));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->history[0].gpus, 8);

  json old = ToJson(job);
  old["history"][0].erase("gpus");
  auto loaded = JobFromJson(old);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->history[0].gpus, -1);  // unknown: accounting falls back to the spec
}

}  // namespace
}  // namespace cohort::api
