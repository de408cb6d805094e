// RenderTop: one `cohort top` frame from a /v1/dashboard reply, with and without the GPU
// telemetry and health fields, fitted to the width.
#include <gtest/gtest.h>

#include "cli/client.h"
#include "cli/table.h"

namespace cohort::cli {
namespace {

json Dashboard(bool telemetry) {
  json gpu0 = {{"index", 0}, {"name", "H100"}, {"memory_bytes", 80LL << 30}};
  json gpu1 = gpu0;
  gpu1["index"] = 1;
  if (telemetry) {
    gpu0["healthy"] = true;
    gpu0["health_reason"] = "";
    gpu0["telemetry"] = {{"utilization", 0.875}, {"memory_used_bytes", 40LL << 30}, {"memory_total_bytes", 80LL << 30},
                         {"temperature_celsius", 64.4}, {"power_watts", 512.0}, {"sm_clock_hz", 1.98e9}, {"updated_ms", 1}};
    gpu1["healthy"] = false;
    gpu1["health_reason"] = "XID 79: fallen off the bus";
    gpu1["telemetry"] = nullptr;
  }
  json job = {{"id", 7}, {"state", "RUNNING"}, {"start_ms", 1000}, {"submit_ms", 500},
              {"spec", {{"name", "gpt-small"}, {"user", "ada"}, {"nodes", 1}, {"gpus_per_node", 1}, {"priority", 0}}},
              {"allocation", {{"nodes", {{{"node", "n1"}, {"gpus", {0}}}}}}},
              {"progress", {{"step", 1200}, {"loss", 2.3456}, {"tokens_per_s", 151234.0}}}};
  json pending = {{"id", 8}, {"state", "PENDING"}, {"submit_ms", 61000}, {"reason", "waiting for 8 free GPUs on 1 node"},
                  {"spec", {{"name", "big"}, {"user", "bob"}, {"nodes", 1}, {"gpus_per_node", 8}, {"priority", 3}}}};
  return {{"time_ms", 121000},
          {"summary", {{"nodes", 1}, {"nodes_up", 1}, {"gpus", 2}, {"gpus_allocated", 1}, {"running", 1}, {"pending", 1},
                       {"unhealthy_gpus", telemetry ? 1 : 0}}},
          {"nodes", {{{"name", "n1"}, {"display_state", "UP"}, {"gpus", {gpu0, gpu1}}, {"gpus_allocated", 1},
                      {"cpus", 32}, {"cpus_allocated", 1}, {"jobs", {7}}, {"heartbeat_age_ms", 300}}}},
          {"queue", {pending}},
          {"running", {job}},
          {"recent", json::array()}};
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
  EXPECT_EQ(out.find("SM MHz"), std::string::npos) << "narrow screens drop the clock column:\n" << out;
  EXPECT_NE(out.find("-/80.0"), std::string::npos) << out;  // memory total from the GPU, use unknown
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
  std::string empty = RenderTop(json(), o);
  EXPECT_NE(empty.find("NODES (0)"), std::string::npos) << empty;
  EXPECT_NE(empty.find("(none)"), std::string::npos) << empty;
}

}  // namespace
}  // namespace cohort::cli
