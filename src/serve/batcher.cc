#include "serve/batcher.h"

#include <omp.h>

#include <algorithm>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "serve/text_stream.h"

namespace cohort::serve {

namespace {

// The auto budget of a step that decodes (BatcherOptions::decode_step_tokens): the step
// budget before it was chosen per device, which bounds a decoding stream's step on a GPU.
constexpr int kAutoDecodeStepTokens = 2048;

double SecondsSince(SteadyTime t, SteadyTime now) {
  return std::chrono::duration<double>(now - t).count();
}

int64_t MonoMs(SteadyTime t) {
  return std::chrono::duration_cast<Millis>(t.time_since_epoch()).count();
}

}  // namespace

// ----- RequestChannel ----------------------------------------------------------------------

std::optional<TokenEvent> RequestChannel::Next(std::chrono::milliseconds timeout) {
  MutexLock l(mu_);
  cv_.WaitFor(mu_, timeout, [&] {
    mu_.AssertHeld();
    return !events_.empty() || cancelled_;
  });
  if (events_.empty()) return std::nullopt;
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestChannel::Cancel() {
  MutexLock l(mu_);
  cancelled_ = true;
  cv_.NotifyAll();
}

bool RequestChannel::cancelled() const {
  MutexLock l(mu_);
  return cancelled_;
}

void RequestChannel::Push(TokenEvent e) {
  MutexLock l(mu_);
  events_.push_back(std::move(e));
  cv_.NotifyAll();
}

// ----- Batcher -----------------------------------------------------------------------------

struct Batcher::Waiting {
  GenerationRequest request;
  std::shared_ptr<RequestChannel> channel;
  SteadyTime arrived;
  int blocks_needed = 0;
  // What it adds to queued_tokens_ while it waits: its prompt and max_tokens.
  int64_t queued_tokens() const { return static_cast<int64_t>(request.tokens.size()) + request.max_tokens; }
};

struct Batcher::Sequence {
  GenerationRequest request;
  std::shared_ptr<RequestChannel> channel;
  std::vector<int32_t> tokens;  // the prompt, resumed tokens, then what this request generated
  int computed = 0;             // positions whose keys and values are in the cache
  int generated = 0;            // tokens generated here (after the resumed ones)
  std::vector<int> blocks;
  TextStream text;
  SteadyTime arrived, last_token;

  Sequence(Waiting&& w, const engine::Tokenizer* tokenizer)
      : request(std::move(w.request)),
        channel(std::move(w.channel)),
        tokens(request.tokens),
        text(tokenizer, request.stop),
        arrived(w.arrived) {
    // Replay the tokens another replica already sent: the text they released went out.
    const size_t first = request.tokens.size() - static_cast<size_t>(request.resumed);
    for (size_t i = first; i < request.tokens.size(); ++i) text.Push(request.tokens[i]);
  }
  int pending() const { return static_cast<int>(tokens.size()) - computed; }
};

Batcher::Batcher(std::unique_ptr<InferenceModel> model, const engine::Tokenizer* tokenizer,
                 BatcherOptions options, ServeMetrics* metrics)
    : model_(std::move(model)),
      config_(model_->config()),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      blocks_(model_->cache().num_blocks) {}

Result<std::unique_ptr<Batcher>> Batcher::Start(std::unique_ptr<InferenceModel> model,
                                                const engine::Tokenizer* tokenizer,
                                                BatcherOptions options, ServeMetrics* metrics) {
  if (options.max_running < 1 || options.max_running > model->max_step_tokens()) {
    return FieldError("--max-running", "must be between 1 and --max-step-tokens ({}), got {}",
                      model->max_step_tokens(), options.max_running);
  }
  if (options.max_waiting < 1) {
    // Every request enters the queue first (the step thread admits it): with no room
    // there, every request would be refused as overloaded, however idle the replica.
    return FieldError("--max-waiting", "must be at least 1 (every request waits in the queue until the "
                      "batch takes it), got {}", options.max_waiting);
  }
  if (options.threads < 0) return FieldError("--threads", "must be >= 0, got {}", options.threads);
  if (options.prefill_chunk < 1) {
    return FieldError("--prefill-chunk", "must be >= 1, got {}", options.prefill_chunk);
  }
  const int step_tokens = model->max_step_tokens();
  int decode_tokens = options.decode_step_tokens;
  if (decode_tokens == 0) {
    decode_tokens = std::min(step_tokens, std::max(kAutoDecodeStepTokens, options.max_running));
  } else if (decode_tokens < options.max_running || decode_tokens > step_tokens) {
    return FieldError("--decode-step-tokens",
                      "must be 0 (auto) or between --max-running ({}: every running sequence decodes at "
                      "every step) and --max-step-tokens ({}), got {}",
                      options.max_running, step_tokens, decode_tokens);
  }
  std::unique_ptr<Batcher> b(new Batcher(std::move(model), tokenizer, options, metrics));
  b->decode_step_tokens_ = decode_tokens;
  {
    MutexLock l(b->mu_);
    b->load_.kv_blocks_total = b->blocks_.total();
  }
  b->thread_ = std::thread([raw = b.get()] { raw->Loop(); });
  return b;
}

Batcher::~Batcher() { Stop(); }

Result<std::shared_ptr<RequestChannel>> Batcher::Submit(GenerationRequest request,
                                                        std::shared_ptr<RequestChannel> share) {
  const int n = static_cast<int>(request.tokens.size());
  const int ctx = config_.max_seq_len;
  const std::string& prompt = request.prompt_field;
  if (n == 0) return FieldError(prompt, "the prompt is empty");
  if (request.resumed < 0 || request.resumed > n) {
    return FieldError("resumed", "must be between 0 and the {} tokens given, got {}", n, request.resumed);
  }
  for (int32_t t : request.tokens) {
    if (t < 0 || t >= config_.vocab_size) {
      return FieldError(prompt, "token id {} is outside [0, vocab_size={})", t, config_.vocab_size);
    }
  }
  if (request.echo && request.resumed > 0) {
    return FieldError("echo", "an echoed prompt cannot be resumed (cohort_resume)");
  }
  // An echo of the prompt alone (max_tokens 0) generates nothing: it may fill the context.
  const bool prompt_only = request.echo && request.max_tokens == 0 && !request.max_tokens_default;
  if (n > ctx || (n == ctx && !prompt_only)) {
    return FieldError(prompt, "the prompt has {} tokens{}; this model's context is {} tokens, "
                      "leaving no room to generate", n,
                      prompt == "messages" ? " (the messages in the chat template)" : "", ctx);
  }
  if (request.max_tokens_default) request.max_tokens = std::min(request.max_tokens, ctx - n);
  const std::string& max_field = request.max_tokens_field;
  if (request.max_tokens < (prompt_only ? 0 : 1)) {
    return FieldError(max_field, "must be >= 1 (0 only with echo: true), got {}", request.max_tokens);
  }
  if (n + request.max_tokens > ctx) {
    return FieldError(max_field, "the prompt ({} tokens) plus {} ({}) is {} tokens, more "
                      "than this model's context of {} tokens", n, max_field, request.max_tokens,
                      n + request.max_tokens, ctx);
  }
  auto w = std::make_unique<Waiting>();
  w->blocks_needed = BlocksFor(n + request.max_tokens, model_->cache().block_size);
  if (w->blocks_needed > blocks_.total()) {
    return FieldError(max_field, "the prompt and {} need {} KV-cache blocks; this "
                      "replica's cache holds {}", max_field, w->blocks_needed, blocks_.total());
  }
  if (share) {
    w->channel = std::move(share);
  } else {
    w->channel = std::make_shared<RequestChannel>();
    w->channel->prompt_tokens = n - request.resumed;
  }
  w->arrived = SteadyClock::now();
  w->request = std::move(request);
  const int64_t tokens = w->queued_tokens();
  auto channel = w->channel;
  MutexLock l(mu_);
  if (stopping_) return MakeError(ErrorCode::kUnavailable, "the server is stopping");
  DropCancelledWaiting();
  if (static_cast<int>(waiting_.size()) >= options_.max_waiting) {
    return Errorf(ErrorCode::kResourceExhausted,
                  "overloaded: {} requests are waiting and {} running; retry later",
                  waiting_.size(), load_.running);
  }
  waiting_.push_back(std::move(w));
  queued_tokens_ += tokens;
  cv_.NotifyAll();
  return channel;
}

LoadReport Batcher::Load() const {
  MutexLock l(mu_);
  LoadReport r = load_;
  r.waiting = static_cast<int>(waiting_.size());
  r.queued_tokens = queued_tokens_;
  return r;
}

void Batcher::Stop() {
  {
    MutexLock l(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

// Requests cancelled while queued (their clients hung up) leave the queue wherever they
// are in it: left until they reached its head with room in the batch, they held places
// under max_waiting (new requests got 429) and counted in the load the gateway balances on.
void Batcher::DropCancelledWaiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const Waiting& w = **it;
    if (!w.channel->cancelled()) {
      ++it;
      continue;
    }
    queued_tokens_ -= w.queued_tokens();
    if (metrics_ && w.request.observed) metrics_->CountRequest("cancelled");
    it = waiting_.erase(it);
  }
}

void Batcher::Admit() {
  MutexLock l(mu_);
  DropCancelledWaiting();
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_running) {
    Waiting& w = *waiting_.front();
    std::vector<int> blocks = blocks_.Allocate(w.blocks_needed);
    if (blocks.empty()) break;  // first come, first served: the head of the queue waits
    queued_tokens_ -= w.queued_tokens();
    auto seq = std::make_unique<Sequence>(std::move(w), tokenizer_);
    seq->blocks = std::move(blocks);
    waiting_.pop_front();
    running_.push_back(std::move(seq));
  }
}

void Batcher::Finish(Sequence& seq, TokenEvent last) {
  const SteadyTime now = SteadyClock::now();
  if (metrics_ && seq.request.observed) {
    metrics_->ObserveRequestLatency(SecondsSince(seq.arrived, now));
    metrics_->CountRequest(last.finish_reason);
  }
  last.choice = seq.request.choice;
  seq.channel->Push(std::move(last));
  blocks_.Free(seq.blocks);
  seq.blocks.clear();
}

void Batcher::RunStep() {
  // Cancelled sequences leave first.
  std::erase_if(running_, [&](const std::unique_ptr<Sequence>& s) {
    if (!s->channel->cancelled()) return false;
    blocks_.Free(s->blocks);
    if (metrics_ && s->request.observed) metrics_->CountRequest("cancelled");
    return true;
  });
  if (running_.empty()) return;

  // Decoders (one pending token) first, then prompts in chunks, within the token budget:
  // the smaller one once a sequence is decoding, so that its next token never waits for a
  // whole burst of prompts.
  std::vector<Sequence*> order;
  bool decoding = false;
  for (auto& s : running_) {
    if (s->pending() == 1) order.push_back(s.get());
    decoding = decoding || s->generated > 0;
  }
  for (auto& s : running_) {
    if (s->pending() > 1) order.push_back(s.get());
  }
  int budget = decoding ? decode_step_tokens_ : model_->max_step_tokens();
  std::vector<StepSequence> step;
  std::vector<Sequence*> in_step;
  for (Sequence* s : order) {
    if (budget == 0) break;
    const int take = std::min({s->pending(), options_.prefill_chunk, budget});
    StepSequence q;
    q.tokens = std::span<const int32_t>(s->tokens.data() + s->computed, static_cast<size_t>(take));
    q.start = s->computed;
    q.blocks = s->blocks;
    q.want_logits = take == s->pending();
    // An echoed prompt's log-probabilities: every row of its prefill.
    q.all_logits = s->request.echo && s->request.top_logprobs >= 0 &&
                   s->computed < static_cast<int>(s->request.tokens.size());
    step.push_back(q);
    in_step.push_back(s);
    budget -= take;
  }
  std::vector<float>& logits = logits_;
  Result<void> ran = model_->Step(step, logits);
  ++steps_;
  const SteadyTime now = SteadyClock::now();
  if (!ran) {
    LOG_ERROR("serve: model step failed: {}", ran.error().message);
    for (Sequence* s : in_step) {
      TokenEvent e;
      e.finish_reason = "error";
      e.error = ran.error().message;
      Finish(*s, std::move(e));
    }
    std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return s->blocks.empty(); });
    return;
  }
  const size_t V = static_cast<size_t>(config_.vocab_size);
  size_t li = 0;
  // This step's tokens are counted before any of them goes out: a client that reads
  // /metrics once its reply is complete finds its tokens there (they were counted after
  // the last event was pushed, and such a read could come first).
  int64_t produced = 0;
  for (size_t i = 0; i < in_step.size(); ++i) {
    produced += step[i].want_logits && in_step[i]->request.max_tokens > 0 && in_step[i]->request.observed;
  }
  if (metrics_ && produced > 0) metrics_->CountOutputTokens(produced, MonoMs(now));
  std::vector<float> adjusted;  // a penalized or biased sequence's logits
  for (size_t i = 0; i < in_step.size(); ++i) {
    Sequence& s = *in_step[i];
    const int take = static_cast<int>(step[i].tokens.size());
    if (s.request.echo && step[i].start < static_cast<int>(s.request.tokens.size())) {
      EchoPrompt(s, step[i].start, take, step[i].all_logits ? logits.data() + li * V : nullptr);
    }
    s.computed += take;
    li += step[i].all_logits ? static_cast<size_t>(take) : step[i].want_logits ? 1 : 0;
    if (!step[i].want_logits) continue;
    std::span<const float> row(logits.data() + (li - 1) * V, V);
    if (s.request.max_tokens == 0) {  // an echo of the prompt alone: it is all there
      TokenEvent e;
      e.finish_reason = "length";
      Finish(s, std::move(e));
      continue;
    }
    const int64_t index = s.request.resumed + s.generated;
    TokenEvent e;
    if (s.request.sampling.adjusted()) {
      // On a copy: log-probabilities stay the model's own. The generated tokens include
      // the resumed ones, so a moved stream continues with the same penalties.
      adjusted.assign(row.begin(), row.end());
      const size_t prompt = s.request.tokens.size() - static_cast<size_t>(s.request.resumed);
      ApplyAdjustments(adjusted, std::span<const int32_t>(s.tokens).subspan(prompt), s.request.sampling);
      e.token = SampleToken(adjusted, s.request.sampling, index);
    } else {
      e.token = SampleToken(row, s.request.sampling, index);
    }
    if (s.request.top_logprobs >= 0) {
      e.logprob = TokenLogprobOf(row, e.token);
      e.top = TopLogprobs(row, s.request.top_logprobs);
    }
    s.tokens.push_back(e.token);
    ++s.generated;
    if (s.request.observed) {
      if (metrics_ && s.generated == 1) metrics_->ObserveTimeToFirstToken(SecondsSince(s.arrived, now));
      else if (metrics_) metrics_->ObserveInterTokenLatency(SecondsSince(s.last_token, now));
    }
    s.last_token = now;
    if (s.request.stop_at_eot && e.token == tokenizer_->eot_token()) {
      e.finish_reason = "stop";
      e.text = s.text.Flush();
    } else {
      e.text = s.text.Push(e.token);
      if (s.text.stopped()) {
        e.finish_reason = "stop";
      } else if (s.generated >= s.request.max_tokens ||
                 static_cast<int>(s.tokens.size()) >= config_.max_seq_len) {
        e.finish_reason = "length";
        e.text += s.text.Flush();
      }
    }
    if (e.finish_reason.empty()) {
      e.choice = s.request.choice;
      s.channel->Push(std::move(e));
    } else {
      Finish(s, std::move(e));
    }
  }
  std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return s->blocks.empty(); });
}

void Batcher::EchoPrompt(Sequence& s, int start, int take, const float* rows) {
  const size_t V = static_cast<size_t>(config_.vocab_size);
  const int prompt = static_cast<int>(s.request.tokens.size());
  auto push = [&](int p, const float* logits_before) {
    TokenEvent e;
    e.token = s.request.tokens[static_cast<size_t>(p)];
    e.prompt = true;
    e.choice = s.request.choice;
    if (!logits_before) {
      e.has_logprob = false;  // the first token; or none were asked
    } else {
      std::span<const float> row(logits_before, V);
      e.logprob = TokenLogprobOf(row, e.token);
      e.top = TopLogprobs(row, s.request.top_logprobs);
    }
    s.channel->Push(std::move(e));
  };
  const bool want = s.request.top_logprobs >= 0;
  if (start == 0) push(0, nullptr);
  // Row r holds the logits after position start + r: the distribution of the next token.
  for (int p = start + 1; p <= start + take && p < prompt; ++p) {
    push(p, want && rows ? rows + static_cast<size_t>(p - 1 - start) * V : nullptr);
  }
}

void Batcher::PublishLoad() {
  LoadReport r;
  r.running = static_cast<int>(running_.size());
  for (const auto& s : running_) {
    r.inflight_tokens += std::max(0, s->pending() - 1) + (s->request.max_tokens - s->generated);
  }
  r.kv_blocks_used = blocks_.used();
  r.kv_blocks_total = blocks_.total();
  r.steps = steps_;
  MutexLock l(mu_);
  load_ = r;
}

void Batcher::Loop() {
  if (options_.threads > 0) omp_set_num_threads(options_.threads);
  for (;;) {
    {
      MutexLock l(mu_);
      cv_.WaitFor(mu_, std::chrono::milliseconds(100), [&] {
        mu_.AssertHeld();
        return stopping_ || !waiting_.empty() || !running_.empty();
      });
      if (stopping_) break;
    }
    Admit();
    PublishLoad();
    RunStep();
    PublishLoad();
  }
  // Stopping: everything still here fails.
  std::deque<std::unique_ptr<Waiting>> left;
  {
    MutexLock l(mu_);
    left.swap(waiting_);
    queued_tokens_ = 0;
  }
  for (auto& w : left) {
    TokenEvent e;
    e.finish_reason = "error";
    e.error = "the server is stopping";
    e.choice = w->request.choice;
    w->channel->Push(std::move(e));
  }
  for (auto& s : running_) {
    TokenEvent e;
    e.finish_reason = "error";
    e.error = "the server is stopping";
    Finish(*s, std::move(e));
  }
  running_.clear();
}

}  // namespace cohort::serve
