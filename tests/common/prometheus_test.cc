#include "common/prometheus.h"

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort::prom {
namespace {

using ::testing::HasSubstr;

TEST(PrometheusTextTest, FamiliesSamplesAndEscaping) {
  TextWriter w;
  w.Family("cohort_gpu_temperature_celsius", MetricType::kGauge, "Core temperature\nwith a \\ backslash");
  w.Sample({{"node", "n1"}, {"gpu", "0"}}, 71.5);
  w.Sample({{"node", "quote\"back\\slash\nnewline"}}, 3);
  w.Family("cohort_jobs_total", MetricType::kCounter, "Jobs");
  w.Sample({}, 42);
  auto text = w.Finish();
  ASSERT_TRUE(text.has_value()) << text.error().message;
  EXPECT_EQ(*text,
            "# HELP cohort_gpu_temperature_celsius Core temperature\\nwith a \\\\ backslash\n"
            "# TYPE cohort_gpu_temperature_celsius gauge\n"
            "cohort_gpu_temperature_celsius{node=\"n1\",gpu=\"0\"} 71.5\n"
            "cohort_gpu_temperature_celsius{node=\"quote\\\"back\\\\slash\\nnewline\"} 3\n"
            "# HELP cohort_jobs_total Jobs\n"
            "# TYPE cohort_jobs_total counter\n"
            "cohort_jobs_total 42\n");
}

TEST(PrometheusTextTest, HistogramIsCumulativeWithInfSumAndCount) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 2.0, 20.0, 30.0}) h.Observe(v);
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.count, 6u);
  EXPECT_DOUBLE_EQ(s.sum, 52.65);
  TextWriter w;
  w.Family("cohort_pass_duration_seconds", MetricType::kHistogram, "Passes");
  w.Histogram({{"node", "a"}}, s);
  auto text = w.Finish();
  ASSERT_TRUE(text.has_value()) << text.error().message;
  EXPECT_THAT(*text, HasSubstr("cohort_pass_duration_seconds_bucket{node=\"a\",le=\"0.1\"} 2\n"
                               "cohort_pass_duration_seconds_bucket{node=\"a\",le=\"1\"} 3\n"
                               "cohort_pass_duration_seconds_bucket{node=\"a\",le=\"10\"} 4\n"
                               "cohort_pass_duration_seconds_bucket{node=\"a\",le=\"+Inf\"} 6\n"
                               "cohort_pass_duration_seconds_sum{node=\"a\"} 52.65\n"
                               "cohort_pass_duration_seconds_count{node=\"a\"} 6\n"));
}

TEST(PrometheusTextTest, RejectsMisuse) {
  auto fails = [](auto&& build, const char* what) {
    TextWriter w;
    build(w);
    auto r = w.Finish();
    ASSERT_FALSE(r.has_value()) << what;
    EXPECT_EQ(r.error().code, ErrorCode::kInternal);
  };
  fails([](TextWriter& w) { w.Family("bad:name", MetricType::kGauge, ""); }, "colon");
  fails([](TextWriter& w) { w.Family("0bad", MetricType::kGauge, ""); }, "leading digit");
  fails([](TextWriter& w) { w.Family("requests", MetricType::kCounter, ""); }, "counter without _total");
  fails([](TextWriter& w) { w.Family("things_total", MetricType::kGauge, ""); }, "gauge with _total");
  fails([](TextWriter& w) {
    w.Family("a", MetricType::kGauge, "");
    w.Family("a", MetricType::kGauge, "");
  }, "family twice");
  fails([](TextWriter& w) { w.Sample({}, 1); }, "sample before family");
  fails([](TextWriter& w) {
    w.Family("a", MetricType::kGauge, "");
    w.Sample({{"bad-label", "x"}}, 1);
  }, "label name");
  fails([](TextWriter& w) {
    w.Family("a", MetricType::kGauge, "");
    w.Sample({{"le", "x"}}, 1);
  }, "reserved le");
  fails([](TextWriter& w) {
    w.Family("h_seconds", MetricType::kHistogram, "");
    w.Histogram({}, HistogramSnapshot{{1, 2}, {1, 1}, 0, 2});
  }, "bucket count mismatch");
  fails([](TextWriter& w) {
    w.Family("h_seconds", MetricType::kHistogram, "");
    w.Histogram({}, HistogramSnapshot{{2, 1}, {1, 1, 0}, 0, 2});
  }, "bounds not increasing");
}

TEST(PrometheusTextTest, ValueFormatting) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(85899345920.0), "85899345920");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(FormatValue(1.0 / 3)), 1.0 / 3);
  EXPECT_TRUE(ValidMetricName("cohort_gpu_power_watts"));
  EXPECT_FALSE(ValidMetricName(""));
  EXPECT_FALSE(ValidLabelName("__reserved"));
  EXPECT_EQ(EscapeLabelValue("a\"b"), "a\\\"b");
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

}  // namespace
}  // namespace cohort::prom
