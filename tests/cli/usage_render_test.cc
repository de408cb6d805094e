// `cohort usage` tables.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/client.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

api::UsageReport Report() {
  auto r = api::UsageReportFromJson(json::parse(R"({
    "since_ms": 0, "until_ms": null, "now_ms": 1000, "total_gpu_seconds": 9000, "total_gpu_hours": 2.5,
    "teams": [{"team": "ml", "gpu_seconds": 7200, "gpu_hours": 2, "jobs": 1},
              {"team": "default", "gpu_seconds": 1800, "gpu_hours": 0.5, "jobs": 1}],
    "users": [{"user": "alice", "gpu_seconds": 7200, "gpu_hours": 2, "jobs": 1},
              {"user": "bob", "gpu_seconds": 1800, "gpu_hours": 0.5, "jobs": 1}],
    "jobs": [{"id": 1, "name": "train", "user": "alice", "team": "ml", "state": "SUCCEEDED", "gpus": 2, "attempts": 1,
              "gpu_seconds": 7200, "gpu_hours": 2},
             {"id": 2, "name": "eval", "user": "bob", "team": "default", "state": "RUNNING", "gpus": 0.5, "attempts": 2,
              "gpu_seconds": 1800, "gpu_hours": 0.5}]})"));
  EXPECT_TRUE(r.has_value()) << r.error().message;
  return r ? *r : api::UsageReport{};
}

TEST(RenderUsageTest, PerUserAndPerJobWithCost) {
  EXPECT_EQ(RenderUsage(Report(), 2.0),
            "GPU usage from the start to now, at 2.00 per GPU-hour\n"
            "\n"
            "TEAM     JOBS  GPU-HOURS  COST\n"
            "ml       1     2.0000     4.00\n"
            "default  1     0.5000     1.00\n"
            "\n"
            "USER   JOBS  GPU-HOURS  COST\n"
            "alice  1     2.0000     4.00\n"
            "bob    1     0.5000     1.00\n"
            "TOTAL  2     2.5000     5.00\n"
            "\n"
            "JOBID  NAME   USER   TEAM     STATE      GPUS  ATTEMPTS  GPU-HOURS  COST\n"
            "1      train  alice  ml       SUCCEEDED  2     1         2.0000     4.00\n"
            "2      eval   bob    default  RUNNING    0.5   2         0.5000     1.00\n");
  EXPECT_THAT(RenderUsage(Report(), std::nullopt), ::testing::Not(::testing::HasSubstr("COST")));
}

TEST(RenderUsageTest, ShowsAClosedWindow) {
  api::UsageReport r = Report();
  r.window = {1'800'000'000'000, 1'800'000'360'000};
  std::string text = RenderUsage(r, std::nullopt);
  EXPECT_THAT(text, ::testing::StartsWith("GPU usage from " + FormatTimestamp(r.window.since_ms) + " to " +
                                          FormatTimestamp(r.window.until_ms) + "\n"));
}

}  // namespace
}  // namespace cohort::cli
