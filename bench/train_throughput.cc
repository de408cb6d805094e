// bench_train_throughput: training tokens/s of the CPU reference GptModel (forward +
// backward + AdamW step) beside the same model in PyTorch (bench/torch_train_throughput.py)
// with the same thread count, run back to back in one invocation.
//
//   bench_train_throughput [--threads N] [--steps S] [--warmup W] [--batch B] [--no-torch]
//
// Default model: d_model 384, 6 layers, 6 heads, context 256, batch 8, GPT-2 vocab (50257).
// Figures: the median step time over S steps after W warmup steps.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "engine/kernels/cpu/matmul.h"
#include "engine/model/gpt.h"
#include "engine/optim/adamw.h"

namespace {

using cohort::engine::AdamW;
using cohort::engine::AdamWConfig;
using cohort::engine::DecayRange;
using cohort::engine::GptConfig;
using cohort::engine::GptModel;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Options {
  int threads = 2;
  int steps = 10;
  int warmup = 2;
  int batch = 8;
  bool torch = true;
};

Options Parse(int argc, char** argv) {
  Options o;
  o.threads = omp_get_max_threads();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (a == "--threads") o.threads = next();
    else if (a == "--steps") o.steps = next();
    else if (a == "--warmup") o.warmup = next();
    else if (a == "--batch") o.batch = next();
    else if (a == "--no-torch") o.torch = false;
    else {
      std::fprintf(stderr,
                   "usage: bench_train_throughput [--threads N] [--steps S] [--warmup W] "
                   "[--batch B] [--no-torch]\n");
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = Parse(argc, argv);
  // OpenBLAS may have picked generic kernels for a CPU model it does not know; it reads
  // OPENBLAS_CORETYPE only at load time, so set it and start again. The PyTorch run below
  // inherits it (it uses the same OpenBLAS), so both sides get the same kernels.
  const std::string detected = cohort::engine::cpu::BlasCoreName();
  if (const std::string core = cohort::engine::cpu::SuggestedBlasCoreType(); !core.empty()) {
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    setenv("COHORT_BENCH_BLAS_DETECTED", detected.c_str(), 1);
    execv("/proc/self/exe", argv);
    std::fprintf(stderr, "warning: could not re-execute with OPENBLAS_CORETYPE=%s\n", core.c_str());
  }
  omp_set_num_threads(opt.threads);
  GptConfig cfg;
  cfg.vocab_size = 50257;
  cfg.max_seq_len = 256;
  cfg.n_layer = 6;
  cfg.n_head = 6;
  cfg.n_embd = 384;
  const int B = opt.batch, T = cfg.max_seq_len;

  auto model = GptModel::Create(cfg);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().ToString().c_str());
    return 1;
  }
  model->InitRandom(0);
  std::vector<DecayRange> ranges;
  for (const auto& t : model->tensors()) ranges.push_back({t.offset, t.numel, t.weight_decay});
  AdamWConfig ac;  // betas (0.9, 0.95), eps 1e-8, weight decay 0.1: as the PyTorch side
  auto adamw = AdamW::Create(model->params().size(), ranges, ac);
  if (!adamw) {
    std::fprintf(stderr, "%s\n", adamw.error().ToString().c_str());
    return 1;
  }
  std::mt19937 rng(1);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % cfg.vocab_size);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % cfg.vocab_size);

  const double flops_per_token = cohort::engine::TrainingFlopsPerToken(cfg, T);
  fmt::print("# bench_train_throughput: GPT-2 d_model {}, {} layers, {} heads, context {}, batch {}, "
             "vocab {} (padded {}), {:.1f}M parameters\n",
             cfg.n_embd, cfg.n_layer, cfg.n_head, T, B, cfg.vocab_size, cfg.padded_vocab_size(),
             model->params().size() / 1e6);
  fmt::print("# threads: {} (OpenMP; OpenBLAS single-threaded inside OpenMP)   float32, AdamW, "
             "median of {} steps after {} warmup\n",
             opt.threads, opt.steps, opt.warmup);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const char* fallback = std::getenv("COHORT_BENCH_BLAS_DETECTED");
  fmt::print("# OpenBLAS kernels: {}{}\n", detected,
             forced == nullptr ? std::string()
             : fallback != nullptr
                 ? fmt::format(" (OPENBLAS_CORETYPE={}: OpenBLAS detected {} on this CPU; "
                               "both sides use it)", forced, fallback)
                 : fmt::format(" (OPENBLAS_CORETYPE={} from the environment)", forced));

  std::vector<double> times, fwd_times, bwd_times, opt_times;
  float last_loss = 0;
  for (int step = 0; step < opt.warmup + opt.steps; ++step) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    model->ZeroGrad();
    auto loss = model->Forward(tokens, targets, B, T);
    const auto t1 = Clock::now();
    if (!loss || !model->Backward(1.0f)) {
      std::fprintf(stderr, "training step failed\n");
      return 1;
    }
    const auto t2 = Clock::now();
    adamw->Step(model->params(), model->grads(), 3e-4f);
    const auto t3 = Clock::now();
    last_loss = *loss;
    if (step >= opt.warmup) {
      times.push_back(std::chrono::duration<double>(t3 - t0).count());
      fwd_times.push_back(std::chrono::duration<double>(t1 - t0).count());
      bwd_times.push_back(std::chrono::duration<double>(t2 - t1).count());
      opt_times.push_back(std::chrono::duration<double>(t3 - t2).count());
    }
  }
  const double cohort_step = Median(times);
  const double cohort_tps = B * T / cohort_step;
  fmt::print("cohort : {:9.1f} tokens/s  step {:7.1f} ms (zero_grad+forward {:.1f}, backward {:.1f}, adamw "
             "{:.1f})  {:.1f} GFLOP/s  loss {:.3f}\n",
             cohort_tps, 1e3 * cohort_step, 1e3 * Median(fwd_times), 1e3 * Median(bwd_times),
             1e3 * Median(opt_times), cohort_tps * flops_per_token / 1e9, last_loss);

  if (!opt.torch) return 0;
  const std::string out = (std::filesystem::temp_directory_path() /
                           fmt::format("cohort_torch_bench_{}.json", getpid())).string();
  cohort::SpawnOptions so;
  so.argv = {COHORT_TORCH_PYTHON, COHORT_TORCH_BENCH_SCRIPT,
             "--threads", std::to_string(opt.threads), "--steps", std::to_string(opt.steps),
             "--warmup", std::to_string(opt.warmup), "--batch", std::to_string(B),
             "--seq", std::to_string(T), "--layers", std::to_string(cfg.n_layer),
             "--heads", std::to_string(cfg.n_head), "--embd", std::to_string(cfg.n_embd),
             "--vocab", std::to_string(cfg.vocab_size)};
  so.stdout_path = out;
  so.stderr_path = out + ".err";
  so.new_process_group = false;
  auto child = cohort::Subprocess::Spawn(so);
  auto status = child ? child->Wait() : cohort::Result<cohort::ExitStatus>(std::unexpected(child.error()));
  std::ifstream f(out);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::filesystem::remove(out);
  std::ifstream ferr(out + ".err");
  std::string err((std::istreambuf_iterator<char>(ferr)), std::istreambuf_iterator<char>());
  std::filesystem::remove(out + ".err");
  if (!status || !status->Success()) {
    fmt::print("torch  : failed ({}): {}\n",
               status ? status->ToString() : status.error().ToString(), err);
    return 1;
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("step_seconds")) {
    fmt::print("torch  : unreadable output: {}{}\n", text, err);
    return 1;
  }
  const double torch_step = Median(j["step_seconds"].get<std::vector<double>>());
  const double torch_tps = B * T / torch_step;
  fmt::print("torch  : {:9.1f} tokens/s  step {:7.1f} ms  {:.1f} GFLOP/s  loss {:.3f}  (torch {}, "
             "{} threads)\n",
             torch_tps, 1e3 * torch_step, torch_tps * flops_per_token / 1e9,
             j["losses"].back().get<double>(), j["torch"].get<std::string>(),
             j["threads"].get<int>());
  fmt::print("ratio  : {:.2f}x cohort/torch   (target: >= 1.0x, aim 1.5x)\n",
             cohort_tps / torch_tps);
  return 0;
}
