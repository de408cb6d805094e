// Running `cohort train` (or any cohort command) as a real process in the engine tests,
// reading its JSON-lines loss record, and the small text corpus they train on. Shared by
// train_cli_test.cc, cuda_model_test.cc and cuda_trainer_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/subprocess.h"

namespace cohort::engine::testing {

// `sentences` sentences of 4 to 9 words from a fixed 21-word list, picked by an LCG seeded
// with `seed`: repetitive enough to learn in a few steps (1400 sentences are ~40 KB).
inline void WriteWordCorpus(const std::filesystem::path& path, int sentences, uint64_t seed) {
  static const char* kWords[] = {"the", "cluster", "runs", "a", "job", "on", "every", "node",
                                 "and", "gpus", "train", "model", "loss", "falls", "when",
                                 "ranks", "agree", "checkpoint", "resumes", "after", "failure"};
  std::ofstream out(path);
  uint64_t x = seed;
  for (int s = 0; s < sentences; ++s) {
    const int n = 4 + static_cast<int>((x >> 33) % 6);
    for (int w = 0; w < n; ++w) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      out << (w ? " " : "") << kWords[(x >> 33) % 21];
    }
    out << ".\n";
  }
}

struct TrainRun {
  ExitStatus status;
  std::string output;
};

// Runs `binary args...` with none of a job's variables inherited from the test's
// environment, stdout and stderr to `out_path`; fails the test if it runs past 300 s.
inline TrainRun RunCohort(const std::string& binary, const std::vector<std::string>& args,
                          const std::string& out_path) {
  SpawnOptions o;
  o.argv = {binary};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.unset_env = {"COHORT_CHECKPOINT_DIR", "COHORT_REPORT", "COHORT_JOB_ID", "RANK",
                 "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS"};
  o.stdout_path = out_path;
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.has_value()) << p.error().ToString();
  if (!p) return {};
  auto st = p->WaitFor(std::chrono::seconds(300));
  if (!st) {
    p->Signal(SIGKILL, /*group=*/true);
    (void)p->Wait();
    ADD_FAILURE() << "cohort did not finish in 300 s";
    return {};
  }
  std::ifstream in(out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  return {*st, ss.str()};
}

// step -> loss from a loss record (log.file; later lines for a step win).
inline std::map<int64_t, double> RecordedLosses(const std::filesystem::path& log) {
  std::map<int64_t, double> losses;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    losses[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  return losses;
}

}  // namespace cohort::engine::testing
