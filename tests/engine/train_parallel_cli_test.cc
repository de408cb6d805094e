// `cohort train` with tensor and pipeline parallelism, end to end (real processes through
// `cohort run`, the word corpus of train_run_util.h):
// - tensor x pipeline layouts (config section and --set flags) train the 1-rank model:
//   losses and validation losses to relative 1e-5, the same sample text; the log prints the
//   layout and the measured bubble beside the schedule's;
// - a checkpoint written in one layout resumes in another (and in plain data parallelism,
//   and the other way round, and with ZeRO 1-3 inside layouts), continuing the uninterrupted
//   run's losses;
// - a rank killed mid-run: the job fails, and the rerun resumes from the last checkpoint;
// - every impossible layout is an error naming the field, and nothing is written to the
//   checkpoint directory.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/subprocess.h"
#include "train_run_util.h"

#ifndef COHORT_BINARY
#error "COHORT_BINARY must name the cohort executable"
#endif

namespace cohort {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using engine::testing::RecordedLosses;
using engine::testing::RunCohort;
using engine::testing::TrainRun;

class TrainParallelCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort-train-parallel-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    engine::testing::WriteWordCorpus(dir_ / "corpus.txt", 1400, 12345);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // 4 layers, 4 heads, d_model 32, context 32; 8 sequences per step (micro_batch 2).
  fs::path Config(const std::string& extra = "") {
    fs::path p = dir_ / "train.yaml";
    std::ofstream out(p);
    out << "model: {n_layer: 4, n_head: 4, n_embd: 32, seq_len: 32}\n"
           "data: {text: corpus.txt, val_fraction: 0.1}\n"
           "train: {steps: 12, micro_batch: 2, global_batch_tokens: 256, lr: 3e-3, "
           "min_lr: 3e-4, warmup_steps: 3, seed: 11, threads: 1}\n"
           "eval: {every: 6, batches: 2}\n"
           "sample: {tokens: 24, prompt: 'the '}\n"
        << extra;
    return p;
  }

  TrainRun Train(int ranks, std::vector<std::string> args) {
    std::vector<std::string> argv = {"train", "-n", std::to_string(ranks)};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCohort(COHORT_BINARY, argv,
                     (dir_ / ("out-" + std::to_string(runs_++) + ".txt")).string());
  }

  static std::map<int64_t, double> ValLosses(const fs::path& log) {
    std::map<int64_t, double> out;
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("val_loss")) out[j["step"].get<int64_t>()] = j["val_loss"].get<double>();
    }
    return out;
  }

  static std::string Sample(const std::string& output) {
    const size_t at = output.find("---- sample after");
    return at == std::string::npos ? "" : output.substr(at);
  }

  fs::path dir_;
  int runs_ = 0;
};

void ExpectClose(const std::map<int64_t, double>& got, const std::map<int64_t, double>& want,
                 double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [step, loss] : want) {
    ASSERT_TRUE(got.contains(step)) << what << " step " << step;
    EXPECT_NEAR(got.at(step), loss, rel * loss) << what << " step " << step;
  }
}

TEST_F(TrainParallelCliTest, TensorAndPipelineLayoutsTrainTheOneRankModel) {
  const fs::path cfg = Config();
  TrainRun one = Train(1, {"-c", cfg.string(), "--log-file", (dir_ / "l1.jsonl").string(),
                           "--export", (dir_ / "one.safetensors").string()});
  ASSERT_TRUE(one.status.Success()) << one.output;
  const auto want = RecordedLosses(dir_ / "l1.jsonl");
  ASSERT_EQ(want.size(), 12u);
  EXPECT_LT(want.at(12), want.at(1));

  struct Layout {
    int ranks;
    std::vector<std::string> sets;
    std::string layout_line;
  };
  const std::vector<Layout> layouts = {
      {4,
       {"--set", "parallel.tensor=2", "--set", "parallel.pipeline=2"},
       "layout: 4 ranks = data 1 x pipeline 2 x tensor 2 (1f1b schedule); stage 0: embedding + "
       "layers 0-1; stage 1: layers 2-3 + head"},
      {4,
       {"--set", "parallel.pipeline=2", "--set", "parallel.schedule=interleaved", "--set",
        "parallel.virtual_stages=2"},
       "layout: 4 ranks = data 2 x pipeline 2 x tensor 1 (interleaved schedule, 2 chunks per "
       "stage); stage 0: chunk 0 embedding + layer 0, chunk 2 layer 2; stage 1: chunk 1 layer "
       "1, chunk 3 layer 3 + head"},
      {4,
       {"--set", "parallel.tensor=4"},
       "layout: 4 ranks = data 1 x pipeline 1 x tensor 4; stage 0: embedding + layers 0-3 + "
       "head"},
  };
  for (const Layout& l : layouts) {
    const fs::path log = dir_ / ("l-" + std::to_string(runs_) + ".jsonl");
    const fs::path exported = dir_ / ("m-" + std::to_string(runs_) + ".safetensors");
    std::vector<std::string> args = {"-c", cfg.string(), "--log-file", log.string(), "--export",
                                     exported.string()};
    args.insert(args.end(), l.sets.begin(), l.sets.end());
    TrainRun r = Train(l.ranks, args);
    ASSERT_TRUE(r.status.Success()) << r.output;
    EXPECT_THAT(r.output, HasSubstr(l.layout_line));
    // comm.backend auto: the ranks share this host, so they talk through shared memory.
    EXPECT_THAT(r.output, HasSubstr("comm: shm (every rank on this host: shared memory)"));
    if (l.layout_line.find("pipeline 2") != std::string::npos) {
      // The measured bubble beside the schedule's.
      EXPECT_THAT(r.output, ::testing::ContainsRegex("bubble [0-9.]+% \\((1f1b|interleaved) "
                                                     "theory [0-9.]+%\\)"));
    }
    ExpectClose(RecordedLosses(log), want, 1e-5, l.layout_line);
    ExpectClose(ValLosses(log), ValLosses(dir_ / "l1.jsonl"), 1e-5, l.layout_line + " (val)");
    // The export gathers the whole model (the same tensors as one rank's file).
    ASSERT_TRUE(fs::exists(exported)) << l.layout_line;
    EXPECT_EQ(fs::file_size(exported), fs::file_size(dir_ / "one.safetensors")) << l.layout_line;
    // Sampling runs through the stages and gives the 1-rank text.
    EXPECT_EQ(Sample(r.output), Sample(one.output)) << l.layout_line;
    EXPECT_NE(Sample(r.output), "");
  }
}

TEST_F(TrainParallelCliTest, CheckpointsResumeInAnyLayout) {
  const fs::path cfg = Config("checkpoint: {every: 3}\n");
  ASSERT_TRUE(Train(1, {"-c", cfg.string(), "--log-file", (dir_ / "straight.jsonl").string(),
                        "--checkpoint-dir", (dir_ / "ck-straight").string()})
                  .status.Success());
  const auto want = RecordedLosses(dir_ / "straight.jsonl");
  struct Leg {
    int ranks;
    std::vector<std::string> sets;
    std::string says = {};  // in the log, when not empty
  };
  // tensor 2 x pipeline 2 -> pipeline 4 (GPipe) -> data parallel 2 with ZeRO-2 -> tensor 2 x
  // data 2 with ZeRO-3 -> pipeline 2 x data 2 with ZeRO-2 -> tensor 2 x data 2 with ZeRO-1
  // (each data rank writes its part of the shard, runs cut mid-row) -> 1 rank.
  const std::vector<Leg> legs = {
      {4, {"--set", "parallel.tensor=2", "--set", "parallel.pipeline=2", "--stop-at-step", "3"}},
      {4, {"--set", "parallel.pipeline=4", "--set", "parallel.schedule=gpipe", "--stop-at-step", "6"}},
      {2, {"--set", "parallel.zero=2", "--stop-at-step", "8"}},
      {4, {"--set", "parallel.tensor=2", "--set", "parallel.zero=3", "--stop-at-step", "9"},
       "(ZeRO-3 over 2 ranks"},
      {4, {"--set", "parallel.pipeline=2", "--set", "parallel.zero=2", "--stop-at-step", "10"},
       "(ZeRO-2 over 2 ranks"},
      {4, {"--set", "parallel.tensor=2", "--set", "parallel.zero=1", "--stop-at-step", "11"}},
      {1, {}},
  };
  const fs::path log = dir_ / "legs.jsonl";
  for (const Leg& leg : legs) {
    std::vector<std::string> args = {"-c", cfg.string(), "--log-file", log.string(),
                                     "--checkpoint-dir", (dir_ / "ck").string()};
    args.insert(args.end(), leg.sets.begin(), leg.sets.end());
    TrainRun r = Train(leg.ranks, args);
    ASSERT_TRUE(r.status.Success()) << r.output;
    if (&leg != &legs.front()) {
      EXPECT_THAT(r.output, HasSubstr("resuming from"));
    }
    if (!leg.says.empty()) {
      EXPECT_THAT(r.output, HasSubstr(leg.says));
    }
    // Every rank wrote ranges of the newest checkpoint (by range, in parallel).
    fs::path newest;
    for (const auto& e : fs::directory_iterator(dir_ / "ck")) {
      if (e.path().filename().string().starts_with("step_") && e.path() > newest) newest = e.path();
    }
    nlohmann::json manifest;
    std::ifstream(newest / "MANIFEST") >> manifest;
    std::set<int> writers;
    for (const auto& range : manifest["ranges"]) writers.insert(range["rank"].get<int>());
    EXPECT_EQ(static_cast<int>(writers.size()), leg.ranks) << newest;
  }
  ExpectClose(RecordedLosses(log), want, 1e-5, "resumed across layouts");
}

// Lines of a loss record being written by a running job (a torn last line is not counted).
size_t RecordedSteps(const fs::path& log) {
  std::ifstream in(log);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    n += !nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false).is_discarded();
  }
  return n;
}

// The pid of the rank `rank` that `launcher` (a `cohort run`) started: a child process whose
// environment says RANK=<rank>.
pid_t RankPid(pid_t launcher, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != launcher) continue;
    std::ifstream env(e.path() / "environ", std::ios::binary);
    std::string var;
    while (std::getline(env, var, '\0')) {
      if (var == "RANK=" + std::to_string(rank)) return static_cast<pid_t>(std::stoi(name));
    }
  }
  return -1;
}

TEST_F(TrainParallelCliTest, ARankKilledMidRunFailsTheJobAndTheRerunResumes) {
  // Steps: the kill lands right after step 4 is recorded and the run's other ranks fail at
  // once (their peer's connection closes); 50 leave it over 40 steps to land in, where 100
  // only made each of the three runs twice as long.
  constexpr size_t kSteps = 50;
  const std::string steps = std::to_string(kSteps);
  const fs::path cfg = Config("checkpoint: {every: 2}\ncomm: {timeout_s: 20}\n");
  ASSERT_TRUE(Train(1, {"-c", cfg.string(), "--log-file", (dir_ / "straight.jsonl").string(),
                        "--checkpoint-dir", (dir_ / "ck-straight").string(), "--steps", steps})
                  .status.Success());
  const fs::path log = dir_ / "killed.jsonl";
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "train", "-n", "4", "-c", cfg.string(), "--log-file", log.string(),
            "--checkpoint-dir", (dir_ / "ck").string(), "--steps", steps, "--set",
            "parallel.pipeline=4"};
  o.unset_env = {"COHORT_CHECKPOINT_DIR", "COHORT_REPORT", "COHORT_JOB_ID", "RANK",
                 "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS"};
  o.stdout_path = (dir_ / "killed.txt").string();
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.has_value()) << p.error().ToString();
  // Wait (bounded) until a checkpoint covers step 4, then kill a middle stage mid-run.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (RecordedSteps(log) < 4 && std::chrono::steady_clock::now() < deadline) {
    if (p->TryWait()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a file, not timing
  }
  const pid_t victim = RankPid(p->pid(), 2);
  ASSERT_GT(victim, 0) << "rank 2 of the run not found";
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  auto st = p->WaitFor(std::chrono::seconds(60));
  ASSERT_TRUE(st.has_value()) << "the job did not stop after a rank died";
  EXPECT_FALSE(st->Success());
  const size_t before = RecordedLosses(log).size();
  EXPECT_GE(before, 4u);
  EXPECT_LT(before, kSteps);
  // The rerun (another layout) resumes from the last checkpoint and ends where an
  // uninterrupted run ends.
  TrainRun again = Train(4, {"-c", cfg.string(), "--log-file", log.string(), "--checkpoint-dir",
                             (dir_ / "ck").string(), "--steps", steps, "--set",
                             "parallel.tensor=2", "--set", "parallel.pipeline=2"});
  ASSERT_TRUE(again.status.Success()) << again.output;
  EXPECT_THAT(again.output, HasSubstr("resuming from"));
  const auto got = RecordedLosses(log), want = RecordedLosses(dir_ / "straight.jsonl");
  ASSERT_EQ(got.size(), kSteps);
  ExpectClose(got, want, 1e-3, "killed and resumed");
}

TEST_F(TrainParallelCliTest, ImpossibleLayoutsAreErrorsBeforeAnythingIsWritten) {
  const fs::path cfg = Config("checkpoint: {every: 1}\n");
  struct Bad {
    int ranks;
    std::vector<std::string> sets;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {3, {"--set", "parallel.tensor=3"}, "parallel.tensor: 3 does not divide n_head 4"},
      {4, {"--set", "parallel.tensor=2", "--set", "parallel.pipeline=3"},
       "parallel: tensor 2 x pipeline 3 = 6 ranks per replica does not divide the world size 4"},
      {2, {"--set", "parallel.pipeline=2", "--set", "parallel.schedule=zigzag"},
       "parallel.schedule: must be gpipe, 1f1b or interleaved, got 'zigzag'"},
      {4, {"--set", "parallel.pipeline=4", "--set", "parallel.schedule=interleaved", "--set",
           "parallel.virtual_stages=2"},
       "parallel.pipeline: pipeline 4 x virtual_stages 2 = 8 chunks, but n_layer 4 gives each "
       "chunk less than one layer"},
      {2, {"--set", "parallel.pipeline=2", "--set", "parallel.pipeline_layers=[1,2]"},
       "parallel.pipeline_layers: sums to 3 layers; n_layer is 4"},
      {2, {"--set", "parallel.pipeline=2", "--set", "parallel.microbatches=3"},
       "parallel.microbatches: 3 but train.global_batch_tokens 256 / (data 1 x "
       "train.micro_batch 2 x model.seq_len 32) gives 4 micro-batches per replica"},
      {2, {"--set", "parallel.tensor=2", "--set", "train.device=cuda", "--set", "parallel.zero=2",
           "--set", "parallel.offload=optimizer+params"},
       "parallel.offload: optimizer+params needs parallel.zero 3, got 2"},
      {1, {"--set", "parallel"}, "--set: 'parallel' is not section.key=value"},
  };
  for (const Bad& b : bad) {
    const fs::path ck = dir_ / ("ck-" + std::to_string(runs_));
    std::vector<std::string> args = {"-c", cfg.string(), "--checkpoint-dir", ck.string()};
    args.insert(args.end(), b.sets.begin(), b.sets.end());
    TrainRun r = Train(b.ranks, args);
    EXPECT_FALSE(r.status.Success()) << b.message;
    EXPECT_THAT(r.output, HasSubstr(b.message));
    EXPECT_FALSE(fs::exists(ck) && !fs::is_empty(ck)) << b.message << ": wrote " << ck;
  }
}

}  // namespace
}  // namespace cohort
