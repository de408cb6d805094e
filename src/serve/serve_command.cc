#include "serve/serve_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "common/log.h"
#include "common/signals.h"
#include "common/subprocess.h"
#include "engine/kernels/cpu/matmul.h"
#include "serve/cuda_model.h"
#include "serve/model_loader.h"
#include "serve/server.h"

namespace cohort::serve {
namespace {

int Report(const Error& e) {
  std::fprintf(stderr, "cohort serve: error: %s\n", e.message.c_str());
  return ExitCodeFor(e);
}

struct Flags {
  ModelSource source;
  std::string name;
  std::string device = "cpu";
  std::string host = "127.0.0.1";
  int port = -1;
  double kv_cache_mb = 256;
  int kv_block_size = 16;
  int max_step_tokens = kAutoStepTokens;
  BatcherOptions batcher;
  int threads = 0;
  int http_threads = 128;
};

int RunServe(int argc, char** argv) {
  CLI::App app{"Serve a GPT model over an OpenAI-compatible HTTP API (one replica)", "cohort serve"};
  Flags f;
  app.add_option("--model", f.source.path, "A `cohort train` checkpoint directory or a GPT-2 .safetensors file")
      ->required();
  app.add_option("--name", f.name, "The model name requests use (default: the model path's base name)");
  app.add_option("--tokenizer", f.source.tokenizer, "auto (the checkpoint's; gpt2 for safetensors), byte or gpt2");
  app.add_option("--bpe-vocab", f.source.bpe_vocab, "GPT-2 vocab.json (default: beside the model)");
  app.add_option("--bpe-merges", f.source.bpe_merges, "GPT-2 merges.txt (default: beside the model)");
  app.add_option("--n-head", f.source.n_head,
                 "Attention heads of a .safetensors model (default: the file's, from its metadata or the "
                 "config.json beside it; GPT-2 124M has 12)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--device", f.device, "cpu (float32) or cuda (bf16)");
  app.add_option("--host", f.host, "Address to listen on (in a job: 0.0.0.0)");
  app.add_option("--port", f.port, "Port (0: any free one; in a job: $MASTER_PORT)")->check(CLI::Range(0, 65535));
  app.add_option("--kv-cache-mb", f.kv_cache_mb, "Key/value cache budget in MiB")->check(CLI::Range(0.0, 1e7));
  app.add_option("--kv-block-size", f.kv_block_size, "Positions per cache block")->check(CLI::Range(1, 1024));
  app.add_option("--max-step-tokens", f.max_step_tokens,
                 "New tokens per batched step, all sequences (0: auto: 512 on cpu; on cuda every position the "
                 "KV cache holds, up to 16384 and an eighth of free device memory)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--decode-step-tokens", f.batcher.decode_step_tokens,
                 "Tokens of a step while sequences are decoding, their own included (0: auto: "
                 "--max-step-tokens up to max(2048, --max-running))")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-running", f.batcher.max_running, "Sequences in the running batch")->check(CLI::Range(1, 1 << 16));
  app.add_option("--max-waiting", f.batcher.max_waiting, "Queued requests before 429 (a request's choices, n x prompts, count each)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--prefill-chunk", f.batcher.prefill_chunk, "Prompt tokens per sequence per step")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", f.threads, "CPU threads for the kernels (0: OMP_NUM_THREADS or all cores)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--http-threads", f.http_threads, "Generation requests served at once")->check(CLI::Range(1, 4096));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  // OpenBLAS's kernels for this CPU (engine/kernels/cpu/matmul.h): may re-execute.
  if (f.device == "cpu") engine::cpu::ReexecWithSuggestedBlasCoreType("serve", argc, argv);
  BlockTerminationSignals();
  InitLogging("serve");

  ServerOptions so;
  so.host = f.host;
  so.port = f.port < 0 ? 0 : f.port;
  so.http_threads = f.http_threads;
  if (const char* job = std::getenv("COHORT_JOB_ID"); job && *job && f.port < 0) {
    const char* port = std::getenv("MASTER_PORT");
    if (!port || std::atoi(port) <= 0 || std::atoi(port) > 65535) {
      return Report(Error(ErrorCode::kInvalidArgument, "in a job without --port, MASTER_PORT must name a port"));
    }
    so.port = std::atoi(port);
    if (!app.count("--host")) so.host = "0.0.0.0";
  }
  // The kernels run on the batcher's thread, which sets its own OpenMP thread count.
  f.batcher.threads = f.threads > 0 ? f.threads : 0;

  auto loaded = LoadServeModel(f.source);
  if (!loaded) return Report(loaded.error());
  so.model_name = f.name.empty() ? std::filesystem::path(f.source.path).filename().string() : f.name;
  if (so.model_name.empty()) so.model_name = std::filesystem::path(f.source.path).parent_path().filename().string();
  const auto budget = static_cast<size_t>(f.kv_cache_mb * 1048576.0);
  std::unique_ptr<InferenceModel> model;
  if (f.device == "cpu") {
    auto plan = PlanKvCache(loaded->config, f.kv_block_size, budget, sizeof(float));
    if (!plan) return Report(plan.error());
    auto m = CreateCpuInferenceModel(loaded->config, std::move(loaded->params), *plan, f.max_step_tokens);
    if (!m) return Report(m.error());
    model = std::move(*m);
  } else if (f.device == "cuda") {
    auto plan = PlanKvCache(loaded->config, f.kv_block_size, budget, 2);
    if (!plan) return Report(plan.error());
    auto m = CreateCudaInferenceModel(loaded->config, loaded->params, *plan, f.max_step_tokens);
    if (!m) return Report(m.error());
    model = std::move(*m);
  } else {
    return Report(Error(ErrorCode::kInvalidArgument, "--device: must be cpu or cuda, got '" + f.device + "'"));
  }
  const KvCachePlan cache = model->cache();
  auto server = InferenceServer::Create(std::move(loaded->tokenizer), std::move(model), f.batcher, so);
  if (!server) return Report(server.error());
  auto port = (*server)->Bind();
  if (!port) return Report(port.error());
  std::printf("serving %s (%s, %s, %d layers, context %d; KV cache %d blocks of %d = %.1f MiB; steps of %d "
              "tokens, %d while decoding) on http://%s:%d\n",
              so.model_name.c_str(), loaded->description.c_str(), f.device.c_str(), loaded->config.n_layer,
              loaded->config.max_seq_len, cache.num_blocks, cache.block_size, cache.bytes() / 1048576.0,
              (*server)->batcher().prefill_step_tokens(), (*server)->batcher().decode_step_tokens(),
              so.host.c_str(), *port);
  std::fflush(stdout);
  std::thread serving([&] { (*server)->Serve(); });
  const int sig = WaitForTerminationSignal();
  LOG_INFO("serve: signal {}: stopping", sig);
  (*server)->Stop();
  serving.join();
  return 0;
}

}  // namespace

ExternalCommand ServeCommand() {
  return ExternalCommand{"serve",
                         "Serve a GPT model over an OpenAI-compatible API (deploy, scale, ls, rm: "
                         "services on the cluster)",
                         &RunServe};
}

}  // namespace cohort::serve
