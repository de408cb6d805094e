// A node's GPU utilization history (head/core/util_history.h): sampled at most every
// kUtilSampleIntervalMs, bounded, the mean of the GPUs that reported one.
#include "head/core/util_history.h"

#include <gtest/gtest.h>

namespace cohort::head::core {
namespace {

std::optional<api::GpuTelemetry> Util(std::optional<double> u) {
  api::GpuTelemetry t;
  t.utilization = u;
  return t;
}

TEST(UtilHistory, MeanOfKnownReadingsSampledAtIntervalsAndBounded) {
  std::deque<api::UtilSample> h;
  NoteGpuUtilization(h, {Util(0.5), Util(1.0), Util(std::nullopt), std::nullopt}, 1'000);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_DOUBLE_EQ(h[0].utilization, 0.75);
  NoteGpuUtilization(h, {Util(0.0)}, 1'000 + kUtilSampleIntervalMs - 1);  // too soon
  EXPECT_EQ(h.size(), 1u);
  NoteGpuUtilization(h, {Util(std::nullopt)}, 1'000 + kUtilSampleIntervalMs);  // nothing known
  EXPECT_EQ(h.size(), 1u);
  for (size_t i = 1; i <= kUtilHistorySamples + 5; ++i) {
    NoteGpuUtilization(h, {Util(0.25)}, 1'000 + static_cast<int64_t>(i) * kUtilSampleIntervalMs);
  }
  EXPECT_EQ(h.size(), kUtilHistorySamples);
  EXPECT_EQ(h.back().time_ms, 1'000 + static_cast<int64_t>(kUtilHistorySamples + 5) * kUtilSampleIntervalMs);
  EXPECT_DOUBLE_EQ(h.front().utilization, 0.25);  // the first sample has been dropped
}

TEST(UtilHistory, TheNodeViewCarriesItAndRoundTrips) {
  api::NodeStatus s;
  s.node.name = "n1";
  s.display_state = "UP";
  s.gpu_util_history = {{1'000, 0.5}, {11'000, 0.75}};
  json j = api::ToJson(s);
  EXPECT_EQ(j["gpu_util_history"], json::parse("[[1000, 0.5], [11000, 0.75]]"));
  auto back = api::NodeStatusFromJson(j);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(api::ToJson(*back), j);
  j["gpu_util_history"][1][1] = 1.5;
  EXPECT_FALSE(api::NodeStatusFromJson(j).has_value());
  s.gpu_util_history.clear();
  EXPECT_FALSE(api::ToJson(s).contains("gpu_util_history"));
}

}  // namespace
}  // namespace cohort::head::core
