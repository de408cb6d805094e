// The head's /metrics text (metrics.h).
#include "head/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort::head {
namespace {

using ::testing::HasSubstr;

TEST(HeadMetricsTest, ClusterSeries) {
  ClusterMetrics m;
  m.nodes.push_back({"n1", "UP", 8, 3, 1, 0.25});
  m.nodes.push_back({"n2", "DOWN", 8, 0, 0, 12});
  m.jobs_by_state = {{"pending", 2}, {"running", 1}};
  m.pending_by_reason = {{"resources", 2}};
  m.transitions[{"pending", "running"}] = 4;
  prom::Histogram h({0.001, 0.01});
  h.Observe(0.002);
  m.pass_seconds = h.Snapshot();
  m.queue_wait_seconds = prom::Histogram({1}).Snapshot();
  auto text = RenderHeadMetrics(m);
  ASSERT_TRUE(text.has_value()) << text.error().message;
  EXPECT_THAT(*text, HasSubstr("cohort_nodes{state=\"up\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_nodes{state=\"down\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_node_up{node=\"n2\"} 0\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpus{state=\"allocated\"} 3\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpus{state=\"free\"} 4\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpus{state=\"unhealthy\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpus{state=\"unavailable\"} 8\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_jobs_pending{reason=\"resources\"} 2\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_job_state_transitions_total{from=\"pending\",to=\"running\"} 4\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_scheduler_pass_duration_seconds_bucket{le=\"0.01\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_scheduler_pass_duration_seconds_bucket{le=\"+Inf\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_job_queue_wait_seconds_count 0\n"));
}

}  // namespace
}  // namespace cohort::head
