// bench_train_throughput: training tokens/s of one whole step (forward + backward + clip +
// AdamW) of a GPT-2-style model.
//
//   bench_train_throughput [--device cpu|cuda] [--model small|gpt2-124m] [--batch B]
//                          [--threads N] [--steps S] [--warmup W] [--no-torch] [--variants]
//                          [--json FILE]
//
// --device cpu (default): the float32 CPU reference GptModel, beside the same model in
// PyTorch (bench/torch_train_throughput.py) with the same thread count, back to back.
// --device cuda: GptCudaModel + GptCudaAdamW (bf16 activations, float32 master weights) on
// GPU 0, with MFU against the GPU's dense bf16 peak; the PyTorch side of that comparison is
// bench/gpu/train_gpt2_torch.py, which bench/gpu/run.sh runs in the same call. With
// --variants it first times the step with every GptCudaOptions lever off (the baseline),
// then with each lever alone, each on a fresh model in the same process, and prints each
// row's difference from the baseline: the before and after of every lever in one run.
//
// Models: "small" (default): d_model 384, 6 layers, 6 heads, context 256, GPT-2 vocab
// (50257); "gpt2-124m": GPT-2 124M (12 layers, 768, 12 heads, context 1024, vocab 50257).
// Batch default 8. Figures: the median step time over S steps after W warmup steps, with
// random tokens and targets (never zeros); on the GPU every step ends in a synchronisation
// (the optimizer reads the gradient norm back), so host clocks time the GPU's work.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "engine/kernels/cpu/matmul.h"
#include "engine/model/gpt.h"
#include "engine/optim/adamw.h"
#include "engine/trainer/device_peak.h"

#if COHORT_HAVE_CUDA_ENGINE
#include <cuda_runtime.h>

#include "common/cuda_status.h"
#include "engine/model/gpt_cuda.h"
#endif

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
  bool variants = false;  // --device cuda: time the step with each GptCudaOptions lever
  std::string device = "cpu";
  std::string model = "small";
  std::string json;  // write the figures here as one JSON object
};

void Usage() {
  std::fprintf(stderr,
               "usage: bench_train_throughput [--device cpu|cuda] [--model small|gpt2-124m] "
               "[--batch B] [--threads N] [--steps S] [--warmup W] [--no-torch] [--variants] "
               "[--json FILE]\n");
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  o.threads = omp_get_max_threads();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto text = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto next = [&]() {
      const std::string v = text();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > 1 << 20) {
        std::fprintf(stderr, "%s: '%s' is not a positive integer\n", a.c_str(), v.c_str());
        std::exit(2);
      }
      return static_cast<int>(n);
    };
    if (a == "--threads") o.threads = next();
    else if (a == "--steps") o.steps = next();
    else if (a == "--warmup") o.warmup = next();
    else if (a == "--batch") o.batch = next();
    else if (a == "--no-torch") o.torch = false;
    else if (a == "--variants") o.variants = true;
    else if (a == "--device") o.device = text();
    else if (a == "--model") o.model = text();
    else if (a == "--json") o.json = text();
    else Usage();
  }
  if (o.device != "cpu" && o.device != "cuda") {
    std::fprintf(stderr, "--device: must be cpu or cuda, got '%s'\n", o.device.c_str());
    std::exit(2);
  }
  if (o.model != "small" && o.model != "gpt2-124m") {
    std::fprintf(stderr, "--model: must be small or gpt2-124m, got '%s'\n", o.model.c_str());
    std::exit(2);
  }
  return o;
}


GptConfig ModelConfig(const std::string& name) {
  GptConfig cfg;
  cfg.vocab_size = 50257;
  if (name == "gpt2-124m") {
    cfg.max_seq_len = 1024;
    cfg.n_layer = 12;
    cfg.n_head = 12;
    cfg.n_embd = 768;
  } else {
    cfg.max_seq_len = 256;
    cfg.n_layer = 6;
    cfg.n_head = 6;
    cfg.n_embd = 384;
  }
  return cfg;
}

// Random ids in [0, vocab): tokens and targets of every step.
void RandomBatch(const GptConfig& cfg, int B, int T, std::vector<int32_t>& tokens,
                 std::vector<int32_t>& targets) {
  std::mt19937 rng(1);
  tokens.resize(static_cast<size_t>(B) * T);
  targets.resize(tokens.size());
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % cfg.vocab_size);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % cfg.vocab_size);
}

void WriteJson(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << j.dump() << "\n";
  if (!out) std::fprintf(stderr, "warning: cannot write %s\n", path.c_str());
}

#if COHORT_HAVE_CUDA_ENGINE
// One configuration of the step, timed: the figures of one row.
struct CudaFigures {
  std::vector<double> times, fwd, bwd, opt;
  float loss = 0;
  size_t model_bytes = 0, adamw_bytes = 0;
  cohort::engine::cuda::MatmulFallbacks fallbacks;  // epilogues cuBLASLt had no algorithm for
};

// Creates the model with `options`, uploads `params` and times warmup + steps full steps.
cohort::Result<CudaFigures> TimeCudaSteps(const Options& opt, const GptConfig& cfg,
                                          const cohort::engine::GptCudaOptions& options,
                                          std::span<const float> params,
                                          std::span<const int32_t> tokens,
                                          std::span<const int32_t> targets) {
  using cohort::engine::GptCudaAdamW;
  using cohort::engine::GptCudaModel;
  const int B = opt.batch, T = cfg.max_seq_len;
  auto model = COHORT_TRY(GptCudaModel::Create(cfg, B, T, options));
  COHORT_TRY_VOID(model->CopyParamsFromHost(params));
  AdamWConfig ac;  // betas (0.9, 0.95), eps 1e-8, weight decay 0.1: as the PyTorch side
  auto adamw = COHORT_TRY(GptCudaAdamW::Create(*model, ac));
  CudaFigures f;
  f.model_bytes = model->device_bytes();
  f.adamw_bytes = adamw->device_bytes();
  for (int step = 0; step < opt.warmup + opt.steps; ++step) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    COHORT_TRY_VOID(model->ZeroGrad());
    const float loss = COHORT_TRY(model->Forward(tokens, targets, B, T));  // synchronises
    const auto t1 = Clock::now();
    COHORT_TRY_VOID(model->Backward(1.0f));
    COHORT_TRY_VOID(model->Synchronize());
    const auto t2 = Clock::now();
    COHORT_TRY(adamw->Step(3e-4f, 1.0));  // synchronises (reads the norm)
    const auto t3 = Clock::now();
    f.loss = loss;
    if (!std::isfinite(loss)) {
      return cohort::MakeError(cohort::ErrorCode::kInternal,
                               fmt::format("the loss is {} at step {}", loss, step));
    }
    if (step >= opt.warmup) {
      f.times.push_back(std::chrono::duration<double>(t3 - t0).count());
      f.fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
      f.bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
      f.opt.push_back(std::chrono::duration<double>(t3 - t2).count());
    }
  }
  f.fallbacks = model->matmul_fallbacks();
  return f;
}

// The levers of GptCudaOptions by name, for --variants.
struct Lever {
  const char* name;
  bool cohort::engine::GptCudaOptions::*field;
};
constexpr Lever kLevers[] = {
    {"gelu_epilogue", &cohort::engine::GptCudaOptions::gelu_epilogue},
    {"bias_grad_epilogue", &cohort::engine::GptCudaOptions::bias_grad_epilogue},
    {"fused_adamw", &cohort::engine::GptCudaOptions::fused_adamw},
    {"single_pass_classifier", &cohort::engine::GptCudaOptions::single_pass_classifier},
    {"fused_residual_layernorm", &cohort::engine::GptCudaOptions::fused_residual_layernorm},
};
#endif

int RunCuda(const Options& opt, const GptConfig& cfg) {
#if !COHORT_HAVE_CUDA_ENGINE
  (void)opt;
  (void)cfg;
  std::fprintf(stderr, "--device cuda: this build has no CUDA support\n");
  return 1;
#else
  using cohort::engine::GptCudaOptions;
  auto fail = [](const cohort::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.ToString().c_str());
    return 1;
  };
  const int B = opt.batch, T = cfg.max_seq_len;
  if (auto n = cohort::CudaDeviceCount(); !n) return fail(n.error());
  if (cudaSetDevice(0) != cudaSuccess) {
    std::fprintf(stderr, "error: cudaSetDevice(0) failed\n");
    return 1;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "error: cudaGetDeviceProperties failed\n");
    return 1;
  }
  const auto peak = cohort::engine::GpuPeakBf16(prop.name);
  // The CPU reference's initialisation (seed 0), uploaded: the same weights as --device cpu.
  auto host = GptModel::Create(cfg);
  if (!host) return fail(host.error());
  host->InitRandom(0);
  std::vector<int32_t> tokens, targets;
  RandomBatch(cfg, B, T, tokens, targets);
  const double flops_per_token = cohort::engine::TrainingFlopsPerToken(cfg, T);
  fmt::print("# bench_train_throughput --device cuda: GPT-2 d_model {}, {} layers, {} heads, "
             "context {}, batch {}, vocab {} (padded {}), {:.1f}M parameters\n",
             cfg.n_embd, cfg.n_layer, cfg.n_head, T, B, cfg.vocab_size, cfg.padded_vocab_size(),
             cfg.num_parameters() / 1e6);

  // With --variants: every lever off (the baseline), each lever alone, every lever on, then
  // the default configuration (the row the JSON reports), each on a fresh model.
  std::vector<std::pair<std::string, GptCudaOptions>> runs;
  if (opt.variants) {
    runs.emplace_back("baseline (all levers off)", GptCudaOptions::Baseline());
    for (const Lever& l : kLevers) {
      GptCudaOptions o = GptCudaOptions::Baseline();
      o.*l.field = true;
      runs.emplace_back(fmt::format("baseline + {}", l.name), o);
    }
  }
  if (opt.variants) runs.emplace_back("all levers on", GptCudaOptions::AllOn());
  runs.emplace_back("cohort", GptCudaOptions{});
  double baseline_s = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto f = TimeCudaSteps(opt, cfg, runs[i].second, host->params(), tokens, targets);
    if (!f) return fail(f.error());
    if (i == 0) {
      fmt::print("# device: {} ({} SMs, {:.0f} GiB); dense bf16 peak {}; model memory {:.2f} "
                 "GiB + AdamW {:.2f} GiB\n",
                 prop.name, prop.multiProcessorCount, prop.totalGlobalMem / double(1 << 30),
                 peak ? fmt::format("{:.1f} TFLOP/s", peak->flops / 1e12) : std::string("unknown"),
                 f->model_bytes / double(1 << 30), f->adamw_bytes / double(1 << 30));
      fmt::print("# bf16 activations, float32 master weights/grads/AdamW; grad clip 1.0; {:.4g} "
                 "training FLOPs per token; median of {} steps after {} warmup\n",
                 flops_per_token, opt.steps, opt.warmup);
    }
    const double step_s = Median(f->times);
    if (i == 0) baseline_s = step_s;
    const double tps = B * T / step_s;
    const double mfu = peak ? flops_per_token * tps / peak->flops : 0.0;
    fmt::print("{:38s}: {:9.0f} tokens/s  step {:7.2f} ms (zero_grad+forward {:.2f}, backward "
               "{:.2f}, clip+adamw {:.2f})  {:.1f} TFLOP/s  MFU {}  loss {:.3f}{}\n",
               runs[i].first, tps, 1e3 * step_s, 1e3 * Median(f->fwd), 1e3 * Median(f->bwd),
               1e3 * Median(f->opt), tps * flops_per_token / 1e12,
               peak ? fmt::format("{:.1f}%", 100 * mfu) : std::string("n/a"), f->loss,
               opt.variants ? fmt::format("  {:+.2f} ms vs baseline", 1e3 * (step_s - baseline_s))
                            : std::string());
    if (const auto& fb = f->fallbacks; fb.total() > 0) {
      // Counted over warmup + steps: per step, divide by their sum.
      fmt::print("{:38s}  epilogue fallbacks to the kernels over {} steps: gelu forward {}, gelu "
                 "backward {}, bias grad {}\n",
                 "", opt.warmup + opt.steps, fb.gelu_forward, fb.gelu_backward, fb.bias_grad);
    }
    if (i + 1 < runs.size()) continue;
    WriteJson(opt.json, {{"impl", "cohort"},
                         {"device", prop.name},
                         {"model", opt.model},
                         {"batch", B},
                         {"seq", T},
                         {"tokens_per_s", tps},
                         {"step_ms", 1e3 * step_s},
                         {"forward_ms", 1e3 * Median(f->fwd)},
                         {"backward_ms", 1e3 * Median(f->bwd)},
                         {"optimizer_ms", 1e3 * Median(f->opt)},
                         {"flops_per_token", flops_per_token},
                         {"peak_flops", peak ? peak->flops : 0.0},
                         {"mfu", mfu},
                         {"loss", f->loss},
                         {"step_seconds", f->times}});
  }
  return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = Parse(argc, argv);
  if (opt.device == "cuda") {
    omp_set_num_threads(opt.threads);
    return RunCuda(opt, ModelConfig(opt.model));
  }
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
  const GptConfig cfg = ModelConfig(opt.model);
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
  std::vector<int32_t> tokens, targets;
  RandomBatch(cfg, B, T, tokens, targets);

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
  WriteJson(opt.json, {{"impl", "cohort"},
                       {"device", "cpu"},
                       {"model", opt.model},
                       {"batch", B},
                       {"seq", T},
                       {"threads", opt.threads},
                       {"tokens_per_s", cohort_tps},
                       {"step_ms", 1e3 * cohort_step},
                       {"flops_per_token", flops_per_token},
                       {"loss", last_loss},
                       {"step_seconds", times}});

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
