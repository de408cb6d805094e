// `cohort usage` tables.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/client.h"

namespace cohort::cli {
namespace {

json Report() {
  return json::parse(R"({
    "since_ms": 0, "until_ms": null, "now_ms": 1000, "total_gpu_seconds": 9000, "total_gpu_hours": 2.5,
    "users": [{"user": "alice", "gpu_seconds": 7200, "gpu_hours": 2, "jobs": 1},
              {"user": "bob", "gpu_seconds": 1800, "gpu_hours": 0.5, "jobs": 1}],
    "jobs": [{"id": 1, "name": "train", "user": "alice", "state": "SUCCEEDED", "gpus": 2, "attempts": 1,
              "gpu_seconds": 7200, "gpu_hours": 2},
             {"id": 2, "name": "eval", "user": "bob", "state": "RUNNING", "gpus": 1, "attempts": 2,
              "gpu_seconds": 1800, "gpu_hours": 0.5}]})");
}

TEST(RenderUsageTest, PerUserAndPerJobWithCost) {
  auto text = RenderUsage(Report(), 2.0);
  ASSERT_TRUE(text.has_value()) << text.error().message;
  EXPECT_EQ(*text,
            "GPU usage from the start to now, at 2.00 per GPU-hour\n"
            "\n"
            "USER   JOBS  GPU-HOURS  COST\n"
            "alice  1     2.0000     4.00\n"
            "bob    1     0.5000     1.00\n"
            "TOTAL  2     2.5000     5.00\n"
            "\n"
            "JOBID  NAME   USER   STATE      GPUS  ATTEMPTS  GPU-HOURS  COST\n"
            "1      train  alice  SUCCEEDED  2     1         2.0000     4.00\n"
            "2      eval   bob    RUNNING    1     2         0.5000     1.00\n");
  auto no_price = RenderUsage(Report(), std::nullopt);
  ASSERT_TRUE(no_price.has_value());
  EXPECT_THAT(*no_price, ::testing::Not(::testing::HasSubstr("COST")));
  EXPECT_FALSE(RenderUsage(json::object(), 1.0).has_value());
}

}  // namespace
}  // namespace cohort::cli
