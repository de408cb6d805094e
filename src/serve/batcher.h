// Batcher: continuous batching over one InferenceModel (Orca's iteration-level scheduling,
// vLLM's block reservation).
//
// Requests wait in a bounded FIFO. At every step the batcher's thread admits waiting
// requests while the cache has the blocks for their prompt and max_tokens (reserved whole
// at admission, so a running sequence never waits for memory), then runs one model step
// over every running sequence: one token for each decoding sequence first, then the
// prompts still being read in chunks of at most prefill_chunk tokens, within the step's
// token budget. The budget is the model's max_step_tokens while no sequence is decoding
// (a burst of prompts prefills in as few steps as the model allows: one on a GPU for 64
// prompts of 128 tokens), and decode_step_tokens once one is (chunked prefill: a long
// prompt or a burst of new ones never stalls the decoders for more than that many tokens'
// step). Sequences join and leave the batch at every step. A full queue is refused
// (kResourceExhausted, HTTP 429); a request that could never fit is kInvalidArgument
// naming the field.
//
// Each request gets a RequestChannel: the batcher pushes one TokenEvent per generated
// token (its id, the text it released, its log-probabilities), the last one carrying the
// finish reason. The HTTP handler pops them (Next) and may Cancel (client gone), which
// frees the sequence's blocks at the next step.
//
// Threads: Submit, Load and Stop from any thread; the step loop runs on the batcher's own
// thread, the only one that touches the model, the allocator and the sequences.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "engine/data/tokenizer.h"
#include "serve/inference_model.h"
#include "serve/sampling.h"
#include "serve/serve_metrics.h"

namespace cohort::serve {

struct GenerationRequest {
  // The prompt's tokens; for a request taking over a generation (failover), followed by
  // the `resumed` tokens already generated and sent.
  std::vector<int32_t> tokens;
  int resumed = 0;
  int max_tokens = 16;  // new tokens to generate after all of `tokens` (0 only with echo)
  // max_tokens is the API's default, not the client's: Submit cuts it to the context the
  // prompt leaves instead of refusing the request (a client that never sent max_tokens
  // cannot be wrong about it; OpenAI and vLLM do the same).
  bool max_tokens_default = false;
  // The request field errors about the prompt name: "messages" for a chat, whose prompt
  // the client never saw.
  std::string prompt_field = "prompt";
  // The field max_tokens came in: "max_completion_tokens" for a chat that sent that one.
  std::string max_tokens_field = "max_tokens";
  SamplingParams sampling;
  std::vector<std::string> stop;
  int top_logprobs = -1;  // -1: no log-probabilities; otherwise also the top N (0..20)
  // The reply starts with the prompt (the completions API's echo; not with `resumed`): the
  // channel gets an event per prompt token, in order, before the generated ones, each with
  // `prompt` set and, when log-probabilities are asked, the model's log-probability of the
  // token after the ones before it (its top alternatives too), computed in the prefill;
  // the first token has none. max_tokens may then be 0: only the prompt, the last event
  // finishing with "length" and no token (how lm-evaluation-harness scores text).
  bool echo = false;
  bool stop_at_eot = true;
  // Which choice of its API request this generation is (n > 1, several prompts): its
  // events carry it, so that the generations of one request can share a channel.
  int choice = 0;
  // Counted in the replica's metrics (TTFT, inter-token latency, tokens/s, requests).
  // False for the gateway's health canaries (server.h), which are not traffic: an idle
  // replica would otherwise show their tokens per second and their time to first token.
  bool observed = true;
};

struct TokenEvent {
  int32_t token = -1;        // -1 for an event without a token (an error, the end of an echo)
  bool prompt = false;       // an echoed prompt token (GenerationRequest::echo), not generated
  bool has_logprob = true;   // false for the first prompt token: nothing came before it
  std::string text;          // text released with this token (may be empty)
  float logprob = 0;         // when log-probabilities were asked
  std::vector<TokenLogprob> top;
  std::string finish_reason;  // "" until the last event: "stop", "length" or "error"
  std::string error;          // finish_reason "error": what happened
  int choice = 0;             // the generation's GenerationRequest::choice
};

class RequestChannel {
 public:
  // Blocks until an event is there, the request is cancelled, or `timeout` passes
  // (nullopt then). Any thread (the handler's).
  std::optional<TokenEvent> Next(std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // The client went away: stop generating. Any thread.
  void Cancel() EXCLUDES(mu_);
  bool cancelled() const EXCLUDES(mu_);

  // The batcher's side.
  void Push(TokenEvent e) EXCLUDES(mu_);

  int prompt_tokens = 0;  // set before Submit returns

 private:
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<TokenEvent> events_ GUARDED_BY(mu_);
  bool cancelled_ GUARDED_BY(mu_) = false;
};

struct BatcherOptions {
  int max_running = 64;    // sequences in the batch at once
  int max_waiting = 256;   // queued requests before 429
  int prefill_chunk = 256;  // prompt tokens per sequence per step
  // Tokens of a step that decodes running sequences (their one token each included); 0:
  // auto, the model's max_step_tokens up to max(2048, max_running). At least max_running,
  // at most the model's max_step_tokens.
  int decode_step_tokens = 0;
  // OpenMP threads of the model's kernels (> 0), set on the step thread itself: an
  // OpenMP thread count belongs to the thread that sets it. 0: OpenMP's default.
  int threads = 0;
};

// What the replica reports to the gateway (GET /load) and to /metrics.
struct LoadReport {
  int running = 0;
  int waiting = 0;
  int64_t queued_tokens = 0;    // prompt + max_tokens of the waiting requests
  int64_t inflight_tokens = 0;  // prompt still to read + tokens still to generate, running
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  int64_t steps = 0;
};

class Batcher {
 public:
  // Starts the step thread. `tokenizer` must outlive the batcher.
  static Result<std::unique_ptr<Batcher>> Start(std::unique_ptr<InferenceModel> model,
                                                const engine::Tokenizer* tokenizer,
                                                BatcherOptions options, ServeMetrics* metrics);
  ~Batcher();

  // Queues a request. kInvalidArgument naming the field ("max_tokens", "prompt") when it
  // can never run here; kResourceExhausted when the queue is full; kUnavailable once
  // stopping. `share`: the channel of another generation of the same API request (n > 1,
  // several prompts), which this one's events join (told apart by their `choice`);
  // cancelling it cancels them all. nullptr: a channel of its own.
  Result<std::shared_ptr<RequestChannel>> Submit(GenerationRequest request,
                                                 std::shared_ptr<RequestChannel> share = nullptr)
      EXCLUDES(mu_);

  LoadReport Load() const EXCLUDES(mu_);
  // The token budgets of a step: without and with decoding sequences in it.
  int prefill_step_tokens() const { return model_->max_step_tokens(); }
  int decode_step_tokens() const { return decode_step_tokens_; }
  // Requests the queue holds (BatcherOptions::max_waiting).
  int max_waiting() const { return options_.max_waiting; }
  const engine::GptConfig& config() const { return config_; }
  const InferenceModel& model() const { return *model_; }

  // Fails every request still queued or running ("error": the server is stopping) and
  // joins the thread. Idempotent.
  void Stop() EXCLUDES(mu_);

 private:
  struct Waiting;
  struct Sequence;
  Batcher(std::unique_ptr<InferenceModel> model, const engine::Tokenizer* tokenizer,
          BatcherOptions options, ServeMetrics* metrics);
  void Loop() EXCLUDES(mu_);
  // One step over `running_` (the step thread only).
  void RunStep();
  void Admit() EXCLUDES(mu_);
  void DropCancelledWaiting() REQUIRES(mu_);
  // Copies the step thread's view of the batch into load_ for Load().
  void PublishLoad() EXCLUDES(mu_);
  void Finish(Sequence& seq, TokenEvent last);
  // The echo events of the prompt positions a prefill chunk [start, start + take) makes
  // known (GenerationRequest::echo); `rows`: the chunk's logits, one row per token, when
  // log-probabilities are asked (nullptr otherwise).
  void EchoPrompt(Sequence& seq, int start, int take, const float* rows);

  std::unique_ptr<InferenceModel> model_;
  const engine::GptConfig config_;
  const engine::Tokenizer* tokenizer_;
  const BatcherOptions options_;
  ServeMetrics* metrics_;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::unique_ptr<Waiting>> waiting_ GUARDED_BY(mu_);
  int64_t queued_tokens_ GUARDED_BY(mu_) = 0;
  LoadReport load_ GUARDED_BY(mu_);  // the step thread's part, published after each step
  bool stopping_ GUARDED_BY(mu_) = false;

  // The step thread's own.
  KvBlockAllocator blocks_;
  std::vector<std::unique_ptr<Sequence>> running_;
  int64_t steps_ = 0;
  int decode_step_tokens_ = 0;  // options_.decode_step_tokens resolved
  // The last step's logits, kept between steps: a fresh vector per step allocated and
  // zero-filled rows × vocab floats every step (13 MB at 64 sequences of GPT-2).
  std::vector<float> logits_;
  std::thread thread_;
};

}  // namespace cohort::serve
