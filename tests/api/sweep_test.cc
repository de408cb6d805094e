// Sweeps (api/sweep.h): the section's checks, grid and random points, the array a sweep
// makes, and what an element of a `cohort train` sweep gets.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "api/job_env.h"
#include "api/sweep.h"
#include "api/types.h"

namespace cohort::api {
namespace {

std::string ErrorOf(const json& sweep) {
  auto r = ValidateSweep(sweep);
  EXPECT_FALSE(r) << sweep.dump();
  return r ? "" : r.error().ToString();
}

TEST(SweepTest, GridVisitsEveryCombinationOnce) {
  auto sweep = ValidateSweep(json::parse(R"({"grid": {"train.lr": [3e-4, 1e-3], "train.batch": [8, 16, 32]}})"));
  ASSERT_TRUE(sweep) << sweep.error().ToString();
  EXPECT_EQ(SweepSize(*sweep), 6);
  EXPECT_EQ(SweepArray(*sweep), "0-5");
  std::set<std::pair<std::string, std::string>> seen;
  for (int64_t i = 0; i < 6; ++i) {
    auto v = SweepValues(*sweep, i);
    ASSERT_EQ(v.size(), 2u);
    EXPECT_EQ(v[0].first, "train.batch");
    EXPECT_EQ(v[1].first, "train.lr");
    seen.insert({v[0].second, v[1].second});
  }
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(SweepValues(*sweep, 0)[1].second, "0.0003");
  EXPECT_EQ(SweepValues(*sweep, 1)[1].second, "0.001") << "the last name varies fastest";
}

TEST(SweepTest, RandomDrawsReproduciblePointsInTheirRanges) {
  auto sweep = ValidateSweep(json::parse(R"({"random": {"samples": 200, "seed": 7, "params": {
      "train.lr": {"min": 1e-5, "max": 1e-1, "scale": "log"},
      "train.warmup": {"min": 0, "max": 10, "int": true},
      "act": ["gelu", "relu"]}}, "parallel": 4})"));
  ASSERT_TRUE(sweep) << sweep.error().ToString();
  EXPECT_EQ(SweepArray(*sweep), "0-199%4");
  int below_1e3 = 0;
  std::set<std::string> warmups, acts;
  for (int64_t i = 0; i < 200; ++i) {
    auto v = SweepValues(*sweep, i);
    EXPECT_EQ(v, SweepValues(*sweep, i)) << "a pure function of the index";
    const double lr = std::stod(v[1].second);
    EXPECT_GE(lr, 1e-5);
    EXPECT_LE(lr, 1e-1);
    below_1e3 += lr < 1e-3;
    warmups.insert(v[2].second);
    acts.insert(v[0].second);
  }
  EXPECT_GT(below_1e3, 60) << "a log scale spends half its samples below the geometric middle";
  EXPECT_EQ(warmups.size(), 11u) << "0..10, each integer drawn";
  EXPECT_EQ(acts, (std::set<std::string>{"gelu", "relu"}));
}

// An integer on a log scale (a batch size from 16 to 1024) is drawn log-uniformly, as
// Optuna's suggest_int(log=True): as many draws from 16-127 as from 128-1023.
TEST(SweepTest, AnIntegerOnALogScaleIsDrawnLogUniformly) {
  auto sweep = ValidateSweep(json::parse(R"({"random": {"samples": 1000, "seed": 3, "params": {
      "train.batch": {"min": 16, "max": 1024, "scale": "log", "int": true}}}})"));
  ASSERT_TRUE(sweep) << sweep.error().ToString();
  int below_128 = 0;
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 1000; ++i) {
    const std::string text = SweepValues(*sweep, i)[0].second;
    const int64_t b = std::stoll(text);
    EXPECT_EQ(std::to_string(b), text) << "a whole number";
    EXPECT_GE(b, 16);
    EXPECT_LE(b, 1024);
    below_128 += b < 128;
    seen.insert(b);
  }
  // log2(128/16) = 3 of log2(1025/16) = 6.0 octaves: half the draws, within sampling noise.
  EXPECT_GT(below_128, 430);
  EXPECT_LT(below_128, 570);
  EXPECT_TRUE(seen.contains(16));
  EXPECT_NE(ErrorOf(json::parse(R"({"random": {"samples": 2, "params": {"b": {"min": 1.2, "max": 1.8, "int": true}}}})"))
                .find("holds no whole number from 1.2 to 1.8"),
            std::string::npos);
}

TEST(SweepTest, BadSectionsNameTheField) {
  EXPECT_NE(ErrorOf(json::object()).find("exactly one of grid or random"), std::string::npos);
  EXPECT_NE(ErrorOf({{"grid", {{"lr", json::array()}}}}).find("sweep.grid.lr"), std::string::npos);
  EXPECT_NE(ErrorOf({{"grid", {{"1lr", {1}}}}}).find("parameter name"), std::string::npos);
  EXPECT_NE(ErrorOf({{"grid", {{"lr", {json::object()}}}}}).find("sweep.grid.lr[0]"), std::string::npos);
  EXPECT_NE(ErrorOf(json::parse(R"({"random": {"samples": 2, "params": {"lr": {"min": 0, "max": 1, "scale": "log"}}}})"))
                .find("a log scale needs min > 0"),
            std::string::npos);
  EXPECT_NE(ErrorOf(json::parse(R"({"random": {"samples": 0, "params": {"lr": [1]}}})")).find("samples"),
            std::string::npos);
  EXPECT_NE(ErrorOf(json::parse(R"({"random": {"samples": 2, "params": {"lr": {"min": 2, "max": 1}}}})"))
                .find("must be at least min"),
            std::string::npos);
  EXPECT_NE(ErrorOf(json::parse(R"({"grid": {"lr": [1]}, "early_stop": {"milestones": [20, 10]}})")).find("ascending"),
            std::string::npos);
  EXPECT_NE(ErrorOf(json::parse(R"({"grid": {"lr": [1]}, "early_stop": {"milestones": [10], "keep": 1.5}})"))
                .find("sweep.early_stop.keep"),
            std::string::npos);
  auto early = ValidateSweep(json::parse(R"({"grid": {"lr": [1]}, "early_stop": {"milestones": [10, 20]}})"));
  ASSERT_TRUE(early) << early.error().message;
  EXPECT_EQ((*early)["early_stop"], json::parse(R"({"milestones": [10, 20], "keep": 0.5, "min_elements": 3})"));
  auto both = JobSpecFromJson({{"command", {"true"}}, {"array", "0-3"}, {"sweep", {{"grid", {{"lr", {1, 2}}}}}}});
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().message.find("a sweep makes its own array (0-1)"), std::string::npos) << both.error().message;
}

TEST(SweepTest, ATrainElementGetsSetOverridesAndEveryElementItsEnvironment) {
  auto spec = JobSpecFromJson({{"command", {"/usr/bin/cohort", "train", "--config", "c.yaml"}},
                               {"sweep", {{"grid", {{"train.lr", {0.0003, 0.001}}, {"seed", {1}}}}}}});
  ASSERT_TRUE(spec) << spec.error().ToString();
  EXPECT_EQ(spec->array, "0-1");
  auto back = JobSpecFromJson(ToJson(*spec));
  ASSERT_TRUE(back) << "a stored sweep reads back: " << back.error().ToString();
  Job element;
  element.id = 9;
  element.spec = *spec;
  element.spec.array.clear();
  element.spec.sweep = nullptr;
  element.array_job_id = 8;
  element.array_task_id = 1;
  ApplySweepElement(spec->sweep, 1, element.spec, element.sweep_values);
  EXPECT_EQ(element.spec.command, (std::vector<std::string>{"/usr/bin/cohort", "train", "--config", "c.yaml", "--set",
                                                            "train.lr=0.001"}))
      << "only section.key names are config fields";
  NodeAllocation na;
  na.node = "n1";
  na.tasks = {{0, 0, {}}};
  element.allocation.nodes = {na};
  auto env = TaskEnvironment(element, na, na.tasks[0], TaskEnvOptions{});
  EXPECT_EQ(env["COHORT_SWEEP_TRAIN_LR"], "0.001");
  EXPECT_EQ(env["COHORT_SWEEP_SEED"], "1");
  auto stored = JobFromJson(ToJson(element));
  ASSERT_TRUE(stored) << stored.error().ToString();
  EXPECT_EQ(stored->sweep_values, element.sweep_values);
  // Any other command gets the environment only.
  JobSpec plain = *spec;
  plain.command = {"python3", "train.py"};
  std::map<std::string, std::string> values;
  ApplySweepElement(spec->sweep, 0, plain, values);
  EXPECT_EQ(plain.command.size(), 2u);
  EXPECT_EQ(values["train.lr"], "0.0003");
}

}  // namespace
}  // namespace cohort::api
