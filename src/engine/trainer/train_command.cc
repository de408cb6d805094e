#include "engine/trainer/train_command.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/launch_env.h"
#include "common/subprocess.h"
#include "engine/kernels/cpu/matmul.h"
#include "engine/trainer/config.h"
#include "engine/trainer/trainer.h"

namespace cohort::engine {
namespace {

int Report(const Error& e) {
  std::fprintf(stderr, "cohort train: error: %s\n", e.message.c_str());
  return ExitCodeFor(e);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

struct Flags {
  std::string config;
  int ranks = 0;
  int64_t steps = 0;
  std::string checkpoint_dir;
  std::string export_path;
  std::string log_file;
  int64_t log_every = 0;
  int threads = -1;
  int sample_tokens = -1;
  int64_t stop_at_step = 0;
  std::vector<std::string> sets;
};

// --export is written at the end of the run, by rank 0: a path that cannot take a file (a
// directory, or in a directory that does not exist) fails now, not after the training.
Result<void> CheckExportPath(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    return FieldError("--export", "{} is a directory; give a file name, e.g. {}", path,
                      (fs::path(path) / "model.safetensors").string());
  }
  const fs::path parent = fs::absolute(path, ec).parent_path();
  if (!fs::is_directory(parent, ec)) {
    return FieldError("--export", "{}: the directory {} does not exist", path, parent.string());
  }
  if (access(parent.c_str(), W_OK) != 0) {
    return FieldError("--export", "{}: cannot write in {}: {}", path, parent.string(),
                      std::strerror(errno));
  }
  return {};
}

// kResourceExhausted for a run whose allocation failed: what takes the memory, and the ways
// to need less.
Error OutOfHostMemory(const TrainConfig& c) {
  return Error(ErrorCode::kResourceExhausted,
               fmt::format("out of host memory (an allocation failed) for model.n_layer {} x "
                           "model.n_embd {} (context {}), train.micro_batch {}: each rank holds "
                           "the parameters, gradients and AdamW moments (16 bytes per parameter, "
                           "less with parallel.zero, tensor or pipeline) and activations that "
                           "grow with micro_batch x seq_len; train a smaller model or batch, or "
                           "split it over more ranks",
                           c.n_layer, c.n_embd, c.seq_len, c.micro_batch));
}

// An error about a field of the config names the file too ("train.yaml: parallel.tensor:
// ..."), as LoadTrainConfig's own errors do: the trainer's checks know the field, not the
// file it came from.
Error InConfigFile(Error e, const std::string& path) {
  static constexpr std::string_view kSections[] = {"model", "tokenizer", "data",   "train",
                                                   "eval",  "checkpoint", "sample", "log",
                                                   "parallel", "comm"};
  std::string_view field = e.field;
  if (field.empty()) {  // "data.text: no text file at ...": a message that starts with one
    const std::string_view head = std::string_view(e.message).substr(0, e.message.find(": "));
    if (head.size() < e.message.size() && head.find('.') != std::string_view::npos &&
        head.find(' ') == std::string_view::npos) {
      field = head;
    }
  }
  const std::string_view section = field.substr(0, field.find('.'));
  const bool config_field =
      std::find(std::begin(kSections), std::end(kSections), section) != std::end(kSections);
  if (!config_field || e.message.starts_with(path + ": ")) return e;
  return WithContext(std::move(e), path);
}

// Replaces this process with `args` (args[0] is this binary); returns only on failure.
void ExecSelf(std::vector<std::string> args) {
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execv(args[0].c_str(), cargv.data());
}

// Replaces this process with `cohort run -n N -- cohort train <the same flags>`.
int Launch(int argc, char** argv, int ranks) {
  const std::string self = SelfExePath();
  std::vector<std::string> args = {self, "run", "-n", std::to_string(ranks), "--", self, "train"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-n" || a == "--ranks") {
      ++i;  // drop the value as well
      continue;
    }
    if (a.starts_with("--ranks=") || (a.starts_with("-n") && a.size() > 2)) continue;
    args.push_back(a);
  }
  ExecSelf(std::move(args));
  return Report(Error(ErrorCode::kInternal,
                      fmt::format("cannot execute '{}': {}", self, std::strerror(errno))));
}

int RunTrain(int argc, char** argv) {
  CLI::App app{"Train a GPT-2-style model (one rank of a data x pipeline x tensor parallel job)", "cohort train"};
  Flags f;
  app.add_option("-c,--config", f.config, "Training config (YAML or JSON)")->required();
  app.add_option("-n,--ranks", f.ranks, "Train on N local ranks (re-runs under `cohort run -n N`)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--steps", f.steps, "Override train.steps")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--checkpoint-dir", f.checkpoint_dir, "Override checkpoint.dir (none: no checkpoints)");
  app.add_option("--export", f.export_path,
                 "Write the final model here as GPT-2 safetensors (Hugging Face names)");
  app.add_option("--log-file", f.log_file, "Override log.file (JSON lines of the loss record)");
  app.add_option("--log-every", f.log_every, "Override log.every")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--threads", f.threads, "Override train.threads (0: cores / local ranks)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--sample-tokens", f.sample_tokens, "Override sample.tokens")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--stop-at-step", f.stop_at_step,
                 "Stop (and checkpoint) after this step; the schedule still runs to train.steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--set", f.sets,
                 "Set a config field: section.key=value, e.g. --set parallel.tensor=2 (repeatable)")
      ->allow_extra_args(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  // OpenBLAS's kernels for this CPU (cpu/matmul.h): may re-execute this process.
  cpu::ReexecWithSuggestedBlasCoreType("train", argc, argv);

  // --steps is train.steps, which the config must otherwise give: applied to the document
  // (after every --set) so that a config without it is complete.
  if (f.steps > 0) f.sets.push_back(fmt::format("train.steps={}", f.steps));
  auto config = LoadTrainConfig(f.config, f.sets);
  // Checked before -n N starts its ranks: each would print the same error, N times.
  if (!config) return Report(config.error());
  if (f.ranks > 0) {
    // The layout and the batch for N ranks, said once here rather than by each rank.
    if (auto r = CheckTrainLayout(*config, f.ranks); !r) {
      return Report(InConfigFile(r.error(), f.config));
    }
    if (!f.export_path.empty()) {
      if (auto r = CheckExportPath(f.export_path); !r) return Report(r.error());
    }
    return Launch(argc, argv, f.ranks);
  }
  if (!f.checkpoint_dir.empty()) SetCheckpointDir(*config, f.checkpoint_dir, "");
  if (f.log_every > 0) config->log_every = f.log_every;
  if (!f.log_file.empty()) config->log_file = f.log_file;
  if (f.threads >= 0) config->threads = f.threads;
  if (f.sample_tokens >= 0) config->sample_tokens = f.sample_tokens;

  auto env = comm::DetectLaunchEnv();
  if (!env) return Report(env.error());
  if (env->rank == 0 && !f.export_path.empty()) {
    if (auto r = CheckExportPath(f.export_path); !r) return Report(r.error());
  }
  TrainerContext ctx;
  ctx.env = *env;
  ctx.job_id = Env("COHORT_JOB_ID");
  if (ctx.job_id.empty()) ctx.job_id = "local";
  const std::string attempt = Env("COHORT_ATTEMPT");
  if (!attempt.empty()) {
    char* end = nullptr;
    long a = std::strtol(attempt.c_str(), &end, 10);
    if (*end != '\0' || a < 0) {
      return Report(Error(ErrorCode::kInvalidArgument,
                          fmt::format("COHORT_ATTEMPT='{}' is not a non-negative integer", attempt)));
    }
    ctx.attempt = static_cast<int>(a);
  }
  ctx.report_url = Env("COHORT_REPORT");
  ctx.checkpoint_dir = Env("COHORT_CHECKPOINT_DIR");
  ctx.export_path = f.export_path;
  ctx.stop_at_step = f.stop_at_step;

  // Host memory running out is std::bad_alloc from an allocation deep in the model or a
  // step; uncaught it aborted the process ("terminate called after throwing an instance of
  // 'std::bad_alloc'", SIGABRT). Said here instead, with the settings that decide the size.
  try {
    auto trainer = Trainer::Create(*config, ctx);
    if (!trainer) return Report(InConfigFile(trainer.error(), f.config));
    auto result = (*trainer)->Run();
    if (!result) return Report(result.error());
    if (result->terminated) return 128 + SIGTERM;  // as if the signal had ended it
  } catch (const std::bad_alloc&) {
    return Report(OutOfHostMemory(*config));
  }
  return 0;
}

}  // namespace

ExternalCommand TrainCommand() {
  return ExternalCommand{"train",
                         "Train a GPT-2-style model on CPU or GPU ranks (data, pipeline and "
                         "tensor parallel, checkpoints)",
                         &RunTrain};
}

}  // namespace cohort::engine
