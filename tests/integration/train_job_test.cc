// The README's main job in miniature: `cohort train` as a 2-node Cohort job. The ranks
// rendezvous through the head, rank 0 posts progress to COHORT_REPORT, checkpoints go to
// COHORT_CHECKPOINT_DIR, and the log ends with generated text.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "harness.h"

namespace cohort::testing {
namespace {

TEST(TrainJob, TwoNodeTrainingReportsProgressAndCheckpoints) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.StartAgent("node-b", 1);
  c.WaitForNodes(2);
  const std::string cfg = c.dir() + "/train.yaml";
  {
    std::ofstream corpus(c.dir() + "/corpus.txt");
    for (int i = 0; i < 400; ++i) corpus << "every node trains the model and the loss falls " << i % 7 << ".\n";
    std::ofstream(cfg) << "model: {n_layer: 1, n_head: 2, n_embd: 32, seq_len: 32}\n"
                          "data: {text: corpus.txt}\n"
                          "train: {steps: 12, micro_batch: 2, global_batch_tokens: 128, lr: 3e-3, threads: 1}\n"
                          "checkpoint: {every: 6}\n"
                          "sample: {tokens: 30, prompt: 'every '}\n"
                          "log: {every: 3}\n";
  }
  json job = c.Submit({{"command", {COHORT_BINARY, "train", "--config", cfg}},
                       {"nodes", 2},
                       {"tasks_per_node", 1},
                       {"env", {{"OMP_NUM_THREADS", "1"}}}});
  const int64_t id = job["id"];
  json done = c.WaitForState(id, "SUCCEEDED", std::chrono::seconds(120));
  const std::string log = c.Logs(id, 0);
  EXPECT_NE(log.find("2 ranks x 1 accumulation steps"), std::string::npos) << log;
  EXPECT_NE(log.find("step    12/12"), std::string::npos) << log;
  EXPECT_NE(log.find("---- sample after 12 steps"), std::string::npos) << log;

  // Progress reached the head: one point per logged step, from rank 0, with a loss.
  auto progress = c.client().Get("/v1/jobs/" + std::to_string(id) + "/progress");
  ASSERT_TRUE(progress.has_value()) << progress.error().message;
  const json& points = (*progress)["points"];
  ASSERT_EQ(points.size(), 4u) << progress->dump();
  EXPECT_EQ(points.back()["step"], 12);
  EXPECT_GT(points.back()["tokens_per_s"].get<double>(), 0);
  EXPECT_LT(points.back()["loss"].get<double>(), points.front()["loss"].get<double>());
  // Each checkpoint is reported as it is written, into its step's point: the last step's
  // too (the head kept step 6 for a job whose step 12 was on disk).
  EXPECT_EQ(points[1]["checkpoint_step"], 6) << progress->dump();
  EXPECT_EQ(points.back()["checkpoint_step"], 12) << progress->dump();

  // Checkpoints at steps 6 and 12 in the job's checkpoint directory.
  const auto ck = log.find("checkpoint: wrote ");
  ASSERT_NE(ck, std::string::npos) << log;
  const std::string first = log.substr(ck + 18, log.find(' ', ck + 18) - ck - 18);
  EXPECT_TRUE(std::filesystem::exists(first + "/MANIFEST")) << first;
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(first).parent_path() / "step_00000012"));
}

}  // namespace
}  // namespace cohort::testing
