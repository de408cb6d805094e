// Percent, rate and ETA from progress reports (head/progress.h EstimateProgress and
// ProgressLog::Eta), the report's total_steps and val_loss, and the view's codec and cell.
#include <gtest/gtest.h>

#include "api/progress_eta.h"
#include "head/progress.h"

namespace cohort::head {
namespace {

ProgressPoint At(int64_t time_ms, int64_t step, int rank = 0, int attempt = 0) {
  ProgressPoint p;
  p.time_ms = time_ms;
  p.step = step;
  p.rank = rank;
  p.attempt = attempt;
  return p;
}

TEST(EstimateProgress, RateFromTheNewestRanksWindowAndEtaFromTotalSteps) {
  ProgressLog log;
  ProgressPoint first = At(10'000, 100);
  first.total_steps = 1100;
  log.Add(1, first);
  log.Add(1, At(10'000, 999, /*rank=*/1));  // another rank: not mixed into rank 0's rate
  log.Add(1, At(20'000, 300));              // 200 steps in 10 s
  auto e = log.Eta(1, 0);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step, 300);
  EXPECT_EQ(e->total_steps, 1100);
  EXPECT_DOUBLE_EQ(*e->percent, 300.0 * 100 / 1100);
  EXPECT_DOUBLE_EQ(*e->steps_per_s, 20.0);
  EXPECT_EQ(e->eta_s, 40);  // 800 steps at 20/s
  EXPECT_EQ(e->updated_ms, 20'000);
  EXPECT_EQ(api::FormatProgressEta(*e), "27% 20/s ETA 40.0s");
  EXPECT_FALSE(log.Eta(1, 1).has_value()) << "attempt 1 has reported nothing";
  EXPECT_FALSE(log.Eta(2, 0).has_value());
}

TEST(EstimateProgress, OneReportOrNoTotalGivesWhatItCan) {
  auto one = EstimateProgress({At(5'000, 10)});
  ASSERT_TRUE(one.has_value());
  EXPECT_FALSE(one->steps_per_s.has_value());
  EXPECT_FALSE(one->percent.has_value());
  EXPECT_EQ(api::FormatProgressEta(*one), "step 10");
  // Newest first, as ProgressLog passes them.
  auto no_total = EstimateProgress({At(3'000, 50), At(1'000, 10)});
  EXPECT_DOUBLE_EQ(*no_total->steps_per_s, 20.0);
  EXPECT_FALSE(no_total->eta_s.has_value());
  EXPECT_EQ(api::FormatProgressEta(*no_total), "step 50 20/s");
  // Steps that went back (a resumed attempt re-reporting) give no rate; a finished one no ETA wait.
  auto back = EstimateProgress({At(3'000, 5), At(1'000, 10)});
  EXPECT_FALSE(back->steps_per_s.has_value());
  ProgressPoint done = At(2'000, 100);
  done.total_steps = 100;
  auto finished = EstimateProgress({done, At(1'000, 90)});
  EXPECT_EQ(finished->eta_s, 0);
  EXPECT_DOUBLE_EQ(*finished->percent, 100.0);
  EXPECT_FALSE(EstimateProgress({}).has_value());
}

TEST(EstimateProgress, ReportsCarryTotalStepsAndValLossAndTheViewRoundTrips) {
  auto p = ProgressReportFromJson(json{{"step", 5}, {"total_steps", 50}, {"val_loss", 2.5}});
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->total_steps, 50);
  EXPECT_EQ(p->val_loss, 2.5);
  // A second report of the same step completes the point: one point per step.
  ProgressLog log;
  ProgressPoint step = At(1'000, 5);
  step.loss = 3.0;
  log.Add(7, step);
  ProgressPoint val = At(1'500, 5);
  val.val_loss = 2.5;
  log.Add(7, val);
  auto points = log.Get(7, 10);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].loss, 3.0);
  EXPECT_EQ(points[0].val_loss, 2.5);
  EXPECT_EQ(points[0].time_ms, 1'500);

  auto zero = ProgressReportFromJson(json{{"step", 5}, {"total_steps", 0}});
  ASSERT_FALSE(zero.has_value());
  EXPECT_NE(zero.error().message.find("total_steps"), std::string::npos) << zero.error().message;

  api::ProgressEta e{12, 100, 12.0, 0.05, 1760, 99};
  auto back = api::ProgressEtaFromJson(api::ToJson(e));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(api::ToJson(*back), api::ToJson(e));
  EXPECT_EQ(api::FormatProgressEta(e), "12% 0.050/s ETA 29m20s");
  EXPECT_FALSE(api::ProgressEtaFromJson(json{{"step", 1}, {"updated_ms", 0}, {"percent", 101}}).has_value());
}

}  // namespace
}  // namespace cohort::head
