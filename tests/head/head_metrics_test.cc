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
  m.control_loop_lateness_seconds = prom::Histogram({1}).Snapshot();
  m.store_commit_seconds = prom::Histogram({1}).Snapshot();
  auto text = RenderHeadMetrics(m);
  ASSERT_TRUE(text.has_value()) << text.error().message;
  EXPECT_THAT(*text, HasSubstr("cohort_nodes{state=\"up\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_nodes{state=\"down\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_node_up{node=\"n2\"} 0\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpus{state=\"allocated\"} 3\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpus{state=\"free\"} 4\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpus{state=\"unhealthy\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpus{state=\"unavailable\"} 8\n"));
  // Which node holds the unhealthy GPU, for an alert that says where to look.
  EXPECT_THAT(*text, HasSubstr("# TYPE cohort_node_gpus_unhealthy gauge\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_node_gpus_unhealthy{node=\"n1\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_node_gpus_unhealthy{node=\"n2\"} 0\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_jobs_pending{reason=\"resources\"} 2\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_job_state_transitions_total{from=\"pending\",to=\"running\"} 4\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_scheduler_pass_duration_seconds_bucket{le=\"0.01\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_scheduler_pass_duration_seconds_bucket{le=\"+Inf\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_job_queue_wait_seconds_count 0\n"));
}

// The head's own lag and the unhealthy zone (core/liveness.h).
TEST(HeadMetricsTest, LivenessAndLagSeries) {
  ClusterMetrics m;
  m.nodes.push_back({"n1", "UP", 1, 0, 0, 0.1});
  m.nodes.push_back({"n2", "UNREACHABLE", 1, 1, 0, 9});
  m.liveness_suspended = true;
  m.silent_ratio = 0.75;
  m.unheard_seconds = 12.5;
  prom::Histogram late({0.1, 10});
  late.Observe(5);
  m.control_loop_lateness_seconds = late.Snapshot();
  prom::Histogram commit({0.01});
  commit.Observe(0.002);
  m.store_commit_seconds = commit.Snapshot();
  m.pass_seconds = prom::Histogram({1}).Snapshot();
  m.queue_wait_seconds = prom::Histogram({1}).Snapshot();
  auto text = RenderHeadMetrics(m);
  ASSERT_TRUE(text.has_value()) << text.error().message;
  EXPECT_THAT(*text, HasSubstr("cohort_nodes{state=\"unreachable\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_node_up{node=\"n2\"} 0\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_gpus{state=\"unavailable\"} 0\n")) << "its GPU is allocated";
  EXPECT_THAT(*text, HasSubstr("cohort_liveness_suspended 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_liveness_silent_ratio 0.75\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_head_unheard_seconds_total 12.5\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_head_control_loop_lateness_seconds_bucket{le=\"10\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_head_control_loop_lateness_seconds_bucket{le=\"0.1\"} 0\n"));
  EXPECT_THAT(*text, HasSubstr("cohort_head_store_commit_duration_seconds_count 1\n"));
}

}  // namespace
}  // namespace cohort::head
