// Progress everywhere: a job that reports steps with total_steps shows percent, rate and
// ETA in `cohort queue` (a PROGRESS column), `cohort show`, `cohort top` and GET /v1/jobs.
#include <gtest/gtest.h>

#include <cmath>

#include "harness.h"

namespace cohort::testing {
namespace {

TEST(ProgressEta, PercentRateAndEtaInQueueShowAndTop) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  const std::string post = "curl -sf --cacert \"$ca\" -o /dev/null -X POST \"$COHORT_REPORT\" -d ";
  const std::string script = std::string(kTaskCaFile) + post + "'{\"step\": 10, \"total_steps\": 40}' || exit 9; " +
                             "sleep 0.5; " + post + "'{\"step\": 20, \"total_steps\": 40, \"loss\": 1.5}' || exit 9; " +
                             "rm -f \"$ca\"; exec sleep 600";
  json job = c.Submit({{"name", "stepper"}, {"command", {"/bin/sh", "-c", script}}});
  const int64_t id = job["id"];
  const std::string id_text = std::to_string(id);
  c.WaitForState(id, "RUNNING");
  json eta;
  ASSERT_TRUE(WaitUntil([&] {
    eta = c.Job(id).value("progress_eta", json());
    return eta.is_object() && eta["step"] == 20;
  }, std::chrono::seconds(20))) << c.Job(id).dump(2);
  EXPECT_EQ(eta["total_steps"], 40);
  EXPECT_EQ(eta["percent"], 50.0);
  ASSERT_TRUE(eta.contains("steps_per_s")) << eta.dump();
  const double rate = eta["steps_per_s"];
  EXPECT_GT(rate, 0);
  EXPECT_LE(rate, 20.0 + 1e-9) << "10 steps in at least 0.5 s";
  EXPECT_EQ(eta["eta_s"], static_cast<int64_t>(std::ceil(20 / rate)));

  auto queue = Cohort(c, {"queue"});
  ASSERT_EQ(queue.status.Code(), 0) << queue.errors;
  EXPECT_NE(queue.output.find("PROGRESS"), std::string::npos) << queue.output;
  EXPECT_NE(queue.output.find("50% "), std::string::npos) << queue.output;
  EXPECT_NE(queue.output.find(" ETA "), std::string::npos) << queue.output;
  auto listed = Cohort(c, {"--json", "queue"});
  ASSERT_EQ(listed.status.Code(), 0) << listed.errors;
  EXPECT_EQ(json::parse(listed.output)["jobs"][0]["progress_eta"]["percent"], 50.0) << listed.output;

  auto show = Cohort(c, {"show", id_text});
  ASSERT_EQ(show.status.Code(), 0) << show.errors;
  EXPECT_NE(show.output.find("progress: 50% "), std::string::npos) << show.output;
  EXPECT_NE(show.output.find("(step 20 of 40)"), std::string::npos) << show.output;

  auto top = Cohort(c, {"top", "--once"});
  ASSERT_EQ(top.status.Code(), 0) << top.errors;
  EXPECT_NE(top.output.find("PROGRESS"), std::string::npos) << top.output;
  EXPECT_NE(top.output.find("50% "), std::string::npos) << top.output;

  ASSERT_EQ(Cohort(c, {"cancel", id_text}).status.Code(), 0);
  c.WaitForState(id, "CANCELLED");
}

}  // namespace
}  // namespace cohort::testing
