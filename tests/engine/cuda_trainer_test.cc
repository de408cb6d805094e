// The trainer with train.device cuda, in one process (issue 5): the GPU TrainModel
// (trainer/cuda_train_model.cc) under the real training loop, with validation, sampling,
// checkpoints and the loss record.
//   - a GPU run tracks a CPU run of the same config (bf16 against float32);
//   - stopped and resumed on the GPU, it continues as the uninterrupted GPU run;
//   - a checkpoint moves CPU -> GPU -> CPU (steps 1 | 2-3 | 4): the CPU's first step is the
//     reference's bitwise, the later ones track it;
//   - with `parallel.offload: optimizer` (AdamW on the host, trainer/cuda_zero.h), and with
//     ZeRO-3 and `optimizer+params` on one rank, a run trains as the GPU's own optimizer
//     does, and stops and resumes through its checkpoints.
// Built twice: against the real CUDA engine (label gpu; skips without a device) and
// against the CPU emulator (cuda_emu.cmake), where it runs in CI. The model is tiny (one
// layer, d_model 64, context 32) so that the emulator takes seconds per step.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/trainer/config.h"
#include "engine/trainer/trainer.h"
#include "train_run_util.h"

namespace cohort::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::RecordedLosses;

class CudaTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort-cuda-trainer-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    testing::WriteWordCorpus(dir_ / "corpus.txt", 700, 2024);  // ~20 KB
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  struct Run {
    TrainResult result;
    std::string log;
  };

  // Trains with `device` on checkpoint folder `ck`, appending to the loss record `record`;
  // stops after `stop_at` steps when > 0. Failures are test failures.
  Run Train(const std::string& device, const std::string& ck, const std::string& record,
            int64_t stop_at = 0, const std::string& parallel = "") {
    const fs::path cfg = dir_ / ("train-" + device + ".yaml");
    std::ofstream(cfg) << "model: {n_layer: 1, n_head: 1, n_embd: 64, seq_len: 16}\n"
                          "data: {text: corpus.txt, val_fraction: 0.1}\n"
                          "train: {steps: 4, micro_batch: 2, global_batch_tokens: 64, "
                          "lr: 3e-3, min_lr: 3e-4, warmup_steps: 2, seed: 7, threads: 1, "
                          "device: "
                       << device
                       << "}\n"
                          "eval: {every: 2, batches: 1}\n"
                          "checkpoint: {every: 2, keep: 5}\n"
                          "sample: {tokens: 4, prompt: 'the '}\n"
                       << parallel;
    Run run;
    auto config = LoadTrainConfig(cfg.string());
    if (!config) {
      ADD_FAILURE() << config.error().ToString();
      return run;
    }
    config->checkpoint_dir = (dir_ / ck).string();
    config->log_file = (dir_ / record).string();
    TrainerContext ctx;
    ctx.job_id = "local";
    ctx.stop_at_step = stop_at;
    const fs::path out_path = dir_ / ("out-" + std::to_string(runs_++) + ".txt");
    ctx.out = std::fopen(out_path.c_str(), "w");
    {
      auto trainer = Trainer::Create(*config, ctx);
      if (!trainer) {
        ADD_FAILURE() << trainer.error().ToString();
      } else if (auto r = (*trainer)->Run(); !r) {
        ADD_FAILURE() << r.error().ToString();
      } else {
        run.result = *r;
      }
    }
    std::fclose(ctx.out);
    std::ifstream in(out_path);
    std::stringstream ss;
    ss << in.rdbuf();
    run.log = ss.str();
    return run;
  }

  std::map<int64_t, double> Losses(const std::string& record) {
    return RecordedLosses(dir_ / record);
  }

  // Both records hold the 4 steps, each of `got` within `rel` of `want`'s.
  static void ExpectLossesNear(const std::map<int64_t, double>& got,
                               const std::map<int64_t, double>& want, double rel) {
    ASSERT_EQ(want.size(), 4u);
    ASSERT_EQ(got.size(), 4u);
    for (int64_t s = 1; s <= 4; ++s) {
      EXPECT_NEAR(got.at(s), want.at(s), rel * want.at(s)) << "step " << s;
    }
  }

  fs::path dir_;
  int runs_ = 0;
};

TEST_F(CudaTrainerTest, GpuRunTracksTheCpuAndResumes) {
  COHORT_SKIP_WITHOUT_GPU();
  const Run cpu = Train("cpu", "ck-cpu", "cpu.jsonl");
  const Run gpu = Train("cuda", "ck-gpu", "gpu.jsonl");
  ASSERT_FALSE(HasFailure()) << cpu.log << gpu.log;
  EXPECT_THAT(gpu.log, HasSubstr("device: cuda:0"));
  EXPECT_THAT(gpu.log, HasSubstr("---- sample after 4 steps"));
  const auto want = Losses("cpu.jsonl"), got = Losses("gpu.jsonl");
  ExpectLossesNear(got, want, 2e-2);
  EXPECT_LT(got.at(4), got.at(1)) << "the GPU run did not learn";
  EXPECT_GT(gpu.result.final_val_loss, 0);
  EXPECT_NEAR(gpu.result.final_val_loss, cpu.result.final_val_loss,
              2e-2 * cpu.result.final_val_loss);

  // Stopped at step 2 and resumed on the GPU: the uninterrupted GPU run's losses.
  const Run first = Train("cuda", "ck-resume", "resumed.jsonl", 2);
  const Run second = Train("cuda", "ck-resume", "resumed.jsonl");
  ASSERT_FALSE(HasFailure()) << first.log << second.log;
  EXPECT_THAT(second.log, HasSubstr("(step 2)"));
  EXPECT_EQ(second.result.start_step, 2);
  const auto resumed = Losses("resumed.jsonl");
  ASSERT_EQ(resumed.size(), 4u);
  for (int64_t s = 1; s <= 4; ++s) {
    // Only attention's dq (float atomics) is not bitwise repeatable.
    EXPECT_NEAR(resumed.at(s), got.at(s), 1e-3 * got.at(s)) << "step " << s;
  }
}

TEST_F(CudaTrainerTest, CheckpointsMoveBetweenCpuAndGpu) {
  COHORT_SKIP_WITHOUT_GPU();
  const Run ref = Train("cpu", "ck-ref", "ref.jsonl");
  const Run a = Train("cpu", "ck", "mixed.jsonl", 1);
  const Run b = Train("cuda", "ck", "mixed.jsonl", 3);
  const Run c = Train("cpu", "ck", "mixed.jsonl");
  ASSERT_FALSE(HasFailure()) << a.log << b.log << c.log;
  EXPECT_THAT(b.log, HasSubstr("(step 1)"));
  EXPECT_THAT(b.log, HasSubstr("device: cuda:0"));
  EXPECT_THAT(c.log, HasSubstr("(step 3)"));
  const auto want = Losses("ref.jsonl"), mixed = Losses("mixed.jsonl");
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(mixed.size(), 4u);
  EXPECT_EQ(mixed.at(1), want.at(1)) << "step 1 (CPU)";
  for (int64_t s = 2; s <= 4; ++s) {
    EXPECT_NEAR(mixed.at(s), want.at(s), 2e-2 * want.at(s)) << "step " << s;
  }
}

// The optimizer offloaded to the host on one rank: the state lives in host memory, the
// step runs on the CPU; the losses are the device optimizer's (the CPU's AdamW differs in
// the update's last bit: relative 1e-5 over 4 steps), and a run stopped at step 2 resumes
// from its checkpoint (written by range from the host shard) as the uninterrupted one.
TEST_F(CudaTrainerTest, OptimizerOffloadTrainsAndResumes) {
  COHORT_SKIP_WITHOUT_GPU();
  const std::string offload = "parallel: {offload: optimizer}\n";
  const Run device = Train("cuda", "ck-device", "device.jsonl");
  const Run host = Train("cuda", "ck-host", "host.jsonl", 0, offload);
  ASSERT_FALSE(HasFailure()) << device.log << host.log;
  EXPECT_THAT(host.log, HasSubstr("optimizer offloaded to host memory"));
  EXPECT_THAT(host.log, HasSubstr("stepped on the CPU"));
  const auto want = Losses("device.jsonl"), got = Losses("host.jsonl");
  ExpectLossesNear(got, want, 1e-5);
  const Run first = Train("cuda", "ck-resume", "resumed.jsonl", 2, offload);
  const Run second = Train("cuda", "ck-resume", "resumed.jsonl", 0, offload);
  ASSERT_FALSE(HasFailure()) << first.log << second.log;
  EXPECT_EQ(second.result.start_step, 2);
  // Only attention's dq (float atomics on a GPU) is not bitwise repeatable.
  ExpectLossesNear(Losses("resumed.jsonl"), got, 1e-5);
}

// ZeRO-3 with optimizer+params on one rank through the trainer (config, log, sampling and
// export on a model that holds no whole parameters, checkpoints by range): the parameters'
// bf16 shard and the optimizer in host memory, each piece copied to the device before its
// gather; the losses are the device optimizer's to 1e-5, and it resumes from its checkpoint.
TEST_F(CudaTrainerTest, Zero3WithParameterOffloadTrainsAndResumes) {
  COHORT_SKIP_WITHOUT_GPU();
  const std::string offload = "parallel: {zero: 3, offload: optimizer+params}\n";
  const Run device = Train("cuda", "ck-device3", "device3.jsonl");
  const Run host = Train("cuda", "ck-host3", "host3.jsonl", 0, offload);
  ASSERT_FALSE(HasFailure()) << device.log << host.log;
  EXPECT_THAT(host.log, HasSubstr("ZeRO-3"));
  EXPECT_THAT(host.log, HasSubstr("the parameter shard in host memory too"));
  ExpectLossesNear(Losses("host3.jsonl"), Losses("device3.jsonl"), 1e-5);
  const Run first = Train("cuda", "ck-resume3", "resumed3.jsonl", 2, offload);
  const Run second = Train("cuda", "ck-resume3", "resumed3.jsonl", 0, offload);
  ASSERT_FALSE(HasFailure()) << first.log << second.log;
  EXPECT_EQ(second.result.start_step, 2);
  ExpectLossesNear(Losses("resumed3.jsonl"), Losses("host3.jsonl"), 1e-5);
}

}  // namespace
}  // namespace cohort::engine
