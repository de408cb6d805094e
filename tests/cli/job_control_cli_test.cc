// `cohort update`'s body, `cohort history`'s query and table: plain values in, text out.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/client.h"

namespace cohort::cli {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNow = 1'800'000'000'000;

TEST(UpdateBodyTest, EachFlagBecomesItsField) {
  auto body = UpdateBody(std::string("1d12h"), 7, std::string("renamed"));
  ASSERT_TRUE(body.has_value()) << body.error().message;
  EXPECT_EQ(*body, (json{{"time_limit_s", 129600}, {"priority", 7}, {"name", "renamed"}}));
  EXPECT_EQ(*UpdateBody(std::string("unlimited"), std::nullopt, std::nullopt), (json{{"time_limit_s", 0}}));
}

TEST(UpdateBodyTest, BadOrMissingFlagsAreRefusedNamingTheFlag) {
  auto none = UpdateBody(std::nullopt, std::nullopt, std::nullopt);
  ASSERT_FALSE(none.has_value());
  EXPECT_THAT(none.error().message, HasSubstr("nothing to update"));
  auto limit = UpdateBody(std::string("soon"), std::nullopt, std::nullopt);
  ASSERT_FALSE(limit.has_value());
  EXPECT_THAT(limit.error().message, HasSubstr("--time-limit"));
  auto priority = UpdateBody(std::nullopt, 1001, std::nullopt);
  ASSERT_FALSE(priority.has_value());
  EXPECT_THAT(priority.error().message, HasSubstr("--priority"));
  EXPECT_EQ(ExitCodeFor(priority.error()), 2);
}

TEST(HistoryQueryTest, DefaultsToEndedJobsAndReadsTimesAndStates) {
  HistoryFlags f;
  auto q = HistoryQueryFor(f, kNow);
  ASSERT_TRUE(q.has_value());
  using Q = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(*q, (Q{{"state", "SUCCEEDED,FAILED,CANCELLED,TIMEOUT"}, {"limit", "100"}}));
  f.user = "alice";
  f.states = {"failed", "timeout"};
  f.since = "2d";
  f.until = "1d";
  f.limit = 5;
  q = HistoryQueryFor(f, kNow);
  ASSERT_TRUE(q.has_value()) << q.error().message;
  EXPECT_EQ(*q, (Q{{"state", "FAILED,TIMEOUT"},
                   {"user", "alice"},
                   {"since", std::to_string(kNow - 2 * 86'400'000)},
                   {"until", std::to_string(kNow - 86'400'000)},
                   {"limit", "5"}}));
}

TEST(HistoryQueryTest, BadFlagsAreNamed) {
  for (auto [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"--state", "DONE"}, {"--since", "yesterday"}, {"--until", "soon"}, {"--user", "a b"}}) {
    HistoryFlags f;
    if (field == "--state") f.states = {value};
    if (field == "--since") f.since = value;
    if (field == "--until") f.until = value;
    if (field == "--user") f.user = value;
    auto q = HistoryQueryFor(f, kNow);
    ASSERT_FALSE(q.has_value()) << field;
    EXPECT_THAT(q.error().message, HasSubstr(field));
  }
  HistoryFlags backwards;
  backwards.since = "1h";
  backwards.until = "2h";
  EXPECT_FALSE(HistoryQueryFor(backwards, kNow).has_value());
  HistoryFlags zero;
  zero.limit = 0;
  EXPECT_FALSE(HistoryQueryFor(zero, kNow).has_value());
}

TEST(RenderHistoryTest, ShowsExitElapsedAndGpuHours) {
  api::JobStatus failed;
  failed.job.id = 7;
  failed.job.spec.name = "train";
  failed.job.spec.user = "alice";
  failed.job.state = api::JobState::kFailed;
  failed.job.reason = "rank 1 exited with code 3";
  failed.job.exit_code = 3;
  failed.job.exits = {{0, "n1", 0, 0, "", kNow - 10}, {1, "n2", 3, 9, "", kNow - 5}};
  failed.job.submit_ms = kNow - 7'200'000;
  failed.job.start_ms = kNow - 3'600'000;
  failed.job.end_ms = kNow;
  failed.job.history = {{0, kNow - 3'600'000, kNow, {"n1", "n2"}, "rank 1 exited", 8}};
  failed.gpu_seconds = 8 * 3600;
  api::JobStatus timeout;
  timeout.job.id = 8;
  timeout.job.spec.name = "slow";
  timeout.job.spec.user = "bob";
  timeout.job.state = api::JobState::kTimeout;
  timeout.job.reason = "time limit of 1.0s exceeded";
  const std::string out = RenderHistory({failed, timeout}, kNow);
  EXPECT_THAT(out, HasSubstr("JOBID  NAME   USER   STATE    EXIT  ELAPSED  GPU-HOURS"));
  EXPECT_THAT(out, HasSubstr("7      train  alice  FAILED   3:9   1h00m    8.0000"));
  EXPECT_THAT(out, HasSubstr("rank 1 exited with code 3"));
  EXPECT_THAT(out, HasSubstr("8      slow   bob    TIMEOUT  -     -        0.0000"));
}

TEST(RenderHistoryTest, AnArrayElementIsNamedAsTheQueueNamesIt) {
  api::JobStatus element;
  element.job.id = 9;
  element.job.array_job_id = 3;
  element.job.array_task_id = 4;
  element.job.spec.name = "sweep";
  element.job.spec.user = "alice";
  element.job.state = api::JobState::kSucceeded;
  element.job.exit_code = 0;
  const std::string out = RenderHistory({element}, kNow);
  EXPECT_THAT(out, HasSubstr("\n3_4    sweep  alice  SUCCEEDED")) << out;
}

}  // namespace
// A filtered cancel's requests: plain jobs by id, an array whole or (pending only) its
// indices not yet started, elements alone unless their array goes whole.
TEST(CancelTargetsTest, ArraysGoWholeOrByTheirUnstartedIndices) {
  const json plain = {{"id", 5}, {"spec", {{"name", "a"}}}};
  const json array = {{"id", 12}, {"spec", {{"name", "a"}, {"array", "0-99"}}}, {"array_left", "40-99"}};
  const json element = {{"id", 20}, {"spec", {{"name", "a"}, {"array", ""}}}, {"array_job_id", 12}, {"array_task_id", 7}};
  const json lone = {{"id", 21}, {"spec", {{"name", "a"}}}, {"array_job_id", 13}, {"array_task_id", 2}};
  EXPECT_EQ(CancelTargets({plain, array, element, lone}, true), (std::vector<std::string>{"12", "5", "13_2"}));
  EXPECT_EQ(CancelTargets({plain, array, element, lone}, false),
            (std::vector<std::string>{"12_[40-99]", "5", "12_7", "13_2"}));
  json started = array;
  started["array_left"] = "";
  EXPECT_EQ(CancelTargets({started, element}, false), (std::vector<std::string>{"12_7"}));
  EXPECT_TRUE(CancelTargets({}, true).empty());
}

}  // namespace cohort::cli
