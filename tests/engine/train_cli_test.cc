// `cohort train` end to end: real processes started through `cohort run`, a small GPT on a
// generated corpus, checked through the loss record (log.file, JSON lines).
//
// - data parallel on 2 and 4 ranks equals 1 rank with the same global batch (20 steps,
//   relative error < 1e-5);
// - stopping at step 10 and resuming gives bitwise the losses of an uninterrupted run;
// - a checkpoint written by 2 ranks resumes on 1, one written by 1 resumes on 4;
// - a damaged newest checkpoint falls back to the previous one, saying so;
// - bad configs and data give clear errors and leave the checkpoints alone;
// - train.device cuda without CUDA in the build or without a usable GPU fails with the
//   reason before touching the checkpoints.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "train_run_util.h"

#ifndef COHORT_BINARY
#error "COHORT_BINARY must name the cohort executable"
#endif
#ifndef COHORT_CUDA_ENGINE_BUILT
#error "COHORT_CUDA_ENGINE_BUILT must say whether the CUDA engine is built (0 or 1)"
#endif

namespace cohort {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using engine::testing::RecordedLosses;
using engine::testing::RunCohort;
using engine::testing::TrainRun;

class TrainCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt_name(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    engine::testing::WriteWordCorpus(dir_ / "corpus.txt", 1400, 12345);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  static std::string fmt_name(const std::string& test) {
    return "cohort-train-test-" + test + "-" + std::to_string(::getpid());
  }

  // A config: 2 layers, d_model 32, context 32, global batch 8 sequences (256 tokens).
  fs::path Config(const std::string& extra = "", const std::string& name = "train.yaml") {
    fs::path p = dir_ / name;
    std::ofstream out(p);
    out << "model: {n_layer: 2, n_head: 2, n_embd: 32, seq_len: 32}\n"
           "data: {text: corpus.txt, val_fraction: 0.1}\n"
           "train: {steps: 20, micro_batch: 2, global_batch_tokens: 256, lr: 3e-3, "
           "min_lr: 3e-4, warmup_steps: 3, seed: 11, threads: 1, bucket_mb: 0.01}\n"
           "sample: {tokens: 40, prompt: 'the '}\n"
        << extra;
    return p;
  }

  // A config without train.steps (which --steps then gives) and without checkpoints.
  fs::path NoStepsConfig() {
    fs::path p = dir_ / "no-steps.yaml";
    std::ofstream(p) << "model: {n_layer: 1, n_head: 2, n_embd: 32, seq_len: 32}\n"
                        "data: {text: corpus.txt}\n"
                        "train: {micro_batch: 2, threads: 1}\ncheckpoint: {dir: none}\n";
    return p;
  }

  TrainRun Train(int ranks, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"train", "-n", std::to_string(ranks)};
    argv.insert(argv.end(), args.begin(), args.end());
    return Cohort(argv);
  }

  TrainRun Cohort(const std::vector<std::string>& args) {
    return RunCohort(COHORT_BINARY, args, (dir_ / ("out-" + std::to_string(runs_++) + ".txt")).string());
  }

  // step -> loss from a log file (later lines for a step win).
  static std::map<int64_t, double> Losses(const fs::path& log) { return RecordedLosses(log); }

  // Step directories of a checkpoint folder, sorted.
  static std::vector<std::string> ListSteps(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  static std::string Slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  fs::path dir_;
  int runs_ = 0;
};

void ExpectClose(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b,
                 int64_t from, int64_t to, double rel) {
  for (int64_t s = from; s <= to; ++s) {
    ASSERT_TRUE(a.contains(s) && b.contains(s)) << "step " << s << " missing";
    EXPECT_NEAR(a.at(s), b.at(s), rel * std::abs(b.at(s))) << "step " << s;
  }
}

TEST_F(TrainCliTest, DataParallelMatchesOneRank) {
  auto cfg = Config();
  std::map<int, std::map<int64_t, double>> losses;
  for (int ranks : {1, 2, 4}) {
    fs::path log = dir_ / ("log-" + std::to_string(ranks) + ".jsonl");
    TrainRun r = Train(ranks, {"--config", cfg.string(), "--log-file", log.string()});
    ASSERT_TRUE(r.status.Success()) << r.status.ToString() << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(std::to_string(ranks) + " ranks x " +
                                    std::to_string(4 / ranks) + " accumulation steps"));
    losses[ranks] = Losses(log);
    ASSERT_EQ(losses[ranks].size(), 20u);
  }
  // The loss falls, and every world size trains the same model.
  EXPECT_LT(losses[1][20], losses[1][1] * 0.75);
  ExpectClose(losses[2], losses[1], 1, 20, 1e-5);
  ExpectClose(losses[4], losses[1], 1, 20, 1e-5);
}

TEST_F(TrainCliTest, ResumeIsBitwiseAndReshards) {
  auto cfg = Config("checkpoint: {every: 5, keep: 3}\n");
  // Uninterrupted, 1 rank and 2 ranks.
  const fs::path full1 = dir_ / "full1.jsonl", full2 = dir_ / "full2.jsonl";
  TrainRun a = Train(1, {"--config", cfg.string(), "--checkpoint-dir", (dir_ / "ck-full1").string(),
                    "--log-file", full1.string()});
  ASSERT_TRUE(a.status.Success()) << a.output;
  TrainRun a2 = Train(2, {"--config", cfg.string(), "--checkpoint-dir", (dir_ / "ck-full2").string(),
                     "--log-file", full2.string()});
  ASSERT_TRUE(a2.status.Success()) << a2.output;
  const auto ref1 = Losses(full1), ref2 = Losses(full2);
  ASSERT_EQ(ref1.size(), 20u);

  // Stop at step 10, resume on the same world size: bitwise the same losses.
  const fs::path ck = dir_ / "ck", log = dir_ / "resumed.jsonl";
  TrainRun b = Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string(), "--log-file",
                    log.string(), "--stop-at-step", "10"});
  ASSERT_TRUE(b.status.Success()) << b.output;
  EXPECT_THAT(b.output, HasSubstr("stopping at step 10 of 20"));
  EXPECT_EQ(Losses(log).size(), 10u);
  TrainRun c = Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string(), "--log-file",
                    log.string()});
  ASSERT_TRUE(c.status.Success()) << c.output;
  EXPECT_THAT(c.output, HasSubstr("(step 10)"));
  const auto resumed = Losses(log);
  ASSERT_EQ(resumed.size(), 20u);
  for (int64_t s = 1; s <= 20; ++s) EXPECT_EQ(resumed.at(s), ref1.at(s)) << "step " << s;
  EXPECT_THAT(c.output, HasSubstr("---- sample after 20 steps"));

  // 2 ranks -> 1 rank, and 1 rank -> 4 ranks, from step 10.
  const fs::path ck21 = dir_ / "ck21", log21 = dir_ / "l21.jsonl";
  ASSERT_TRUE(Train(2, {"--config", cfg.string(), "--checkpoint-dir", ck21.string(),
                        "--log-file", log21.string(), "--stop-at-step", "10"}).status.Success());
  TrainRun d = Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck21.string(), "--log-file",
                    log21.string()});
  ASSERT_TRUE(d.status.Success()) << d.output;
  ExpectClose(Losses(log21), ref2, 11, 20, 1e-5);

  const fs::path ck14 = dir_ / "ck14", log14 = dir_ / "l14.jsonl";
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck14.string(),
                        "--log-file", log14.string(), "--stop-at-step", "10"}).status.Success());
  TrainRun e = Train(4, {"--config", cfg.string(), "--checkpoint-dir", ck14.string(), "--log-file",
                    log14.string()});
  ASSERT_TRUE(e.status.Success()) << e.output;
  EXPECT_THAT(e.output, HasSubstr("4 ranks x 1 accumulation steps"));
  ExpectClose(Losses(log14), ref1, 11, 20, 1e-5);
}

// train.global_batch_tokens 0: the batch is one micro-batch per rank. A checkpoint resumed
// on another world size keeps its batch through accumulation (an elastic job that shrank),
// and says so, with smaller micro-batches when train.micro_batch does not divide a rank's
// share (an elastic job that grew back: that failed, and the job used up its restarts);
// when the new world cannot split that batch at all, resuming fails naming the field and
// the checkpoint is left as it was.
TEST_F(TrainCliTest, ImplicitGlobalBatchIsKeptAcrossWorldSizes) {
  const fs::path cfg = dir_ / "implicit.yaml";
  std::ofstream(cfg) << "model: {n_layer: 2, n_head: 2, n_embd: 32, seq_len: 32}\n"
                        "data: {text: corpus.txt, val_fraction: 0.1}\n"
                        "train: {steps: 12, micro_batch: 2, lr: 3e-3, min_lr: 3e-4, "
                        "warmup_steps: 3, seed: 11, threads: 1, bucket_mb: 0.01}\n"
                        "checkpoint: {every: 6, keep: 3}\n";
  const fs::path full = dir_ / "full.jsonl";
  TrainRun a = Train(2, {"--config", cfg.string(), "--checkpoint-dir", (dir_ / "ck-full").string(),
                         "--log-file", full.string()});
  ASSERT_TRUE(a.status.Success()) << a.output;
  EXPECT_THAT(a.output, HasSubstr("2 ranks x 1 accumulation steps x 2 sequences x 32 tokens = 128"));
  const auto ref = Losses(full);
  ASSERT_EQ(ref.size(), 12u);

  // 2 ranks -> 1: the checkpoint's 128 tokens per step, as 2 accumulation steps.
  const fs::path ck = dir_ / "ck", log = dir_ / "shrunk.jsonl";
  ASSERT_TRUE(Train(2, {"--config", cfg.string(), "--checkpoint-dir", ck.string(), "--log-file",
                        log.string(), "--stop-at-step", "6"}).status.Success());
  TrainRun b = Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string(), "--log-file",
                         log.string()});
  ASSERT_TRUE(b.status.Success()) << b.output;
  EXPECT_THAT(b.output, HasSubstr("batch: keeping the checkpoint's 128 tokens per step: 1 ranks x "
                                  "2 accumulation steps"));
  ExpectClose(Losses(log), ref, 1, 12, 1e-5);

  // 1 rank (64 tokens per step: 2 sequences) -> 2 ranks: one sequence each, micro-batches
  // of 1, the 1-rank run's losses.
  const fs::path one = dir_ / "one.jsonl";
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--checkpoint-dir", (dir_ / "ck-one").string(),
                        "--log-file", one.string()}).status.Success());
  const fs::path ck12 = dir_ / "ck12", grown = dir_ / "grown.jsonl";
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck12.string(),
                        "--log-file", grown.string(), "--stop-at-step", "6"}).status.Success());
  TrainRun c = Train(2, {"--config", cfg.string(), "--checkpoint-dir", ck12.string(),
                         "--log-file", grown.string(), "--stop-at-step", "9"});
  ASSERT_TRUE(c.status.Success()) << c.output;
  EXPECT_THAT(c.output, HasSubstr("batch: micro-batches of 1 sequences, not train.micro_batch 2"));
  EXPECT_THAT(c.output, HasSubstr("batch: keeping the checkpoint's 64 tokens per step: 2 ranks x "
                                  "1 accumulation steps x 1 sequences"));
  ExpectClose(Losses(grown), Losses(one), 1, 9, 1e-5);

  // 2 sequences per step cannot be split over 3 ranks: refused, naming the field.
  const auto before = ListSteps(ck12);
  TrainRun d = Train(3, {"--config", cfg.string(), "--checkpoint-dir", ck12.string()});
  EXPECT_FALSE(d.status.Success()) << d.output;
  EXPECT_THAT(d.output, HasSubstr("cannot resume: the checkpoint at step 9 trained on 64 tokens "
                                  "per step"));
  EXPECT_THAT(d.output, HasSubstr("train.global_batch_tokens"));
  EXPECT_EQ(ListSteps(ck12), before);
}

// A new run (here: another checkpoint.dir, as a new job of the same config gets) given the
// log.file of an earlier one resumes nothing, so every line of the file is past its step 0:
// they were deleted, the earlier run's whole loss curve with them. They move aside instead.
TEST_F(TrainCliTest, AFreshRunKeepsTheEarlierRecordAside) {
  auto cfg = Config("checkpoint: {every: 2}\n");
  const fs::path log = dir_ / "log.jsonl";
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--steps", "4", "--checkpoint-dir",
                        (dir_ / "job-1").string(), "--log-file", log.string()}).status.Success());
  const auto first = Losses(log);
  ASSERT_EQ(first.size(), 4u);
  TrainRun second = Train(1, {"--config", cfg.string(), "--steps", "2", "--checkpoint-dir",
                              (dir_ / "job-2").string(), "--log-file", log.string()});
  ASSERT_TRUE(second.status.Success()) << second.output;
  EXPECT_THAT(second.output, HasSubstr("loss record: dropped 4 lines past step 0"));
  EXPECT_THAT(second.output, HasSubstr("moved to " + log.string() + ".dropped"));
  EXPECT_EQ(Losses(log).size(), 2u);
  EXPECT_EQ(Losses(log.string() + ".dropped"), first);
}

// An explicit train.global_batch_tokens that train.micro_batch does not divide on this world
// (an elastic job of 3 nodes that lost one: 6 sequences, 3 per rank) runs smaller
// micro-batches and trains the same model; it was an error, and the job failed.
TEST_F(TrainCliTest, MicroBatchThatDoesNotDivideARanksShareShrinks) {
  auto cfg = Config("checkpoint: {dir: none}\n");
  const fs::path three = dir_ / "three.jsonl", two = dir_ / "two.jsonl";
  const std::vector<std::string> batch = {"--set", "train.global_batch_tokens=192", "--steps", "6"};
  std::vector<std::string> args = {"--config", cfg.string(), "--log-file", three.string()};
  args.insert(args.end(), batch.begin(), batch.end());
  TrainRun a = Train(3, args);
  ASSERT_TRUE(a.status.Success()) << a.output;
  args = {"--config", cfg.string(), "--log-file", two.string()};
  args.insert(args.end(), batch.begin(), batch.end());
  TrainRun b = Train(2, args);
  ASSERT_TRUE(b.status.Success()) << b.output;
  EXPECT_THAT(b.output, HasSubstr("batch: micro-batches of 1 sequences, not train.micro_batch 2: "
                                  "it does not divide the 3 sequences each of the 2 data-parallel "
                                  "ranks trains per step"));
  EXPECT_THAT(b.output, HasSubstr("2 ranks x 3 accumulation steps x 1 sequences x 32 tokens = 192"));
  ExpectClose(Losses(two), Losses(three), 1, 6, 1e-5);
}

TEST_F(TrainCliTest, DamagedNewestCheckpointFallsBack) {
  auto cfg = Config("checkpoint: {every: 5, keep: 3}\n");
  const fs::path ref = dir_ / "ref.jsonl", ck = dir_ / "ck", log = dir_ / "log.jsonl";
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--checkpoint-dir", (dir_ / "ck0").string(),
                        "--log-file", ref.string()}).status.Success());
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string(),
                        "--log-file", log.string(), "--stop-at-step", "10"}).status.Success());
  // Flip one byte in the middle of the newest checkpoint's parameters.
  const fs::path params = ck / "step_00000010" / "params.bin";
  ASSERT_TRUE(fs::exists(params));
  {
    std::fstream f(params, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(params) / 2));
    char byte = 0;
    f.read(&byte, 1);
    byte ^= 0x5a;
    f.seekp(static_cast<std::streamoff>(fs::file_size(params) / 2));
    f.write(&byte, 1);
  }
  TrainRun r = Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string(), "--log-file",
                    log.string()});
  ASSERT_TRUE(r.status.Success()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("step_00000010"));
  EXPECT_THAT(r.output, HasSubstr("damaged"));
  // The damaged range is named: its file, bytes and writer.
  EXPECT_THAT(r.output, HasSubstr("params.bin: checksum mismatch in params.bin bytes [0, "));
  EXPECT_THAT(r.output, HasSubstr("written by rank 0"));
  EXPECT_THAT(r.output, HasSubstr("(step 5)"));
  // Steps 6..10 were recorded with the lost checkpoint and are trained again: the record
  // drops them first, so every step appears once.
  EXPECT_THAT(r.output, HasSubstr("loss record: dropped 5 lines past step 5"));
  EXPECT_EQ(RecordedLosses(log.string() + ".dropped").size(), 5u);
  {
    std::ifstream in(log);
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) ++lines;
    EXPECT_EQ(lines, 20);
  }
  const auto want = Losses(ref), got = Losses(log);
  for (int64_t s = 6; s <= 20; ++s) EXPECT_EQ(got.at(s), want.at(s)) << "step " << s;
}

// ZeRO stages 1, 2 and 3 on 2 and 4 ranks train the 1-rank model (relative 1e-5 over 20
// steps; 2 ranks accumulate 2 micro-batches, stages 2 and 3 into their gradient shard);
// resuming ZeRO-2 and ZeRO-3 on 4 ranks is bitwise; the ZeRO-3 checkpoint (each rank's shard,
// by range) resumes without ZeRO on 1 rank, with ZeRO-2 on 2 ranks and as tensor 2 x data 2,
// the losses going on as in an uninterrupted run. The start reports the model states per
// rank (and the scratch of stages 2 and 3), the end the peak RSS.
// The uninterrupted 4-rank ZeRO-2 and ZeRO-3 runs that the resumes must match bitwise are
// the ones the first loop checks against 1 rank (same config, so the same bits; a second
// copy of each cost a 4-rank run). The stopped and resumed runs write no sample: the first
// loop checks the sample of every stage (a ZeRO-3 sample gathers the parameters for each
// of its 40 tokens, ~1 s of every 4-rank ZeRO-3 run) and nothing reads theirs.
TEST_F(TrainCliTest, ZeroStagesTrainTheOneRankModelAndResumeInAnyLayout) {
  auto cfg = Config("checkpoint: {every: 5, keep: 3}\n");
  auto losses = [&](int ranks, int zero, const fs::path& ck, const std::string& log,
                    std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--config", cfg.string(), "--set",
                                     "parallel.zero=" + std::to_string(zero), "--checkpoint-dir",
                                     ck.string(), "--log-file", (dir_ / log).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    TrainRun r = Train(ranks, args);
    EXPECT_TRUE(r.status.Success()) << r.output;
    return std::make_pair(Losses(dir_ / log), r.output);
  };
  const auto [ref, ref_out] = losses(1, 0, dir_ / "ck-ref", "ref.jsonl");
  ASSERT_EQ(ref.size(), 20u);
  std::map<int, std::map<int64_t, double>> full_on_4;  // zero stage -> its 4-rank losses
  for (const auto& [ranks, zero] : {std::pair{2, 1}, {2, 2}, {2, 3}, {4, 1}, {4, 2}, {4, 3}}) {
    const std::string name = "z" + std::to_string(zero) + "-" + std::to_string(ranks);
    const auto [got, out] = losses(ranks, zero, dir_ / ("ck-" + name), name + ".jsonl");
    if (ranks == 4) full_on_4[zero] = got;
    ExpectClose(got, ref, 1, 20, 1e-5);
    EXPECT_THAT(out, HasSubstr("(ZeRO-" + std::to_string(zero) + " over " +
                               std::to_string(ranks) + " ranks;"));
    if (zero >= 2) {
      EXPECT_THAT(out, HasSubstr(", scratch "));
    }
    EXPECT_THAT(out, HasSubstr("peak memory per rank: RSS "));
    // The sample at the end (every rank's Forward gathers for ZeRO-3) is written.
    EXPECT_THAT(out, HasSubstr("---- sample after 20 steps"));
  }
  for (int zero : {2, 3}) {
    const std::string z = "z" + std::to_string(zero);
    const std::map<int64_t, double>& full = full_on_4[zero];
    ASSERT_EQ(full.size(), 20u) << z;
    // Stop on 4 ranks at step 10; resume on 4 ranks: bitwise.
    const fs::path ck = dir_ / ("ck-stop-" + z);
    losses(4, zero, ck, z + "-stop.jsonl", {"--stop-at-step", "10", "--set", "sample.tokens=0"});
    if (zero == 3) {
      for (const char* to : {"to1", "to2", "tp"}) {
        fs::copy(ck, dir_ / ("ck-" + std::string(to)), fs::copy_options::recursive);
        fs::copy(dir_ / (z + "-stop.jsonl"), dir_ / (std::string(to) + ".jsonl"));
      }
    }
    const auto [resumed, resumed_out] =
        losses(4, zero, ck, z + "-stop.jsonl", {"--set", "sample.tokens=0"});
    EXPECT_THAT(resumed_out, HasSubstr("(step 10)"));
    ASSERT_EQ(resumed.size(), 20u);
    for (int64_t s = 1; s <= 20; ++s) EXPECT_EQ(resumed.at(s), full.at(s)) << z << " step " << s;
  }
  // Written by 4 ZeRO-3 shards; read without ZeRO on 1 rank, with ZeRO-2 on 2, and as
  // tensor 2 x data 2.
  const auto [to1, to1_out] = losses(1, 0, dir_ / "ck-to1", "to1.jsonl");
  EXPECT_THAT(to1_out, HasSubstr("(step 10)"));
  ExpectClose(to1, ref, 11, 20, 1e-5);
  const auto [to2, to2_out] = losses(2, 2, dir_ / "ck-to2", "to2.jsonl");
  EXPECT_THAT(to2_out, HasSubstr("(step 10)"));
  ExpectClose(to2, ref, 11, 20, 1e-5);
  const auto [tp, tp_out] = losses(4, 0, dir_ / "ck-tp", "tp.jsonl", {"--set", "parallel.tensor=2"});
  EXPECT_THAT(tp_out, HasSubstr("(step 10)"));
  ExpectClose(tp, ref, 11, 20, 1e-5);
}

// checkpoint.dir: none writes nothing (no directory named "none" beside the config) and
// resumes from nothing: a second run trains the same steps again from step 0.
TEST_F(TrainCliTest, CheckpointDirNoneWritesAndResumesNothing) {
  auto cfg = Config("checkpoint: {dir: none, every: 2}\n");
  const fs::path log = dir_ / "log.jsonl";
  for (int run = 0; run < 2; ++run) {
    TrainRun r = Train(1, {"--config", cfg.string(), "--steps", "3", "--log-file", log.string()});
    ASSERT_TRUE(r.status.Success()) << r.output;
    EXPECT_THAT(r.output, HasSubstr("checkpoint: none (checkpoint.dir is none)"));
    EXPECT_THAT(r.output, Not(HasSubstr("resuming from")));
  }
  EXPECT_FALSE(fs::exists(dir_ / "none"));
  std::ifstream in(log);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 6);
  // --checkpoint-dir none overrides a directory in the config.
  auto with_dir = Config("checkpoint: {dir: ck, every: 2}\n", "with_dir.yaml");
  TrainRun r = Train(1, {"--config", with_dir.string(), "--steps", "2", "--checkpoint-dir", "none"});
  ASSERT_TRUE(r.status.Success()) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "ck"));
  EXPECT_FALSE(fs::exists(dir_ / "none"));
}

// A checkpoint is made durable before the record lines it covers are written; a run
// killed between the two leaves them out of log.file. The checkpoint carries them, and the
// run that resumes from it writes them back: every step stays recorded exactly once.
TEST_F(TrainCliTest, RecordLinesLostAfterACheckpointComeBackFromIt) {
  auto cfg = Config("checkpoint: {every: 5, keep: 3}\n");
  const fs::path ref = dir_ / "ref.jsonl", ck = dir_ / "ck", log = dir_ / "log.jsonl";
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--checkpoint-dir", (dir_ / "ck0").string(),
                        "--log-file", ref.string()}).status.Success());
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string(),
                        "--log-file", log.string(), "--stop-at-step", "10"}).status.Success());
  // As if the run had died after step_00000010 was renamed into place: steps 6..10 never
  // reached the file.
  {
    std::ifstream in(log);
    std::string line, kept;
    for (int n = 0; n < 5 && std::getline(in, line); ++n) kept += line + "\n";
    in.close();
    std::ofstream(log, std::ios::trunc) << kept;
  }
  ASSERT_EQ(RecordedLosses(log).size(), 5u);
  TrainRun r = Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string(), "--log-file",
                         log.string()});
  ASSERT_TRUE(r.status.Success()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(step 10)"));
  EXPECT_THAT(r.output, HasSubstr("loss record: restored 5 lines up to step 10"));
  std::vector<int64_t> steps;
  {
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) steps.push_back(nlohmann::json::parse(line).at("step").get<int64_t>());
  }
  ASSERT_EQ(steps.size(), 20u);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], int64_t(i) + 1);
  const auto want = Losses(ref), got = Losses(log);
  for (int64_t s = 1; s <= 20; ++s) EXPECT_EQ(got.at(s), want.at(s)) << "step " << s;

  // A record that already holds them gets nothing twice.
  const fs::path ck2 = dir_ / "ck2", log2 = dir_ / "log2.jsonl";
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck2.string(),
                        "--log-file", log2.string(), "--stop-at-step", "10"}).status.Success());
  TrainRun again = Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck2.string(),
                             "--log-file", log2.string()});
  ASSERT_TRUE(again.status.Success()) << again.output;
  EXPECT_THAT(again.output, Not(HasSubstr("loss record:")));
  EXPECT_EQ(RecordedLosses(log2).size(), 20u);
}

// Token shards from `cohort tokenize`, then GPT-2 safetensors out (--export) and back in
// (model.init_from): with lr 0 the imported model scores exactly the exported one's
// validation loss.
TEST_F(TrainCliTest, ShardsAndSafetensorsRoundTrip) {
  TrainRun t = Cohort({"tokenize", "-i", (dir_ / "corpus.txt").string(), "-o",
                       (dir_ / "shards").string(), "--val-fraction", "0.1", "--shard-tokens",
                       "16384"});
  ASSERT_TRUE(t.status.Success()) << t.output;
  EXPECT_THAT(t.output, HasSubstr("in 3 shards"));
  ASSERT_TRUE(fs::exists(dir_ / "shards" / "train_000002.bin"));
  ASSERT_TRUE(fs::exists(dir_ / "shards" / "val_000000.bin"));

  const std::string model = "model: {n_layer: 2, n_head: 2, n_embd: 32, seq_len: 32}\n";
  const std::string rest =
      "data: {train: 'shards/train_*.bin', val: 'shards/val_*.bin'}\n"
      "train: {micro_batch: 2, global_batch_tokens: 256, threads: 1, seed: 5, ";
  const fs::path first = dir_ / "first.yaml", second = dir_ / "second.yaml";
  std::ofstream(first) << model << rest << "steps: 12, lr: 3e-3}\neval: {every: 12, batches: 2}\n";
  // No model.n_head: the export says it (2; the default was 4, a different model).
  std::ofstream(second) << "model: {seq_len: 32, init_from: model.safetensors}\n"
                        << rest << "steps: 1, lr: 0}\neval: {every: 1, batches: 2}\n";
  const fs::path log1 = dir_ / "first.jsonl", log2 = dir_ / "second.jsonl";
  TrainRun a = Train(2, {"--config", first.string(), "--log-file", log1.string(), "--export",
                         (dir_ / "model.safetensors").string()});
  ASSERT_TRUE(a.status.Success()) << a.output;
  EXPECT_THAT(a.output, HasSubstr("3 shards"));
  TrainRun b = Train(1, {"--config", second.string(), "--log-file", log2.string()});
  ASSERT_TRUE(b.status.Success()) << b.output;
  auto val = [](const fs::path& log) {
    std::ifstream in(log);
    std::string line, last;
    while (std::getline(in, line)) last = line;
    return nlohmann::json::parse(last).at("val_loss").get<double>();
  };
  EXPECT_NEAR(val(log2), val(log1), 1e-6 * val(log1));
  EXPECT_THAT(b.output, HasSubstr("model: GPT-2 style, 2 layers, 2 heads, d_model 32"));

  // A shape the file contradicts is refused, naming the field and the file.
  for (const auto& [model_line, message] : std::vector<std::pair<std::string, std::string>>{
           {"model: {n_head: 4, seq_len: 32, init_from: model.safetensors}\n",
            "model.n_head: 4, but " + (dir_ / "model.safetensors").string() +
                " has 2 attention heads (its __metadata__ says so)"},
           {"model: {n_layer: 3, seq_len: 32, init_from: model.safetensors}\n",
            "model.n_layer: 3, but " + (dir_ / "model.safetensors").string() + " has 2 layers"}}) {
    const fs::path bad = dir_ / "contradicts.yaml";
    std::ofstream(bad) << model_line << rest << "steps: 1}\n";
    TrainRun r = Train(1, {"--config", bad.string()});
    EXPECT_EQ(r.status.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr(bad.string() + ": " + message));
  }

  TrainRun bad = Cohort({"tokenize", "-i", (dir_ / "nothing-here").string(), "-o",
                         (dir_ / "out").string()});
  EXPECT_FALSE(bad.status.Success());
  EXPECT_THAT(bad.output, HasSubstr("no text file"));
}

// train.steps is required, and --steps gives it: a config without it trains with the flag
// (it was refused, "train.steps: is required", although the flag was there).
TEST_F(TrainCliTest, StepsFlagGivesARequiredTrainSteps) {
  const fs::path cfg = NoStepsConfig();
  TrainRun without = Train(1, {"--config", cfg.string()});
  EXPECT_EQ(without.status.exit_code, 2) << without.output;
  EXPECT_THAT(without.output, HasSubstr("train.steps: is required"));
  TrainRun with = Train(1, {"--config", cfg.string(), "--steps", "2"});
  ASSERT_TRUE(with.status.Success()) << with.output;
  EXPECT_THAT(with.output, HasSubstr("step     2/2"));
  // The flag wins over the config and over --set.
  TrainRun both = Train(1, {"--config", cfg.string(), "--set", "train.steps=5", "--steps", "3"});
  ASSERT_TRUE(both.status.Success()) << both.output;
  EXPECT_THAT(both.output, HasSubstr("step     3/3"));
}

// A config error of `cohort train -n N` is said once, by the command, before any rank starts:
// each of the N ranks printed it before (and `cohort run` then blamed rank 0 for it).
TEST_F(TrainCliTest, ConfigErrorOfAMultiRankRunIsSaidOnce) {
  const fs::path cfg = NoStepsConfig();
  TrainRun r = Train(3, {"--config", cfg.string()});
  EXPECT_EQ(r.status.exit_code, 2) << r.output;
  const std::string message = "train.steps: is required";
  size_t count = 0;
  for (size_t at = r.output.find(message); at != std::string::npos;
       at = r.output.find(message, at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << r.output;
  EXPECT_THAT(r.output, Not(HasSubstr("rank 0")));
}

// An impossible layout or batch for N ranks is also said once, before any rank starts, and
// names the config file: each rank printed it, without the file ("train.global_batch_tokens:
// 256 is not a positive multiple of world size 3 ..." three times, then "cohort run: rank 0
// exit 2"). A single rank names the file too.
TEST_F(TrainCliTest, LayoutAndBatchErrorsAreSaidOnceNamingTheFile) {
  const fs::path cfg = Config("checkpoint: {dir: none}\n");
  const std::string file = cfg.string() + ": ";
  struct Bad {
    int ranks;
    std::vector<std::string> sets;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {3, {}, "train.global_batch_tokens: 256 is not whole sequences that split evenly over "
              "the data-parallel ranks: it needs a multiple of 3 data-parallel ranks x "
              "model.seq_len 32 = 96"},
      {2, {"--set", "parallel.tensor=4"}, "parallel.tensor: 4 does not divide n_head 2"},
      {2, {"--set", "parallel.pipeline=2", "--set", "model.n_layer=1"},
       "parallel.pipeline: pipeline 2 x virtual_stages 1 = 2 chunks, but n_layer 1"},
      {4, {"--set", "parallel.pipeline=2", "--set", "parallel.microbatches=3"},
       "parallel.microbatches: 3 but train.global_batch_tokens 256 / (data 2 x"},
  };
  for (const Bad& b : bad) {
    std::vector<std::string> args = {"--config", cfg.string()};
    args.insert(args.end(), b.sets.begin(), b.sets.end());
    TrainRun r = Train(b.ranks, args);
    EXPECT_EQ(r.status.exit_code, 2) << r.output;
    size_t count = 0;
    for (size_t at = r.output.find(b.message); at != std::string::npos;
         at = r.output.find(b.message, at + 1)) {
      ++count;
    }
    EXPECT_EQ(count, 1u) << r.output;
    EXPECT_THAT(r.output, HasSubstr(file + b.message));
    EXPECT_THAT(r.output, Not(HasSubstr("rank 0")));
    EXPECT_THAT(r.output, Not(HasSubstr("data:"))) << "read the data first";
  }
  // One process, as a job's task runs it: the file is named as well.
  TrainRun one = Cohort({"train", "--config", cfg.string(), "--set",
                         "train.global_batch_tokens=100"});
  EXPECT_EQ(one.status.exit_code, 2) << one.output;
  EXPECT_THAT(one.output, HasSubstr(file + "train.global_batch_tokens: 100 is not whole "
                                           "sequences"));
  EXPECT_THAT(one.output, Not(HasSubstr("data:"))) << "read the data first";
  // Too little data for one global batch: the settings that decide the batch are named.
  TrainRun little = Cohort({"train", "--config", cfg.string(), "--set", "model.seq_len=1024",
                            "--set", "train.micro_batch=64", "--set",
                            "train.global_batch_tokens=0"});
  EXPECT_EQ(little.status.exit_code, 2) << little.output;
  EXPECT_THAT(little.output, HasSubstr(file + "data.text: dataset of "));
  EXPECT_THAT(little.output, HasSubstr("a global batch needs 64 (1 data-parallel rank x 1 "
                                       "micro-batch x 64 sequences of model.seq_len 1024: "
                                       "train.global_batch_tokens 0, train.micro_batch 64); give "
                                       "more data, a shorter model.seq_len or a smaller batch"));
  TrainRun no_data = Cohort({"train", "--config", cfg.string(), "--set", "data.text=missing.txt"});
  EXPECT_EQ(no_data.status.exit_code, 1) << no_data.output;
  EXPECT_THAT(no_data.output, HasSubstr(file + "data.text: no text file at '" +
                                        (dir_ / "missing.txt").string() + "'"));
}

// --stop-at-step N on a run that resumes at or past step N trains nothing: it trained one
// step more (writing step_00000011 after step 10 for --stop-at-step 5, pruning by keep).
TEST_F(TrainCliTest, StopAtAStepAlreadyPassedTrainsNothing) {
  auto cfg = Config("checkpoint: {every: 5, keep: 2}\n");
  const fs::path ck = dir_ / "ck";
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string(),
                        "--stop-at-step", "10"}).status.Success());
  ASSERT_EQ(ListSteps(ck), (std::vector<std::string>{"step_00000005", "step_00000010"}));
  for (const std::string stop : {"5", "10"}) {
    TrainRun r = Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string(),
                           "--stop-at-step", stop});
    ASSERT_TRUE(r.status.Success()) << r.output;
    EXPECT_THAT(r.output, HasSubstr("nothing to train: the checkpoint is at step 10, at or past "
                                    "--stop-at-step " + stop));
    EXPECT_THAT(r.output, Not(HasSubstr("step    11/20")));
    EXPECT_EQ(ListSteps(ck), (std::vector<std::string>{"step_00000005", "step_00000010"}));
  }
}

// A model too large for the host's memory is an error naming the settings: it aborted
// ("terminate called after throwing an instance of 'std::bad_alloc'", SIGABRT). One layer
// of d_model 65536 asks for over 200 GB for its parameters alone; 1024 of them, over 200
// TB, more than a 47-bit address space holds, so the allocation fails on any machine.
TEST_F(TrainCliTest, ModelTooLargeForMemoryIsAnErrorNotAnAbort) {
  auto cfg = Config("checkpoint: {dir: none}\n");
  TrainRun r = Train(1, {"--config", cfg.string(), "--steps", "1", "--set", "model.n_layer=1024",
                         "--set", "model.n_embd=65536", "--set", "model.n_head=64"});
  EXPECT_EQ(r.status.signal, 0) << r.output;
  EXPECT_EQ(r.status.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cohort train: error: out of host memory (an allocation failed) "
                                  "for model.n_layer 1024 x model.n_embd 65536"));
  EXPECT_THAT(r.output, Not(HasSubstr("terminate called")));
}

// A checkpoint.dir of another model is refused naming this config's setting that differs
// (it said "cannot resume: invalid_argument: checkpoint max_seq_len 32 != config
// max_seq_len 64": no such setting, and no way out).
TEST_F(TrainCliTest, CheckpointOfAnotherModelNamesTheSettingThatDiffers) {
  auto cfg = Config("checkpoint: {every: 2}\n");
  const fs::path ck = dir_ / "ck";
  ASSERT_TRUE(Train(1, {"--config", cfg.string(), "--steps", "2", "--checkpoint-dir", ck.string()})
                  .status.Success());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model.seq_len=16", "(checkpoint max_seq_len 32 != config max_seq_len 16: model.seq_len differs)"},
      {"model.n_layer=3", "(checkpoint n_layer 2 != config n_layer 3: model.n_layer differs)"},
  };
  for (const auto& [set, message] : cases) {
    TrainRun r = Train(1, {"--config", cfg.string(), "--steps", "4", "--checkpoint-dir",
                           ck.string(), "--set", set});
    EXPECT_EQ(r.status.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("cohort train: error: cannot resume: " + ck.string() +
                                    " holds a checkpoint of another model " + message));
    EXPECT_THAT(r.output, HasSubstr("give this run its own checkpoint.dir (or none)"));
    EXPECT_THAT(r.output, Not(HasSubstr("invalid_argument")));
  }
}

// --export is written after the last step: a path that cannot take the file fails before
// the first one (it failed after the whole run, "creating /nonexistent/.m.safetensors.tmp-...").
TEST_F(TrainCliTest, ExportPathThatCannotTakeTheFileFailsBeforeTraining) {
  auto cfg = Config("checkpoint: {dir: none}\n");
  const std::vector<std::pair<fs::path, std::string>> bad = {
      {dir_ / "no-such-dir" / "model.safetensors",
       "--export: " + (dir_ / "no-such-dir" / "model.safetensors").string() + ": the directory " +
           (dir_ / "no-such-dir").string() + " does not exist"},
      {dir_, "--export: " + dir_.string() + " is a directory; give a file name"},
  };
  for (const auto& [path, message] : bad) {
    TrainRun r = Train(2, {"--config", cfg.string(), "--steps", "2", "--export", path.string()});
    EXPECT_EQ(r.status.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("cohort train: error: " + message));
    EXPECT_THAT(r.output, Not(HasSubstr("step     1/2")));
  }
  TrainRun good = Train(1, {"--config", cfg.string(), "--steps", "2", "--export",
                            (dir_ / "model.safetensors").string()});
  ASSERT_TRUE(good.status.Success()) << good.output;
  EXPECT_TRUE(fs::exists(dir_ / "model.safetensors"));
}

// Tokenizing again into the same directory replaces the earlier shards: before, a second
// run with fewer shards (another tokenizer, a smaller corpus, larger shards) overwrote
// only its own and left the rest, and data.train's glob mixed them into training.
TEST_F(TrainCliTest, TokenizeAgainReplacesTheEarlierShards) {
  const fs::path shards = dir_ / "shards";
  TrainRun first = Cohort({"tokenize", "-i", (dir_ / "corpus.txt").string(), "-o", shards.string(),
                           "--shard-tokens", "16384"});
  ASSERT_TRUE(first.status.Success()) << first.output;
  ASSERT_THAT(first.output, HasSubstr("in 4 shards, 2645 validation tokens in 1 shards"));
  std::ofstream(shards / "notes.txt") << "not a shard\n";
  TrainRun second = Cohort({"tokenize", "-i", (dir_ / "corpus.txt").string(), "-o",
                            shards.string(), "--shard-tokens", "1000000"});
  ASSERT_TRUE(second.status.Success()) << second.output;
  EXPECT_THAT(second.output, HasSubstr("removed 5 shards of an earlier run from " + shards.string()));
  EXPECT_EQ(ListSteps(shards),
            (std::vector<std::string>{"notes.txt", "train_000000.bin", "val_000000.bin"}));
  // The shards train: the glob finds the one shard of the second run.
  const fs::path cfg = dir_ / "shards.yaml";
  std::ofstream(cfg) << "model: {n_layer: 1, n_head: 2, n_embd: 32, seq_len: 32}\n"
                        "data: {train: 'shards/train_*.bin'}\n"
                        "train: {steps: 1, micro_batch: 2, threads: 1}\ncheckpoint: {dir: none}\n";
  TrainRun t = Train(1, {"--config", cfg.string()});
  ASSERT_TRUE(t.status.Success()) << t.output;
  EXPECT_THAT(t.output, HasSubstr("in 1 shards"));

  // Its errors name its own flag, not the config field of `cohort train`.
  std::ofstream(dir_ / "empty.txt") << "";
  TrainRun empty = Cohort({"tokenize", "-i", (dir_ / "empty.txt").string(), "-o", shards.string()});
  EXPECT_EQ(empty.status.exit_code, 2) << empty.output;
  EXPECT_THAT(empty.output, HasSubstr("cohort tokenize: error: --input: '"));
  EXPECT_THAT(empty.output, Not(HasSubstr("data.text")));
}

TEST_F(TrainCliTest, BadInputIsRejectedAndCheckpointsAreKept) {
  auto good = Config("checkpoint: {every: 5}\n");
  const fs::path ck = dir_ / "ck";
  ASSERT_TRUE(Train(1, {"--config", good.string(), "--checkpoint-dir", ck.string(),
                        "--stop-at-step", "5"}).status.Success());
  const std::string before = Slurp(ck / "step_00000005" / "params.bin");
  ASSERT_FALSE(before.empty());

  struct Case {
    std::string config;
    std::string message;
  };
  // A truncated llm.c shard: the header promises 1000 tokens, 10 follow.
  {
    std::ofstream out(dir_ / "short.bin", std::ios::binary);
    int32_t header[256] = {20240520, 1, 1000};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    uint16_t tokens[10] = {};
    out.write(reinterpret_cast<const char*>(tokens), sizeof tokens);
  }
  const std::vector<Case> cases = {
      {"model: {n_layer: 2, n_head: 3, n_embd: 32}\ndata: {text: corpus.txt}\ntrain: {steps: 5}\n",
       "model.n_embd: 32 is not divisible by model.n_head 3"},
      {"data: {text: corpus.txt}\ntrain: {steps: 5, learning_rate: 1}\n", "learning_rate"},
      {"data: {text: missing.txt}\ntrain: {steps: 5}\n", "missing.txt"},
      {"data: {train: short.bin}\ntrain: {steps: 5}\n", "short.bin"},
      {"model: {seq_len: 32}\ndata: {text: corpus.txt}\n"
       "train: {steps: 5, micro_batch: 3, global_batch_tokens: 250}\n",
       "train.global_batch_tokens: 250 is not whole sequences"},
      {"model: {n_layer: 2, n_head: 2, n_embd: 64, seq_len: 32}\ndata: {text: corpus.txt}\n"
       "train: {steps: 5, micro_batch: 2, global_batch_tokens: 256}\n",
       "n_embd"},  // the checkpoint in ck has n_embd 32
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path cfg = dir_ / ("bad-" + std::to_string(i) + ".yaml");
    std::ofstream(cfg) << cases[i].config;
    TrainRun r = Train(1, {"--config", cfg.string(), "--checkpoint-dir", ck.string()});
    EXPECT_FALSE(r.status.Success()) << cases[i].config << r.output;
    EXPECT_THAT(r.output, HasSubstr(cases[i].message)) << cases[i].config;
    EXPECT_THAT(r.output, HasSubstr("cohort train: error:")) << cases[i].config;
  }
  EXPECT_EQ(Slurp(ck / "step_00000005" / "params.bin"), before);
  EXPECT_FALSE(fs::exists(ck / "step_00000010"));
}

// A checkpoint.dir that cannot be one, or that another run is writing, fails the run before
// it trains: without this a file or read-only directory trained to the end with every
// checkpoint FAILED and exit 0, and two runs deleted each other's temporary directories,
// replaced and pruned each other's steps, so a resume took whichever run wrote last.
TEST_F(TrainCliTest, CheckpointDirThatIsAFileOrInUseIsRefusedBeforeTraining) {
  auto cfg = Config("checkpoint: {every: 1, keep: 2}\n");
  std::ofstream(dir_ / "a-file") << "not a directory\n";
  TrainRun file = Train(1, {"--config", cfg.string(), "--steps", "3", "--checkpoint-dir",
                            (dir_ / "a-file").string()});
  EXPECT_EQ(file.status.exit_code, 2) << file.output;
  EXPECT_THAT(file.output, HasSubstr("checkpoint.dir: " + (dir_ / "a-file").string() +
                                     " is a file, not a directory"));
  EXPECT_THAT(file.output, Not(HasSubstr("step     1/3")));

  // A long run holds ck; a second run on ck is refused, naming the first, and leaves it be.
  const fs::path ck = dir_ / "ck";
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "train", "--config", cfg.string(), "--steps", "1000000",
            "--checkpoint-dir", ck.string()};
  o.unset_env = {"COHORT_CHECKPOINT_DIR", "COHORT_REPORT", "COHORT_JOB_ID", "COHORT_ATTEMPT",
                 "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS"};
  o.stdout_path = (dir_ / "first.txt").string();
  auto first = Subprocess::Spawn(o);
  ASSERT_TRUE(first.has_value()) << first.error().ToString();
  // It holds ck once LOCK names it, and has a checkpoint there once a step directory is
  // there. Both stay true while it runs (keep 2 leaves a step whenever it prunes one); a
  // given step does not: with keep 2 step 2 lives only until step 4's checkpoint, a few
  // milliseconds, which a poller on a busy machine missed.
  const std::string holder = "cohort train, pid " + std::to_string(first->pid()) + " ";
  auto holds_with_checkpoint = [&] {
    if (Slurp(ck / "LOCK").find(holder) == std::string::npos) return false;
    std::error_code ec;
    for (fs::directory_iterator it(ck, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename().string().starts_with("step_")) return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && !first->TryWait() &&
         !holds_with_checkpoint()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a file, not timing
  }
  ASSERT_TRUE(holds_with_checkpoint()) << Slurp(dir_ / "first.txt");
  TrainRun second = Train(2, {"--config", cfg.string(), "--steps", "3", "--checkpoint-dir",
                              ck.string()});
  EXPECT_FALSE(second.status.Success()) << second.output;
  EXPECT_THAT(second.output, HasSubstr(ck.string() + " is in use by another run (cohort train, pid " +
                                       std::to_string(first->pid())));
  EXPECT_THAT(second.output, Not(HasSubstr("resuming from")));
  EXPECT_THAT(second.output, Not(HasSubstr("step     1/3")));
  EXPECT_FALSE(first->TryWait().has_value()) << "the first run stopped";
  first->Signal(SIGKILL);
  ASSERT_TRUE(first->WaitFor(std::chrono::seconds(60)).has_value());

  // Once it is gone (killed: the kernel dropped its lock), the directory is free again.
  TrainRun after = Train(2, {"--config", cfg.string(), "--steps", "3", "--checkpoint-dir",
                             ck.string()});
  EXPECT_TRUE(after.status.Success()) << after.output;
  EXPECT_THAT(after.output, HasSubstr("resuming from"));
  EXPECT_FALSE(fs::exists(ck / "LOCK")) << "the run left its lock file";
}

// SIGTERM (a cancel or a time limit: the agent's stop before its SIGKILL) ends a run at the
// end of its step with a checkpoint of that step, on every rank (here through `cohort run`,
// which passes the signal on to its ranks), and exits 143 as the signal would have. Before,
// the run died of it and everything since the last checkpoint.every step was lost.
TEST_F(TrainCliTest, SigtermCheckpointsTheStepAndStops) {
  auto cfg = Config("checkpoint: {every: 1000000, keep: 2}\n");
  const fs::path ck = dir_ / "ck";
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "train", "-n", "2", "--config", cfg.string(), "--steps", "1000000",
            "--checkpoint-dir", ck.string()};
  o.unset_env = {"COHORT_CHECKPOINT_DIR", "COHORT_REPORT", "COHORT_JOB_ID", "COHORT_ATTEMPT",
                 "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS"};
  o.stdout_path = (dir_ / "run.txt").string();
  auto run = Subprocess::Spawn(o);
  ASSERT_TRUE(run.has_value()) << run.error().ToString();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && !run->TryWait() &&
         Slurp(dir_ / "run.txt").find("step     3/") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a file, not timing
  }
  ASSERT_THAT(Slurp(dir_ / "run.txt"), HasSubstr("step     3/"));
  run->Signal(SIGTERM);
  auto status = run->WaitFor(std::chrono::seconds(120));
  ASSERT_TRUE(status.has_value()) << Slurp(dir_ / "run.txt");
  const std::string out = Slurp(dir_ / "run.txt");
  EXPECT_EQ(status->Code(), 128 + SIGTERM) << out;
  const std::string said = "stopping at step ";
  const size_t at = out.find(said);
  ASSERT_NE(at, std::string::npos) << out;
  const int64_t step = std::stoll(out.substr(at + said.size()));
  EXPECT_THAT(out, HasSubstr(said + std::to_string(step) + " of 1000000: SIGTERM, after its checkpoint"));
  EXPECT_THAT(out, HasSubstr("(2 ranks wrote their ranges)"));
  EXPECT_THAT(out, Not(HasSubstr("---- sample after")));
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  ASSERT_EQ(ListSteps(ck), (std::vector<std::string>{name})) << out;

  // The next run resumes from it.
  TrainRun next = Train(1, {"--config", cfg.string(), "--steps", "1000000", "--checkpoint-dir",
                            ck.string(), "--stop-at-step", std::to_string(step + 1)});
  ASSERT_TRUE(next.status.Success()) << next.output;
  EXPECT_THAT(next.output, HasSubstr("(step " + std::to_string(step) + ")"));
}

// SIGTERM during the first step after a resume: every rank must agree that the resumed
// checkpoint is one step old and keep it. Rank 0 alone knew the resumed step, so the other
// ranks started writing a checkpoint while rank 0 left for the end of the run: "collective
// mismatch" on rank 1 (or, over gloo, a hang until comm.timeout_s). The ranks are started
// here by hand (torchrun's variables, a file rendezvous) so that the signal reaches rank 0
// at a known point: while its report of step 3 (COHORT_REPORT) waits for this test's reply.
TEST_F(TrainCliTest, SigtermInTheFirstStepAfterAResumeStopsEveryRankAlike) {
  auto cfg = Config("checkpoint: {every: 1000000, keep: 2}\n");
  const fs::path ck = dir_ / "ck";
  TrainRun first = Train(2, {"--config", cfg.string(), "--steps", "1000000", "--checkpoint-dir",
                             ck.string(), "--stop-at-step", "2"});
  ASSERT_TRUE(first.status.Success()) << first.output;
  ASSERT_EQ(ListSteps(ck), (std::vector<std::string>{"step_00000002"})) << first.output;

  std::atomic<pid_t> rank0{0};
  std::atomic<bool> signalled{false};
  httplib::Server server;
  server.Post("/progress", [&](const httplib::Request& req, httplib::Response& res) {
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    // Rank 0 waits for this reply before it ends step 3: the signal is handled by then.
    if (body.is_object() && body.value("step", 0) == 3 && body.contains("loss") &&
        !signalled.exchange(true)) {
      ::kill(rank0.load(), SIGTERM);
    }
    res.set_content("{}", "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });

  fs::create_directories(dir_ / "rendezvous");
  std::vector<Subprocess> ranks;
  for (int r = 0; r < 2; ++r) {
    SpawnOptions o;
    o.argv = {COHORT_BINARY, "train", "--config", cfg.string(), "--steps", "1000000",
              "--checkpoint-dir", ck.string()};
    o.env = {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(r)},
             {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
             {"COHORT_RENDEZVOUS", "file://" + (dir_ / "rendezvous").string()},
             {"COHORT_REPORT", "http://127.0.0.1:" + std::to_string(port) + "/progress"}};
    o.unset_env = {"COHORT_CHECKPOINT_DIR", "COHORT_JOB_ID", "COHORT_ATTEMPT", "MASTER_PORT",
                   "OMP_NUM_THREADS"};
    o.stdout_path = (dir_ / ("rank" + std::to_string(r) + ".txt")).string();
    o.parent_death_signal = SIGKILL;
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.has_value()) << p.error().ToString();
    if (r == 0) rank0 = p->pid();  // before rank 1 exists: no report comes earlier
    ranks.push_back(std::move(*p));
  }
  std::vector<ExitStatus> status;
  for (auto& p : ranks) {
    auto st = p.WaitFor(std::chrono::seconds(300));
    if (!st) {
      for (auto& q : ranks) q.Signal(SIGKILL);
      for (auto& q : ranks) (void)q.Wait();
      server.stop();
      serving.join();
      FAIL() << "a rank did not stop\n" << Slurp(dir_ / "rank0.txt") << Slurp(dir_ / "rank1.txt");
    }
    status.push_back(*st);
  }
  server.stop();
  serving.join();
  const std::string out0 = Slurp(dir_ / "rank0.txt"), out1 = Slurp(dir_ / "rank1.txt");
  ASSERT_TRUE(signalled) << out0;
  EXPECT_THAT(out0, HasSubstr("resuming from"));
  EXPECT_EQ(status[0].Code(), 128 + SIGTERM) << out0;
  EXPECT_EQ(status[1].Code(), 128 + SIGTERM) << out1;
  EXPECT_THAT(out0, HasSubstr("stopping at step 3 of 1000000: SIGTERM; a rerun resumes from the "
                              "checkpoint of step 2"));
  EXPECT_THAT(out0 + out1, Not(HasSubstr("error")));
  EXPECT_EQ(ListSteps(ck), (std::vector<std::string>{"step_00000002"}));
}

// The last step's checkpoint could not be written (here: a file size limit, as a full disk
// or a quota would): the run trains on past the failures, but then exits non-zero, since
// its result is in no checkpoint. It exited 0 before, and its job SUCCEEDED.
TEST_F(TrainCliTest, FinalCheckpointThatCannotBeWrittenFailsTheRun) {
  auto cfg = Config("checkpoint: {every: 2}\n");
  const fs::path ck = dir_ / "ck";
  // bash: SIGXFSZ ignored (inherited through exec), files capped at 64 KiB; a checkpoint's
  // optim.bin needs more, the log and the output less.
  const std::string script = "trap '' XFSZ; ulimit -f 64; exec \"$0\" \"$@\"";
  TrainRun r = RunCohort("/bin/bash",
                         {"-c", script, COHORT_BINARY, "train", "--config", cfg.string(),
                          "--steps", "4", "--checkpoint-dir", ck.string()},
                         (dir_ / "out.txt").string());
  EXPECT_THAT(r.output, HasSubstr("checkpoint at step 2 FAILED (training continues"));
  EXPECT_THAT(r.output, HasSubstr("step     4/4"));
  EXPECT_EQ(r.status.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cohort train: error: trained to step 4 but could not "
                                  "checkpoint it, so a rerun resumes from an older checkpoint"));
  EXPECT_TRUE(ListSteps(ck).empty());
}

// train.device cuda through the real binary. Without CUDA in the build, or without a
// usable GPU (this CI machine), the run exits non-zero naming the reason before it reads or
// writes a checkpoint or the loss record. Where a GPU is usable the run trains instead:
// engine_cuda_model_test (label gpu) covers that, checkpoints moving between CPU and GPU
// included.
TEST_F(TrainCliTest, CudaDeviceWithoutGpuFailsBeforeCheckpoints) {
  auto yaml = [this](const std::string& name, const std::string& device) {
    fs::path p = dir_ / name;
    std::ofstream out(p);
    out << "model: {n_layer: 2, n_head: 2, n_embd: 64, seq_len: 32}\n"
           "data: {text: corpus.txt, val_fraction: 0.1}\n"
           "train: {steps: 15, micro_batch: 4, global_batch_tokens: 256, lr: 3e-3, "
           "min_lr: 3e-4, warmup_steps: 3, seed: 11, threads: 1, device: "
        << device << "}\ncheckpoint: {every: 5, keep: 5}\n";
    return p;
  };
  const fs::path cpu = yaml("cpu.yaml", "cpu"), gpu = yaml("gpu.yaml", "cuda");
  const fs::path ck = dir_ / "ck", log = dir_ / "log.jsonl";
  TrainRun first = Train(1, {"--config", cpu.string(), "--checkpoint-dir", ck.string(),
                             "--log-file", log.string(), "--stop-at-step", "5"});
  ASSERT_TRUE(first.status.Success()) << first.output;
  const std::string params_before = Slurp(ck / "step_00000005" / "params.bin");
  const std::string log_before = Slurp(log);
  ASSERT_FALSE(params_before.empty());

  TrainRun g = Train(1, {"--config", gpu.string(), "--checkpoint-dir", ck.string(),
                         "--log-file", log.string(), "--stop-at-step", "10"});
  if (COHORT_CUDA_ENGINE_BUILT && g.status.Success()) {
    GTEST_SKIP() << "a GPU is usable here: engine_cuda_model_test covers training on it";
  }
  EXPECT_FALSE(g.status.Success()) << g.output;
  EXPECT_THAT(g.output, HasSubstr("cohort train: error: train.device is cuda but "));
  if (COHORT_CUDA_ENGINE_BUILT) {
    // The reason follows the colon (the CUDA runtime's words).
    EXPECT_THAT(g.output, ::testing::ContainsRegex("no CUDA device is usable: [^\\n]+"));
  } else {
    EXPECT_THAT(g.output, HasSubstr("this build has no CUDA support"));
  }
  EXPECT_THAT(g.output, ::testing::Not(HasSubstr("resuming")));
  EXPECT_EQ(Slurp(ck / "step_00000005" / "params.bin"), params_before);
  EXPECT_EQ(ListSteps(ck), std::vector<std::string>{"step_00000005"});
  EXPECT_EQ(Slurp(log), log_before);
}

}  // namespace
}  // namespace cohort
