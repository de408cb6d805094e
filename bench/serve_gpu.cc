// bench_serve_gpu: the inference server's GPU backend (serve/cuda_model.h: bf16 weights, a
// block KV cache, continuous batching through serve::Batcher, in process: no HTTP) beside
// PyTorch eager generation on the same GPU (bench/torch_generate.py --device cuda --dtype
// bfloat16: static batches, a KV cache grown by torch.cat), the same weights and prompts.
//
//   bench_serve_gpu [--model gpt2-124m|small] [--concurrency 1,8,32,64] [--prompt P]
//                   [--tokens K] [--repeats R] [--torch-script PATH] [--python PY]
//                   [--device cuda|cpu] [--json FILE] [--max-step-tokens N]
//                   [--decode-step-tokens N]
//
// The step budgets default to the server's auto choice (on a GPU: the whole burst of
// prompts in one step while nothing decodes); --max-step-tokens 2048 gives the budget
// before it was chosen per device, for the time to first token beside it.
//
// For each concurrency c: c requests of P prompt tokens each generate K tokens greedily
// (no end-of-text stop), all submitted at once; output tokens/s = c·K over the time from
// the first submit to the last token, and the time to first token of each request
// (p50/p99 over the repeats). The median of R repeats after one warm-up request. PyTorch:
// one batch of c prompts decoding K tokens together, its best of R. The greedy tokens of
// request 0 beside PyTorch's first sequence: both sides run bf16 on random weights, so
// they agree on a prefix; the length of that prefix is printed, not asserted.
//
// First, where a decoding step's time goes: the model's Step alone (no batcher), c
// sequences of context P + K/2 decoding one token each, with the logits of every row
// (copied to the host, as the batcher samples them there) and without (the forward alone);
// median of 20 steps. The rounds above minus this are the batcher's own cost.
// Issue 21 item 4; bench/gpu/run.sh runs it on a lent GPU. --device cpu runs the same
// measurement with the float32 CPU backend and PyTorch on the CPU (one thread each).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "engine/data/tokenizer.h"
#include "engine/model/gpt.h"
#include "serve/batcher.h"
#include "serve/cuda_model.h"
#include "serve/inference_model.h"
#include "serve/kv_cache.h"

namespace {

using cohort::engine::GptConfig;
using cohort::engine::GptModel;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "gpt2-124m";
  std::vector<int> concurrency = {1, 8, 32, 64};
  int prompt = 128;
  int tokens = 128;
  int repeats = 3;
  std::string torch_script;
  std::string python = "python3";
  std::string json;
  // cpu: the server's float32 CPU backend beside PyTorch float32 on the CPU (one thread
  // each side): the same code path on a machine without a GPU, for checking the benchmark.
  std::string device = "cuda";
  // The step budgets (serve::kAutoStepTokens, BatcherOptions::decode_step_tokens): 0 is
  // the server's auto choice; --max-step-tokens 2048 is the budget before it was chosen
  // per device.
  int max_step_tokens = 0;
  int decode_step_tokens = 0;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_serve_gpu: %s\nusage: bench_serve_gpu [--model gpt2-124m|small] "
               "[--concurrency 1,8,32,64] [--prompt P] [--tokens K] [--repeats R] "
               "[--torch-script PATH] [--python PY] [--device cuda|cpu] [--json FILE] "
               "[--max-step-tokens N] [--decode-step-tokens N]\n",
               why.c_str());
  std::exit(2);
}

int Positive(const std::string& flag, const std::string& v, int max, int min = 1) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < min || n > max) {
    Usage(fmt::format("{}: '{}' is not an integer in [{}, {}]", flag, v, min, max));
  }
  return static_cast<int>(n);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--model") {
      if (v != "gpt2-124m" && v != "small") Usage("--model: must be gpt2-124m or small, got '" + v + "'");
      o.model = v;
    } else if (a == "--concurrency") {
      o.concurrency.clear();
      size_t start = 0;
      while (start <= v.size()) {
        const size_t comma = std::min(v.find(',', start), v.size());
        o.concurrency.push_back(Positive(a, v.substr(start, comma - start), 256));
        start = comma + 1;
      }
    } else if (a == "--prompt") {
      o.prompt = Positive(a, v, 512);
    } else if (a == "--tokens") {
      o.tokens = Positive(a, v, 512);
    } else if (a == "--repeats") {
      o.repeats = Positive(a, v, 100);
    } else if (a == "--torch-script") {
      o.torch_script = v;
    } else if (a == "--python") {
      o.python = v;
    } else if (a == "--device") {
      if (v != "cuda" && v != "cpu") Usage("--device: must be cuda or cpu, got '" + v + "'");
      o.device = v;
    } else if (a == "--json") {
      o.json = v;
    } else if (a == "--max-step-tokens") {
      o.max_step_tokens = Positive(a, v, 1 << 20, 0);
    } else if (a == "--decode-step-tokens") {
      o.decode_step_tokens = Positive(a, v, 1 << 20, 0);
    } else {
      Usage("unknown flag " + a);
    }
  }
  return o;
}

GptConfig ModelConfig(const std::string& name) {
  GptConfig c;
  c.vocab_size = 50257;
  c.max_seq_len = 1024;
  c.n_layer = name == "small" ? 6 : 12;
  c.n_head = name == "small" ? 6 : 12;
  c.n_embd = name == "small" ? 384 : 768;
  return c;
}

// The prompt of request r: deterministic ids spread over the vocabulary.
std::vector<int32_t> Prompt(const GptConfig& c, int r, int n) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((7 * i + 3 + 1009 * r) % c.vocab_size);
  return ids;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

struct Round {
  double seconds = 0;
  std::vector<double> ttft;
  std::vector<int32_t> first_tokens;  // request 0's
};

// c requests at once through the batcher; fails on any error event or short generation.
cohort::Result<Round> RunRound(cohort::serve::Batcher& b, const GptConfig& cfg, int c, int prompt,
                               int tokens) {
  using cohort::serve::GenerationRequest;
  using cohort::serve::RequestChannel;
  Round round;
  round.ttft.assign(c, 0);
  std::vector<std::shared_ptr<RequestChannel>> chans;
  std::vector<std::string> errors(c);
  std::vector<std::vector<int32_t>> out(c);
  const auto t0 = Clock::now();
  for (int r = 0; r < c; ++r) {
    GenerationRequest req;
    req.tokens = Prompt(cfg, r, prompt);
    req.max_tokens = tokens;
    req.sampling.temperature = 0;
    req.stop_at_eot = false;
    chans.push_back(COHORT_TRY(b.Submit(std::move(req))));
  }
  std::vector<std::thread> readers;
  for (int r = 0; r < c; ++r) {
    readers.emplace_back([&, r] {
      for (;;) {
        auto e = chans[r]->Next(std::chrono::seconds(120));
        if (!e) {
          errors[r] = "no token for 120 s";
          return;
        }
        if (e->token >= 0) {
          if (out[r].empty()) round.ttft[r] = std::chrono::duration<double>(Clock::now() - t0).count();
          out[r].push_back(e->token);
        }
        if (e->finish_reason == "error") errors[r] = e->error;
        if (!e->finish_reason.empty()) return;
      }
    });
  }
  for (auto& t : readers) t.join();
  round.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int r = 0; r < c; ++r) {
    if (!errors[r].empty() || static_cast<int>(out[r].size()) != tokens) {
      return cohort::MakeError(cohort::ErrorCode::kInternal,
                               fmt::format("request {} of {}: {} tokens of {}{}", r, c, out[r].size(),
                                           tokens, errors[r].empty() ? "" : ": " + errors[r]));
    }
  }
  round.first_tokens = out[0];
  return round;
}

// The weights as torch_generate.py reads them: STEP_DIR/params.bin (float32, GptModel's
// layout) and STEP_DIR/state.json {"config": {...}}.
cohort::Result<void> WriteCheckpoint(const std::string& dir, const GptModel& m) {
  std::filesystem::create_directories(dir);
  const GptConfig& c = m.config();
  std::ofstream p(dir + "/params.bin", std::ios::binary);
  p.write(reinterpret_cast<const char*>(m.params().data()), m.params().size() * sizeof(float));
  std::ofstream s(dir + "/state.json");
  s << nlohmann::json{{"config", {{"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len},
                                  {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}}}}
           .dump()
    << "\n";
  if (!p || !s) return cohort::MakeError(cohort::ErrorCode::kInternal, "cannot write " + dir);
  return {};
}

// The model's decode step alone for c sequences: {ms with logits, ms without}.
cohort::Result<std::pair<double, double>> TimeDecodeStep(cohort::serve::InferenceModel& m,
                                                         const GptConfig& cfg, int c, int context) {
  using cohort::serve::StepSequence;
  const int bps = cohort::serve::BlocksFor(context + 1, m.cache().block_size);
  if (c * bps > m.cache().num_blocks) {
    return cohort::MakeError(cohort::ErrorCode::kInvalidArgument, "the cache is too small");
  }
  std::vector<std::vector<int>> blocks(c);
  std::vector<std::vector<int32_t>> prompts(c);
  for (int r = 0; r < c; ++r) {
    for (int b = 0; b < bps; ++b) blocks[r].push_back(r * bps + b);
    prompts[r] = Prompt(cfg, r, context + 1);
  }
  std::vector<float> logits;
  // Fill every sequence's cache to `context` positions, a sequence per step.
  for (int r = 0; r < c; ++r) {
    const StepSequence q{std::span<const int32_t>(prompts[r].data(), context), 0, blocks[r], false};
    for (int at = 0; at < context; at += m.max_step_tokens()) {
      const int n = std::min(m.max_step_tokens(), context - at);
      const StepSequence part{q.tokens.subspan(at, n), at, blocks[r], false};
      COHORT_TRY_VOID(m.Step(std::span<const StepSequence>(&part, 1), logits));
    }
  }
  auto time = [&](bool want) -> cohort::Result<double> {
    std::vector<StepSequence> step;
    for (int r = 0; r < c; ++r) {
      step.push_back({std::span<const int32_t>(prompts[r].data() + context, 1), context, blocks[r], want});
    }
    std::vector<double> ms;
    for (int i = 0; i < 25; ++i) {
      const auto t0 = Clock::now();
      COHORT_TRY_VOID(m.Step(step, logits));  // synchronises before it returns
      if (i >= 5) ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return Percentile(ms, 0.5);
  };
  const double with = COHORT_TRY(time(true));
  const double without = COHORT_TRY(time(false));
  return std::pair{with, without};
}

struct TorchRow {
  double tokens_per_s = 0;
  double ttft_s = 0;
  std::vector<int32_t> first;
  std::string error;
};

TorchRow RunTorch(const Options& o, const std::string& ckpt, int c) {
  TorchRow row;
  if (o.torch_script.empty()) {
    row.error = "no --torch-script";
    return row;
  }
  const std::string out = ckpt + fmt::format("/torch_{}.json", c);
  cohort::SpawnOptions so;
  so.argv = {o.python, o.torch_script, "--checkpoint", ckpt, "--threads", "1", "--batch",
             std::to_string(c), "--prompt", std::to_string(o.prompt), "--tokens",
             std::to_string(o.tokens), "--repeats", std::to_string(o.repeats), "--device", o.device,
             "--dtype", o.device == "cuda" ? "bfloat16" : "float32"};
  so.stdout_path = out;
  so.stderr_path = out + ".err";
  so.new_process_group = false;
  // One thread for PyTorch's own pools too (bench_serve does the same): --threads 1 sets
  // torch.set_num_threads only.
  so.env = {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  auto child = cohort::Subprocess::Spawn(so);
  auto status = child ? child->Wait() : cohort::Result<cohort::ExitStatus>(std::unexpected(child.error()));
  auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const std::string text = slurp(out), err = slurp(out + ".err");
  if (!status || !status->Success()) {
    row.error = fmt::format("{}: {}", status ? status->ToString() : status.error().ToString(),
                            err.substr(err.size() > 400 ? err.size() - 400 : 0));
    return row;
  }
  try {
    const auto j = nlohmann::json::parse(text.substr(text.rfind('{')));
    row.tokens_per_s = j.at("tokens_per_second").get<double>();
    const auto ttfts = j.at("ttft_seconds").get<std::vector<double>>();
    row.ttft_s = Percentile(ttfts, 0.5);
    row.first = j.at("first_sequence").get<std::vector<int32_t>>();
  } catch (const std::exception& e) {
    row.error = std::string("unreadable output: ") + e.what();
  }
  return row;
}

int Main(const Options& o) {
  // One thread on the CPU for the step timed alone too (the batcher sets its own thread's):
  // the default, every core, put the timed step at OpenMP barriers on a loaded machine.
  if (o.device == "cpu") omp_set_num_threads(1);
  auto fail = [](const cohort::Error& e) {
    std::fprintf(stderr, "bench_serve_gpu: %s\n", e.ToString().c_str());
    return 1;
  };
  const GptConfig cfg = ModelConfig(o.model);
  if (o.prompt + o.tokens > cfg.max_seq_len) {
    Usage(fmt::format("--prompt {} + --tokens {} exceed the context {}", o.prompt, o.tokens, cfg.max_seq_len));
  }
  auto host = GptModel::Create(cfg);
  if (!host) return fail(host.error());
  host->InitRandom(0);
  const int max_c = *std::max_element(o.concurrency.begin(), o.concurrency.end());
  // Cache: every request of the largest round at once, 16-position blocks, bf16.
  const int blocks = max_c * cohort::serve::BlocksFor(o.prompt + o.tokens, 16) + 64;
  const size_t elem = o.device == "cuda" ? 2 : sizeof(float);
  auto probe = cohort::serve::PlanKvCache(cfg, 16, size_t{1} << 40, elem);
  if (!probe) return fail(probe.error());
  auto plan = cohort::serve::PlanKvCache(cfg, 16, probe->bytes_per_block * blocks, elem);
  if (!plan) return fail(plan.error());
  auto make_model = [&]() {
    return o.device == "cuda"
               ? cohort::serve::CreateCudaInferenceModel(cfg, host->params(), *plan, o.max_step_tokens)
               : cohort::serve::CreateCpuInferenceModel(
                     cfg, std::vector<float>(host->params().begin(), host->params().end()),
                     *plan, o.max_step_tokens);
  };
  {
    auto m = make_model();
    if (!m) return fail(m.error());
    const int context = o.prompt + o.tokens / 2;
    fmt::print("# the model's decode step alone (context {}), median of 20:\n{:>11s} {:>16s} "
               "{:>16s} {:>14s}\n",
               context, "sequences", "with logits ms", "forward only ms", "logits cost ms");
    for (int c : o.concurrency) {
      auto t = TimeDecodeStep(**m, cfg, c, context);
      if (!t) return fail(t.error());
      fmt::print("{:>11d} {:>16.2f} {:>16.2f} {:>14.2f}\n", c, t->first, t->second,
                 t->first - t->second);
    }
  }
  auto model = make_model();
  if (!model) return fail(model.error());
  auto tokenizer = cohort::engine::MakeByteTokenizer();
  cohort::serve::BatcherOptions bo;
  bo.max_running = max_c;
  bo.max_waiting = 2 * max_c;
  bo.prefill_chunk = o.prompt;
  bo.decode_step_tokens = o.decode_step_tokens;
  bo.threads = o.device == "cpu" ? 1 : 0;
  auto batcher = cohort::serve::Batcher::Start(std::move(*model), tokenizer.get(), bo, nullptr);
  if (!batcher) return fail(batcher.error());

  const std::string ckpt =
      (std::filesystem::temp_directory_path() / fmt::format("bench_serve_gpu.{}", getpid())).string();
  if (auto w = WriteCheckpoint(ckpt, *host); !w) return fail(w.error());

  fmt::print("# bench_serve_gpu: GPT-2 {} (random weights, seed 0), {}; prompts of {} "
             "tokens, {} generated greedily; KV cache {} blocks of 16 ({:.2f} GiB); steps of {} tokens, "
             "{} while decoding{}; median of {} rounds after a warm-up (PyTorch: best of {})\n",
             o.model, o.device == "cuda" ? "bf16 on the GPU" : "float32 on the CPU, one thread",
             o.prompt, o.tokens, plan->num_blocks, plan->bytes() / double(1 << 30),
             (*batcher)->prefill_step_tokens(), (*batcher)->decode_step_tokens(),
             o.max_step_tokens == 0 ? " (auto)" : "", o.repeats, o.repeats);
  if (auto w = RunRound(**batcher, cfg, 1, o.prompt, 8); !w) return fail(w.error());  // warm-up
  fmt::print("{:>11s} {:>13s} {:>10s} {:>10s} {:>13s} {:>10s} {:>9s} {:>14s}\n", "concurrency",
             "cohort tok/s", "ttft p50", "ttft p99", "torch tok/s", "torch ttft", "vs torch",
             "same greedy");
  nlohmann::json rows = nlohmann::json::array();
  int status = 0;
  for (int c : o.concurrency) {
    std::vector<double> secs, ttft;
    std::vector<int32_t> first;
    for (int r = 0; r < o.repeats; ++r) {
      auto round = RunRound(**batcher, cfg, c, o.prompt, o.tokens);
      if (!round) return fail(round.error());
      secs.push_back(round->seconds);
      ttft.insert(ttft.end(), round->ttft.begin(), round->ttft.end());
      first = round->first_tokens;
    }
    const double tps = c * o.tokens / Percentile(secs, 0.5);
    const TorchRow t = RunTorch(o, ckpt, c);
    size_t same = 0;
    while (same < first.size() && same < t.first.size() && first[same] == t.first[same]) ++same;
    if (!t.error.empty()) {
      status = 1;
      std::fprintf(stderr, "torch at concurrency %d: %s\n", c, t.error.c_str());
    }
    fmt::print("{:>11d} {:>13.0f} {:>8.1f}ms {:>8.1f}ms {:>13s} {:>10s} {:>9s} {:>14s}\n", c, tps,
               1e3 * Percentile(ttft, 0.5), 1e3 * Percentile(ttft, 0.99),
               t.error.empty() ? fmt::format("{:.0f}", t.tokens_per_s) : "failed",
               t.error.empty() ? fmt::format("{:.1f}ms", 1e3 * t.ttft_s) : "-",
               t.error.empty() ? fmt::format("{:.2f}x", tps / t.tokens_per_s) : "-",
               t.error.empty() ? fmt::format("{}/{}", same, first.size()) : "-");
    rows.push_back({{"concurrency", c},
                    {"tokens_per_s", tps},
                    {"ttft_p50_s", Percentile(ttft, 0.5)},
                    {"ttft_p99_s", Percentile(ttft, 0.99)},
                    {"round_seconds", secs},
                    {"torch_tokens_per_s", t.tokens_per_s},
                    {"torch_ttft_s", t.ttft_s},
                    {"torch_error", t.error},
                    {"same_greedy_prefix", same}});
  }
  (*batcher)->Stop();
  std::filesystem::remove_all(ckpt);
  if (!o.json.empty()) {
    std::ofstream(o.json) << nlohmann::json{{"model", o.model}, {"prompt", o.prompt},
                                            {"tokens", o.tokens}, {"rows", rows}}
                                 .dump()
                          << "\n";
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) { return Main(Parse(argc, argv)); }
