// The trainer with train.device cuda and tensor/pipeline parallelism, in one process (issue
// 14): every rank a thread running Trainer (trainer.cc) with its own communicator from a
// file:// rendezvous store, the CUDA layout's model (parallel_train_model.cc over the CUDA
// ShardEngine) under the real training loop with validation, sampling through the stages,
// checkpoints and the loss record.
//   - tensor 2, pipeline 2 (GPipe, 1F1B and interleaved), tensor 2 x pipeline 2 and tensor 2
//     x data 2 on CUDA track the CPU run of the same layout;
//   - a GPT-2 safetensors file initialises a CUDA layout (each rank cuts its shard), which
//     exports the trained model;
//   - checkpoints move between devices and layouts, one step per run: CPU one rank -> CUDA
//     tensor 2 -> CPU pipeline 2, and CUDA pipeline 2 -> CUDA one rank -> CPU tensor 2; the
//     losses continue the CPU run's curve and each CUDA run's checkpoint holds the CPU run's
//     parameters and AdamW moments (so the moments crossed both ways);
//   - a shard shape the CUDA kernels refuse, and zero with a CUDA layout, are errors naming
//     the field.
// Tolerance: 2e-2 relative on every loss and gradient norm, the bound of the single-device
// CUDA-vs-CPU trainer test (cuda_trainer_test.cc), and 5e-2 on the norm of each checkpointed
// array, the bound of the CUDA shard's gradients (cuda_shard_test.cc kGradTol): the CUDA shard
// keeps bf16 activations and a bf16 copy of the weights against the CPU's float32, and the
// difference compounds over the steps. (Measured on the emulator: losses within 1e-4, norms
// within 2e-3.)
//
// Built twice: against the real CUDA engine (label gpu; ranks over nccl, one GPU each, the
// host values over a second, host-memory communicator; skips without enough GPUs) and against the
// CPU emulator (cuda_emu.cmake), where the ranks' device memory is host memory and shm stands
// in for nccl; it runs in CI there. The model is tiny (2 layers, d_model 64, 4 heads, context
// 16) so that the emulator takes a few seconds per run.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/trainer/config.h"
#include "engine/trainer/trainer.h"
#include "train_run_util.h"

namespace cohort::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::RecordedLosses;

#ifdef COHORT_CUDA_EMULATED
constexpr const char* kCudaBackend = "shm";
constexpr double kTimeoutS = 900;  // emulated kernels: a peer can be minutes behind
#else
constexpr const char* kCudaBackend = "nccl";
constexpr double kTimeoutS = 60;
#endif

// Whether `ranks` CUDA ranks can run here: on the emulator always; on GPUs one each (NCCL
// refuses two ranks of a communicator on one GPU).
bool HaveGpus(int ranks) {
  if (std::string(kCudaBackend) != "nccl") return true;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return false;
  return devices >= ranks;
}

class CudaParallelTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort-cuda-parallel-" +
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
    TrainResult result;  // rank 0's
    std::string log;     // rank 0's
  };

  // Trains kSteps steps with `device` on tensor x pipeline x data_ ranks (`schedule`; the
  // members below set the rest), on checkpoint folder `ck`, appending to the loss record
  // `record`; stops after `stop_at` steps when > 0. Failures are test failures (Create's go
  // to errors_ with expect_errors_).
  Run Train(const std::string& device, int tensor, int pipeline, const std::string& schedule,
            const std::string& ck, const std::string& record, int64_t stop_at = 0) {
    const int ranks = tensor * pipeline * data_;
    const int id = runs_++;
    const fs::path cfg = dir_ / ("train-" + std::to_string(id) + ".yaml");
    std::ofstream(cfg) << "model: {n_layer: " << layers_ << ", n_head: 4, n_embd: " << n_embd_
                       << ", seq_len: 16"
                       << (init_from_.empty() ? "" : ", init_from: " + init_from_.string())
                       << "}\n"
                          "data: {text: corpus.txt, val_fraction: 0.1}\n"
                          "train: {steps: " << kSteps << ", micro_batch: 2, "
                          "global_batch_tokens: 64, lr: 3e-3, min_lr: 3e-4, warmup_steps: 2, "
                          "seed: 7, threads: 1, device: " << device << "}\n"
                          "parallel: {tensor: " << tensor << ", pipeline: " << pipeline
                       << ", schedule: " << schedule << ", virtual_stages: " << virtual_stages_
                       << ", zero: " << zero_ << ", offload: " << offload_ << "}\n"
                          "comm: {backend: " << (device == "cuda" ? kCudaBackend : "auto")
                       << ", timeout_s: " << kTimeoutS << "}\n"
                          "eval: {every: " << kSteps << ", batches: 1}\n"
                          "checkpoint: {every: 1, keep: 10}\n"
                          "sample: {tokens: 3, prompt: 'the '}\n";
    auto config = LoadTrainConfig(cfg.string());
    if (!config) {
      ADD_FAILURE() << config.error().ToString();
      return {};
    }
    config->checkpoint_dir = (dir_ / ck).string();
    config->log_file = (dir_ / record).string();
    const fs::path store = dir_ / ("store-" + std::to_string(id));
    fs::create_directories(store);
    Run run;
    std::mutex mu;
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        TrainerContext ctx;
        ctx.env.source = "cohort";
        ctx.env.rank = r;
        ctx.env.world_size = ranks;
        ctx.env.local_rank = r;
        ctx.env.local_world_size = ranks;
        if (ranks > 1) ctx.env.store_url = "file://" + store.string();
        ctx.job_id = "local";
        ctx.stop_at_step = stop_at;
        if (!export_path_.empty()) ctx.export_path = export_path_.string();
        const fs::path out_path =
            dir_ / ("out-" + std::to_string(id) + "-" + std::to_string(r) + ".txt");
        ctx.out = std::fopen(out_path.c_str(), "w");
        TrainResult result;
        {
          auto trainer = Trainer::Create(*config, ctx);
          if (!trainer && expect_errors_) {
            std::lock_guard lock(mu);
            errors_.push_back(trainer.error().ToString());
          } else if (!trainer) {
            ADD_FAILURE() << "rank " << r << ": " << trainer.error().ToString();
          } else if (auto res = (*trainer)->Run(); !res) {
            ADD_FAILURE() << "rank " << r << ": " << res.error().ToString();
          } else {
            result = *res;
          }
        }
        std::fclose(ctx.out);
        if (r == 0) {
          std::ifstream in(out_path);
          std::stringstream ss;
          ss << in.rdbuf();
          std::lock_guard lock(mu);
          run.result = result;
          run.log = ss.str();
        }
      });
    }
    for (auto& t : threads) t.join();
    return run;
  }

  std::map<int64_t, double> Losses(const std::string& record) {
    return RecordedLosses(dir_ / record);
  }
  // The gradient norm (before clipping) of each step in a loss record.
  std::map<int64_t, double> Norms(const std::string& record) {
    std::map<int64_t, double> norms;
    std::ifstream in(dir_ / record);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      norms[j.at("step").get<int64_t>()] = j.at("grad_norm").get<double>();
    }
    return norms;
  }

  // The state checkpoint folder `ck` holds at `step` (its step directory loaded alone).
  Checkpoint StateAt(const std::string& ck, int64_t step) {
    const fs::path copy = dir_ / (ck + "-at-" + std::to_string(step));
    for (const std::string& path : ListCheckpoints((dir_ / ck).string())) {
      fs::remove_all(copy);
      fs::create_directories(copy);
      fs::copy(path, copy / fs::path(path).filename(), fs::copy_options::recursive);
      auto here = LoadLatestCheckpoint(copy.string(), std::nullopt);
      if (here && here->progress.step == step) return std::move(*here);
    }
    ADD_FAILURE() << ck << " has no checkpoint at step " << step;
    return {};
  }

  // Parameters and AdamW moments of two checkpoints: ‖a − b‖ / ‖b‖ per array within `rel`
  // (elementwise agreement means nothing here: bf16 rounds each gradient's low bits), and
  // the same step count.
  void ExpectStateClose(const Checkpoint& got, const Checkpoint& want, double rel,
                        const std::string& what) {
    EXPECT_EQ(got.adam_t, want.adam_t) << what;
    const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>
        arrays[] = {{"params", {&got.params, &want.params}},
                    {"adam_m", {&got.adam_m, &want.adam_m}},
                    {"adam_v", {&got.adam_v, &want.adam_v}}};
    for (const auto& [name, pair] : arrays) {
      const auto& [a, b] = pair;
      ASSERT_EQ(a->size(), b->size()) << what << " " << name;
      double diff = 0, norm = 0;
      for (size_t i = 0; i < b->size(); ++i) {
        const double d = double((*a)[i]) - double((*b)[i]);
        diff += d * d;
        norm += double((*b)[i]) * double((*b)[i]);
      }
      EXPECT_LE(std::sqrt(diff), rel * std::sqrt(norm)) << what << " " << name;
    }
  }

  // The CUDA run of a layout against the CPU run of the same layout.
  void ExpectTracksTheCpu(int tensor, int pipeline, const std::string& schedule) {
    const std::string name = fmt::format("t{}-p{}-d{}-{}", tensor, pipeline, data_, schedule);
    const Run cpu = Train("cpu", tensor, pipeline, schedule, "ck-cpu-" + name, "cpu-" + name);
    const Run gpu = Train("cuda", tensor, pipeline, schedule, "ck-gpu-" + name, "gpu-" + name);
    ASSERT_FALSE(HasFailure()) << cpu.log << gpu.log;
    EXPECT_THAT(gpu.log, HasSubstr("device: cuda:0"));
    EXPECT_THAT(gpu.log, HasSubstr("shard: this rank (data 0, stage 0, tensor 0)"));
    EXPECT_THAT(gpu.log, HasSubstr("of device memory"));
    EXPECT_THAT(gpu.log, HasSubstr(fmt::format("---- sample after {} steps", kSteps)));
    const auto want = Losses("cpu-" + name), got = Losses("gpu-" + name);
    ASSERT_EQ(want.size(), size_t{kSteps});
    ASSERT_EQ(got.size(), size_t{kSteps});
    // The norm summed over the model-parallel group is the one a single rank computes (each
    // tensor counted once): to the same bound.
    const auto want_norm = Norms("cpu-" + name), got_norm = Norms("gpu-" + name);
    for (int64_t s = 1; s <= kSteps; ++s) {
      EXPECT_NEAR(got.at(s), want.at(s), 2e-2 * want.at(s)) << name << " step " << s;
      EXPECT_NEAR(got_norm.at(s), want_norm.at(s), 2e-2 * want_norm.at(s))
          << name << " gradient norm of step " << s;
    }
    EXPECT_LT(got.at(kSteps), got.at(1)) << name << ": the CUDA run did not learn";
    EXPECT_GT(gpu.result.final_val_loss, 0);
    EXPECT_NEAR(gpu.result.final_val_loss, cpu.result.final_val_loss,
                2e-2 * cpu.result.final_val_loss);
    EXPECT_FALSE(gpu.result.sample.empty());
  }

  // What the next Train calls use beside their arguments.
  int layers_ = 2;
  int data_ = 1;  // data-parallel replicas (the world is tensor x pipeline x data_)
  int zero_ = 0;  // parallel.zero
  std::string offload_ = "none";  // parallel.offload
  int n_embd_ = 64;
  bool expect_errors_ = false;      // Trainer::Create's errors go to errors_, not failures
  std::vector<std::string> errors_;  // one per rank that failed
  int virtual_stages_ = 1;
  fs::path init_from_;    // model.init_from (empty: the seed)
  fs::path export_path_;  // the trainer's export (empty: none)

  static constexpr int kSteps = 3;
  // Checkpoint state against the CPU's: the bound of the CUDA shard's gradients against the
  // CPU's (cuda_shard_test.cc kGradTol: bf16 activations against float32).
  static constexpr double kStateTol = 5e-2;
  fs::path dir_;
  int runs_ = 0;
};

TEST_F(CudaParallelTrainerTest, Tensor2TracksTheCpuLayout) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(2)) GTEST_SKIP() << "tensor 2 over nccl needs 2 GPUs";
  ExpectTracksTheCpu(2, 1, "1f1b");
}

TEST_F(CudaParallelTrainerTest, Pipeline2TracksTheCpuLayoutUnderEachSchedule) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(2)) GTEST_SKIP() << "pipeline 2 over nccl needs 2 GPUs";
  ExpectTracksTheCpu(1, 2, "1f1b");
  ExpectTracksTheCpu(1, 2, "gpipe");
}

TEST_F(CudaParallelTrainerTest, InterleavedPipeline2TracksTheCpuLayout) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(2)) GTEST_SKIP() << "pipeline 2 over nccl needs 2 GPUs";
  layers_ = 4;  // 2 stages x 2 chunks of one layer
  virtual_stages_ = 2;
  ExpectTracksTheCpu(1, 2, "interleaved");
}

// A GPT-2 safetensors file (exported by a CPU run) initialises a CUDA layout: each rank cuts
// its shard from the file; the run tracks the CPU layout started from the same file, and its
// own export holds the trained model.
TEST_F(CudaParallelTrainerTest, InitFromSafetensorsOnACudaLayout) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(2)) GTEST_SKIP() << "tensor 2 over nccl needs 2 GPUs";
  export_path_ = dir_ / "start.safetensors";
  const Run start = Train("cpu", 1, 1, "1f1b", "ck-start", "start.jsonl");
  ASSERT_FALSE(HasFailure()) << start.log;
  ASSERT_TRUE(fs::exists(export_path_));
  init_from_ = export_path_;
  export_path_ = dir_ / "gpu.safetensors";
  const Run gpu = Train("cuda", 2, 1, "1f1b", "ck-gpu", "gpu.jsonl");
  export_path_.clear();
  const Run cpu = Train("cpu", 2, 1, "1f1b", "ck-cpu", "cpu.jsonl");
  ASSERT_FALSE(HasFailure()) << gpu.log << cpu.log;
  EXPECT_THAT(gpu.log, HasSubstr("exported the model to"));
  EXPECT_TRUE(fs::exists(dir_ / "gpu.safetensors"));
  const auto begun = Losses("start.jsonl"), want = Losses("cpu.jsonl"), got = Losses("gpu.jsonl");
  ASSERT_EQ(got.size(), size_t{kSteps});
  ASSERT_EQ(want.size(), size_t{kSteps});
  // Started from the trained file, not the seed: below the fresh run's first loss.
  EXPECT_LT(want.at(1), begun.at(1));
  for (int64_t s = 1; s <= kSteps; ++s) {
    EXPECT_NEAR(got.at(s), want.at(s), 2e-2 * want.at(s)) << "step " << s;
  }
}

// Two replicas of tensor 2: the data group averages the device gradients.
TEST_F(CudaParallelTrainerTest, Tensor2Data2TracksTheCpuLayout) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(4)) GTEST_SKIP() << "tensor 2 x data 2 over nccl needs 4 GPUs";
  data_ = 2;
  ExpectTracksTheCpu(2, 1, "1f1b");
  // ZeRO-2 in the same CUDA layout through the trainer (config, model states, checkpoints
  // written by range from each data rank's part), and with the optimizer offloaded to the
  // host: ZeRO-0's curve and state.
  zero_ = 2;
  for (const char* offload : {"none", "optimizer"}) {
    offload_ = offload;
    const std::string name = offload_ == "none" ? "gpu-zero2" : "gpu-zero2-offload";
    const Run z = Train("cuda", 2, 1, "1f1b", "ck-" + name, name);
    ASSERT_FALSE(HasFailure()) << z.log;
    EXPECT_THAT(z.log, HasSubstr("ZeRO-2 over 2 ranks"));
    EXPECT_THAT(z.log, HasSubstr("the shard's whole gradient buffer, a receive buffer"));
    if (offload_ != "none") {
      EXPECT_THAT(z.log, HasSubstr("optimizer offloaded to host memory"));
      EXPECT_THAT(z.log, HasSubstr("the pinned gradient shard"));
    }
    const auto want = Losses("gpu-t2-p1-d2-1f1b"), got = Losses(name);
    const auto want_norm = Norms("gpu-t2-p1-d2-1f1b"), got_norm = Norms(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (int64_t s = 1; s <= kSteps; ++s) {
      EXPECT_NEAR(got.at(s), want.at(s), 1e-5 * want.at(s)) << name << " step " << s;
      EXPECT_NEAR(got_norm.at(s), want_norm.at(s), 1e-5 * want_norm.at(s)) << name << " step " << s;
    }
    ExpectStateClose(StateAt("ck-" + name, kSteps), StateAt("ck-gpu-t2-p1-d2-1f1b", kSteps), 1e-3,
                     name + "'s checkpoint against ZeRO-0's");
  }
}

TEST_F(CudaParallelTrainerTest, Tensor2Pipeline2TracksTheCpuLayout) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(4)) GTEST_SKIP() << "tensor 2 x pipeline 2 over nccl needs 4 GPUs";
  ExpectTracksTheCpu(2, 2, "1f1b");
}

// One step per run, each resuming the last one's checkpoint in another device and layout;
// the record continues the CPU run's curve.
TEST_F(CudaParallelTrainerTest, CheckpointsMoveBetweenDevicesAndLayouts) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(2)) GTEST_SKIP() << "the CUDA layouts over nccl need 2 GPUs";
  const Run ref = Train("cpu", 1, 1, "1f1b", "ck-ref", "ref.jsonl");
  struct Leg {
    std::string device;
    int tensor, pipeline;
  };
  // Leg i trains step i + 1 (the last one to the end of the run).
  const std::vector<Leg> legs = {{"cpu", 1, 1}, {"cuda", 2, 1}, {"cpu", 1, 2}};
  std::vector<Run> runs;
  for (size_t i = 0; i < legs.size(); ++i) {
    runs.push_back(Train(legs[i].device, legs[i].tensor, legs[i].pipeline, "1f1b", "ck",
                         "mixed.jsonl", static_cast<int64_t>(i) + 1));
    ASSERT_FALSE(HasFailure()) << runs.back().log;
    if (i > 0) {
      EXPECT_THAT(runs.back().log, HasSubstr(fmt::format("(step {})", i)));
    }
  }
  EXPECT_THAT(runs[1].log, HasSubstr("device: cuda:0"));
  // The CUDA leg resumed the CPU's parameters and moments and wrote its own by range.
  ExpectStateClose(StateAt("ck", 2), StateAt("ck-ref", 2), kStateTol, "step 2 (CUDA tensor 2)");
  const auto want = Losses("ref.jsonl"), mixed = Losses("mixed.jsonl");
  ASSERT_EQ(want.size(), size_t{kSteps});
  ASSERT_EQ(mixed.size(), size_t{kSteps});
  EXPECT_EQ(mixed.at(1), want.at(1)) << "step 1 (CPU, one rank)";
  for (int64_t s = 2; s <= kSteps; ++s) {
    EXPECT_NEAR(mixed.at(s), want.at(s), 2e-2 * want.at(s)) << "step " << s;
  }
}

// The other way round: a CUDA layout's checkpoint (pipeline 2) resumed by a CUDA one-rank
// run, then by a CPU tensor 2 run.
TEST_F(CudaParallelTrainerTest, CudaLayoutCheckpointsResumeOnOneRankAndInACpuLayout) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(2)) GTEST_SKIP() << "pipeline 2 over nccl needs 2 GPUs";
  const Run ref = Train("cpu", 1, 1, "1f1b", "ck-ref", "ref.jsonl");
  const Run a = Train("cuda", 1, 2, "1f1b", "ck", "mixed.jsonl", 1);
  const Run b = Train("cuda", 1, 1, "1f1b", "ck", "mixed.jsonl", 2);
  const Run c = Train("cpu", 2, 1, "1f1b", "ck", "mixed.jsonl");
  ASSERT_FALSE(HasFailure()) << a.log << b.log << c.log;
  EXPECT_THAT(b.log, HasSubstr("(step 1)"));
  EXPECT_THAT(c.log, HasSubstr("(step 2)"));
  ExpectStateClose(StateAt("ck", 1), StateAt("ck-ref", 1), kStateTol, "step 1 (CUDA pipeline 2)");
  ExpectStateClose(StateAt("ck", 2), StateAt("ck-ref", 2), kStateTol, "step 2 (CUDA one rank)");
  const auto want = Losses("ref.jsonl"), mixed = Losses("mixed.jsonl");
  ASSERT_EQ(mixed.size(), size_t{kSteps});
  for (int64_t s = 1; s <= kSteps; ++s) {
    EXPECT_NEAR(mixed.at(s), want.at(s), 2e-2 * want.at(s)) << "step " << s;
  }
}

// A shard the CUDA kernels cannot run (each rank's n_embd / tensor must be a multiple of 8)
// fails on every rank at start, naming the field and the numbers, before any checkpoint.
TEST_F(CudaParallelTrainerTest, ShardShapesTheKernelsRefuseAreErrorsNamingTheField) {
  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(2)) GTEST_SKIP() << "tensor 2 over nccl needs 2 GPUs";
  n_embd_ = 72;  // 36 channels per tensor rank
  expect_errors_ = true;
  Train("cuda", 2, 1, "1f1b", "ck", "record.jsonl");
  ASSERT_EQ(errors_.size(), 2u);
  for (const std::string& e : errors_) {
    EXPECT_THAT(e,
                HasSubstr("model.n_embd: n_embd / parallel.tensor = 36 must be a multiple of 8"));
  }
  EXPECT_FALSE(fs::exists(dir_ / "ck") && !fs::is_empty(dir_ / "ck"));
}

// The offloads run in CUDA layouts (cuda_parallel_step_test): the config takes them; what
// stays impossible is refused naming the field: optimizer+params without ZeRO-3. With one data
// replica, optimizer+params runs through the trainer (the parameters in host memory, stage 3's
// pieces over the replica itself) and tracks the same layout without offload.
TEST_F(CudaParallelTrainerTest, OffloadsInACudaLayoutAreTakenAndTheImpossibleOnesRefused) {
  const fs::path cfg = dir_ / "zero.yaml";
  auto write = [&](const std::string& parallel) {
    std::ofstream(cfg, std::ios::trunc)
        << "model: {n_layer: 2, n_head: 4, n_embd: 64, seq_len: 16}\n"
           "data: {text: corpus.txt}\n"
           "train: {steps: 1, device: cuda}\n"
           "parallel: " << parallel << "\n";
  };
  for (const char* ok : {"{tensor: 2, zero: 3, offload: optimizer}",
                         "{pipeline: 2, offload: optimizer}",
                         "{tensor: 2, zero: 3, offload: optimizer+params}"}) {
    write(ok);
    auto config = LoadTrainConfig(cfg.string());
    ASSERT_TRUE(config.has_value()) << ok << ": " << config.error().ToString();
  }
  write("{tensor: 2, zero: 2, offload: optimizer+params}");
  auto refused = LoadTrainConfig(cfg.string());
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().ToString(),
              HasSubstr("parallel.offload: optimizer+params needs parallel.zero 3, got 2"));

  COHORT_SKIP_WITHOUT_GPU();
  if (!HaveGpus(2)) GTEST_SKIP() << "tensor 2 over nccl needs 2 GPUs";
  const Run plain = Train("cuda", 2, 1, "1f1b", "ck-plain", "plain.jsonl");
  zero_ = 3;
  offload_ = "optimizer+params";
  const Run off = Train("cuda", 2, 1, "1f1b", "ck", "record.jsonl");
  ASSERT_FALSE(HasFailure()) << plain.log << off.log;
  EXPECT_THAT(off.log, HasSubstr("optimizer offloaded, bf16 parameters too"));
  const auto want = Losses("plain.jsonl"), got = Losses("record.jsonl");
  ASSERT_EQ(got.size(), size_t{kSteps});
  ASSERT_EQ(want.size(), size_t{kSteps});
  for (int64_t s = 1; s <= kSteps; ++s) {
    EXPECT_NEAR(got.at(s), want.at(s), 1e-5 * want.at(s)) << "step " << s;
  }
  ExpectStateClose(StateAt("ck", kSteps), StateAt("ck-plain", kSteps), 1e-3,
                   "optimizer+params with one replica against no offload");
}

}  // namespace
}  // namespace cohort::engine
