// The inference path against the engine's own model and sampler: the block-cache forward
// equals GptModel::Forward, greedy serving equals engine::Generate, continuous batching
// equals serving one request at a time, and seeded sampling resumes exactly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <thread>

#include <filesystem>

#include "engine/checkpoint/gpt2_safetensors.h"
#include "engine/data/tokenizer.h"
#include "engine/trainer/sampling.h"
#include "serve/batcher.h"
#include "serve/cuda_model.h"
#include "serve/kv_cache.h"
#include "serve/model_loader.h"
#include "serve/text_stream.h"
#include "serve_test_util.h"

namespace cohort::serve {
namespace {

using testing::CpuModelOf;
using testing::GatedModel;
using testing::BiasedGreedy;
using testing::TinyModel;

std::vector<int32_t> Bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

// Drains a channel: the generated tokens, the text and the finish reason.
struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish;
  std::vector<float> logprobs;
};

// The batcher publishes its load after each step: waits (with a deadline) until `pred`.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

Outcome Drain(RequestChannel& ch) {
  Outcome o;
  for (;;) {
    auto e = ch.Next(std::chrono::seconds(60));
    if (!e) {
      ADD_FAILURE() << "no event within 60 s";
      return o;
    }
    if (e->token >= 0) o.tokens.push_back(e->token);
    o.text += e->text;
    o.logprobs.push_back(e->logprob);
    if (!e->finish_reason.empty()) {
      o.finish = e->finish_reason;
      if (!e->error.empty()) o.finish += ": " + e->error;
      return o;
    }
  }
}

TEST(KvCacheTest, PlansBlocksFromTheBudgetAndRefusesTooSmallOnes) {
  engine::GptConfig c;
  c.vocab_size = 256;
  c.max_seq_len = 64;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  // A block: 2 (k, v) * 2 layers * 16 positions * 32 * 4 bytes = 8 KiB.
  auto plan = PlanKvCache(c, 16, 100 * 8192 + 5, 4);
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_EQ(plan->bytes_per_block, 8192u);
  EXPECT_EQ(plan->num_blocks, 100);
  EXPECT_LE(plan->bytes(), 100u * 8192 + 5);
  auto small = PlanKvCache(c, 16, 3 * 8192, 4);
  ASSERT_FALSE(small.has_value());
  EXPECT_EQ(small.error().field, "--kv-cache-mb");
  EXPECT_NE(small.error().message.find("needs 4"), std::string::npos) << small.error().message;
  // What to give instead, and the budget as given (not rounded to "0.0 MiB").
  EXPECT_NE(small.error().message.find("give --kv-cache-mb 0.032 or more"), std::string::npos)
      << small.error().message;
  EXPECT_NE(small.error().message.find("0.0234375 MiB holds 3 blocks"), std::string::npos) << small.error().message;
  EXPECT_FALSE(PlanKvCache(c, 0, 1 << 20, 4).has_value());

  KvBlockAllocator a(5);
  auto x = a.Allocate(3);
  EXPECT_EQ(x.size(), 3u);
  EXPECT_TRUE(a.Allocate(3).empty());
  EXPECT_EQ(a.free(), 2);
  a.Free(x);
  EXPECT_EQ(a.used(), 0);
  auto y = a.Allocate(5);
  std::sort(y.begin(), y.end());
  EXPECT_EQ(y, (std::vector<int>{0, 1, 2, 3, 4}));
}

// The cache path, fed a prompt in uneven chunks and then token by token, gives the logits
// GptModel::Forward computes over the whole window at every position.
TEST(CpuInferenceModelTest, ChunkedPrefillAndDecodeMatchTheFullForward) {
  engine::GptModel ref = TinyModel();
  auto model = CpuModelOf(ref, /*blocks=*/16, /*block_size=*/8);
  const std::vector<int32_t> tokens = Bytes("The quick brown fox jumps over the lazy dog, twice over.");
  const int T = static_cast<int>(tokens.size());
  ASSERT_TRUE(ref.Forward(tokens, {}, 1, T).has_value());
  const int V = ref.config().vocab_size, Vp = ref.config().padded_vocab_size();
  std::vector<int> blocks = {5, 2, 9, 0, 14, 7, 3, 11};  // scattered on purpose
  auto expect_row = [&](const std::vector<float>& got, int pos) {
    for (int v = 0; v < V; ++v) {
      ASSERT_NEAR(got[v], ref.logits()[static_cast<size_t>(pos) * Vp + v], 2e-3)
          << "position " << pos << " id " << v;
    }
  };
  int pos = 0;
  for (int chunk : {5, 11, 1, 17}) {
    StepSequence q;
    q.tokens = std::span<const int32_t>(tokens.data() + pos, chunk);
    q.start = pos;
    q.blocks = blocks;
    q.want_logits = true;
    std::vector<float> logits;
    ASSERT_TRUE(model->Step(std::span<const StepSequence>(&q, 1), logits).has_value());
    ASSERT_EQ(logits.size(), static_cast<size_t>(V));
    pos += chunk;
    expect_row(logits, pos - 1);
  }
  for (; pos < T; ++pos) {
    StepSequence q;
    q.tokens = std::span<const int32_t>(tokens.data() + pos, 1);
    q.start = pos;
    q.blocks = blocks;
    q.want_logits = true;
    std::vector<float> logits;
    ASSERT_TRUE(model->Step(std::span<const StepSequence>(&q, 1), logits).has_value());
    expect_row(logits, pos);
  }
}

TEST(CpuInferenceModelTest, RefusesBadStepsNamingTheField) {
  engine::GptModel ref = TinyModel();
  auto model = CpuModelOf(ref, 4, 8, 16);
  std::vector<int32_t> t(10, 65);
  std::vector<int> blocks = {0};
  StepSequence q{t, 0, blocks, true};
  std::vector<float> logits;
  auto r = model->Step(std::span<const StepSequence>(&q, 1), logits);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "blocks");
  blocks = {0, 9};
  q.blocks = blocks;
  r = model->Step(std::span<const StepSequence>(&q, 1), logits);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "blocks");
  std::vector<int32_t> many(17, 65);
  blocks = {0, 1, 2};
  q.blocks = blocks;
  q.tokens = many;
  r = model->Step(std::span<const StepSequence>(&q, 1), logits);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "tokens");
  t[3] = 300;
  q.tokens = t;
  r = model->Step(std::span<const StepSequence>(&q, 1), logits);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("300"), std::string::npos);
}

GenerationRequest Greedy(const std::string& prompt, int max_tokens) {
  GenerationRequest r;
  r.tokens = Bytes(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

// The server's greedy output is the engine's own sampler's on the same weights and prompt.
TEST(BatcherTest, GreedyOutputEqualsTheEnginesSampler) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  auto batcher = Batcher::Start(CpuModelOf(ref), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(batcher.has_value());
  for (const std::string prompt : {"Hello", "Once upon a time, ", "x"}) {
    engine::SampleOptions opt;
    opt.tokens = 40;
    opt.temperature = 0;
    engine::Rng rng(1);
    const std::vector<int32_t> p = Bytes(prompt);
    auto expected = engine::Generate(ref, p, opt, rng);
    ASSERT_TRUE(expected.has_value());
    auto ch = (*batcher)->Submit(Greedy(prompt, 40));
    ASSERT_TRUE(ch.has_value()) << ch.error().message;
    Outcome got = Drain(**ch);
    EXPECT_EQ(got.tokens, *expected) << "prompt '" << prompt << "'";
    EXPECT_EQ(got.finish, "length");
    EXPECT_EQ(got.text, tokenizer->Decode(*expected));
  }
}

// Requests served together, joining and leaving the batch at different steps with their
// prompts read in chunks, produce the tokens they produce alone.
TEST(BatcherTest, ContinuousBatchingGivesTheTokensOfOneAtATime) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  std::vector<GenerationRequest> reqs;
  const char* prompts[] = {"a", "Where is the", "0123456789012345678901234567890123456789", "zz",
                           "The rain in Spain", "?", "lorem ipsum dolor sit amet", "GPU"};
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r = Greedy(prompts[i], 5 + 7 * i % 30);
    if (i % 2 == 1) {  // seeded sampling too
      r.sampling.temperature = 0.9;
      r.sampling.top_k = 20;
      r.sampling.top_p = 0.9;
      r.sampling.seed = 1000 + i;
    }
    reqs.push_back(r);
  }
  std::vector<Outcome> alone;
  {
    auto b = Batcher::Start(CpuModelOf(ref), tokenizer.get(), {}, nullptr);
    ASSERT_TRUE(b.has_value());
    for (const auto& r : reqs) alone.push_back(Drain(**(*b)->Submit(r)));
  }
  BatcherOptions opt;
  opt.prefill_chunk = 6;  // long prompts take several steps, beside the decoders
  opt.max_running = 8;
  auto gated = std::make_unique<GatedModel>(CpuModelOf(ref, 64, 8, 24));
  GatedModel* gate = gated.get();
  auto b = Batcher::Start(std::move(gated), tokenizer.get(), opt, nullptr);
  ASSERT_TRUE(b.has_value());
  std::vector<std::shared_ptr<RequestChannel>> chans;
  // Half arrive together; the others join one step apart while the first half decode.
  for (int i = 0; i < 4; ++i) chans.push_back(*(*b)->Submit(reqs[i]));
  for (int i = 4; i < 8; ++i) {
    ASSERT_TRUE(gate->WaitBlocked());
    gate->Release(1 + i % 3);
    chans.push_back(*(*b)->Submit(reqs[i]));
  }
  gate->Open();
  for (int i = 0; i < 8; ++i) {
    Outcome o = Drain(*chans[i]);
    EXPECT_EQ(o.tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(o.text, alone[i].text) << "request " << i;
    EXPECT_EQ(o.finish, alone[i].finish);
  }
  EXPECT_TRUE(Eventually([&] { return (*b)->Load().kv_blocks_used == 0; }));
}

// The step budget: a burst of prompts with nothing decoding prefills in one step of up to
// max_step_tokens; once sequences decode, every step carries all of them and at most
// decode_step_tokens in all, so prompts arriving then never stall them; the tokens are
// those of the requests served alone.
TEST(BatcherTest, PromptsPrefillInOneLargeStepAndNeverStallDecoders) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  auto prompt = [](int i, int n) {
    std::string s;
    for (int k = 0; k < n; ++k) s += static_cast<char>('a' + (k * 7 + i * 3) % 26);
    return s;
  };
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(Greedy(prompt(i, 40), 12));  // the burst: 160 tokens
  for (int i = 4; i < 6; ++i) reqs.push_back(Greedy(prompt(i, 50), 6));   // joining while they decode
  std::vector<Outcome> alone;
  {
    auto b = Batcher::Start(CpuModelOf(ref), tokenizer.get(), {}, nullptr);
    ASSERT_TRUE(b.has_value());
    for (const auto& r : reqs) alone.push_back(Drain(**(*b)->Submit(r)));
  }
  BatcherOptions opt;
  opt.max_running = 8;
  opt.prefill_chunk = 64;
  opt.decode_step_tokens = 24;
  auto gated = std::make_unique<GatedModel>(CpuModelOf(ref, 64, 8, 256));
  GatedModel* gate = gated.get();
  auto b = Batcher::Start(std::move(gated), tokenizer.get(), opt, nullptr);
  ASSERT_TRUE(b.has_value()) << b.error().message;
  EXPECT_EQ((*b)->prefill_step_tokens(), 256);
  EXPECT_EQ((*b)->decode_step_tokens(), 24);
  // A one-token request's step held at the gate while the burst queues: the next step
  // admits all four, with nothing decoding (the primer is done).
  auto primer = *(*b)->Submit(Greedy("p", 1));
  ASSERT_TRUE(gate->WaitBlocked());
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (int i = 0; i < 4; ++i) chans.push_back(*(*b)->Submit(reqs[i]));
  gate->Release(1);
  ASSERT_TRUE(gate->WaitBlocked());
  gate->Release(2);  // the burst's step and the first decode step
  ASSERT_TRUE(gate->WaitBlocked());
  for (int i = 4; i < 6; ++i) chans.push_back(*(*b)->Submit(reqs[i]));
  gate->Open();
  for (int i = 0; i < 6; ++i) {
    Outcome o = Drain(*chans[i]);
    EXPECT_EQ(o.tokens, alone[i].tokens) << "request " << i;
  }
  EXPECT_EQ(Drain(*primer).finish, "length");
  auto shapes = gate->shapes();
  ASSERT_GE(shapes.size(), 13u);
  shapes.erase(shapes.begin());  // the primer's
  // The burst's step: the four prompts whole (prefill_chunk 64 >= 40), 160 tokens.
  ASSERT_EQ(shapes[0].size(), 4u);
  for (const auto& [start, n] : shapes[0]) EXPECT_EQ(std::make_pair(start, n), std::make_pair(0, 40));
  // The next 11 steps decode the burst's other 11 tokens: each holds the four at position
  // 39 + s and at most 24 tokens, the late prompts (admitted from step 3) taking the rest.
  int late_prefill = 0;
  for (size_t s = 1; s < 12; ++s) {
    int total = 0, burst = 0;
    for (const auto& [start, n] : shapes[s]) {
      total += n;
      if (n == 1 && start == 39 + static_cast<int>(s)) ++burst;
      else if (n > 1) late_prefill += n;
    }
    EXPECT_EQ(burst, 4) << "step " << s;
    EXPECT_LE(total, 24) << "step " << s;
  }
  EXPECT_EQ(late_prefill, 100);  // both late prompts, read beside the decoders
  EXPECT_TRUE(Eventually([&] { return (*b)->Load().kv_blocks_used == 0; }));
}

// The step budgets are checked: a decode budget below --max-running (some running sequence
// would skip steps) or above --max-step-tokens is refused naming the flag.
TEST(BatcherTest, RefusesDecodeStepBudgetsOutsideTheirRange) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  for (int bad : {7, 257, -1}) {
    BatcherOptions opt;
    opt.max_running = 8;
    opt.decode_step_tokens = bad;
    auto b = Batcher::Start(CpuModelOf(ref, 64, 8, 256), tokenizer.get(), opt, nullptr);
    ASSERT_FALSE(b.has_value()) << bad;
    EXPECT_EQ(b.error().field, "--decode-step-tokens");
    EXPECT_NE(b.error().message.find(std::to_string(bad)), std::string::npos) << b.error().message;
  }
  // Auto: the model's budget up to max(2048, max_running).
  auto b = Batcher::Start(CpuModelOf(ref, 64, 8, 256), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)->decode_step_tokens(), 256);
  // The CPU backend's auto step budget.
  KvCachePlan plan;
  plan.num_blocks = 8;
  auto p = ref.params();
  auto m = CreateCpuInferenceModel(ref.config(), std::vector<float>(p.begin(), p.end()), plan, kAutoStepTokens);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ((*m)->max_step_tokens(), kCpuAutoStepTokens);
  auto neg = CreateCpuInferenceModel(ref.config(), std::vector<float>(p.begin(), p.end()), plan, -3);
  ASSERT_FALSE(neg.has_value());
  EXPECT_EQ(neg.error().field, "--max-step-tokens");
}

// presence_penalty and frequency_penalty (OpenAI's, refused before): each step's logits
// lose frequency x (times generated) + presence x (generated at all), the prompt not
// counting; the oracle recomputes the whole sequence each step and penalizes by hand.
TEST(BatcherTest, PenaltiesLowerTheLogitsOfGeneratedTokens) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  auto batcher = Batcher::Start(CpuModelOf(ref), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(batcher.has_value());
  auto oracle_model = CpuModelOf(ref);
  const std::vector<int> blocks = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const std::vector<int32_t> prompt = Bytes("aaaa");
  for (const auto& [presence, frequency] : {std::pair{1.5, 0.0}, std::pair{0.0, 2.0}, std::pair{0.7, 0.4}}) {
    std::vector<int32_t> seq = prompt, expected;
    for (int i = 0; i < 30; ++i) {
      StepSequence q;
      q.tokens = seq;
      q.start = 0;
      q.blocks = blocks;
      q.want_logits = true;
      std::vector<float> logits;
      ASSERT_TRUE(oracle_model->Step(std::span<const StepSequence>(&q, 1), logits).has_value());
      std::map<int32_t, int> counts;
      for (int32_t t : expected) counts[t] += 1;
      for (const auto& [t, c] : counts) logits[t] -= static_cast<float>(frequency * c + presence);
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      expected.push_back(next);
      seq.push_back(next);
    }
    GenerationRequest r = Greedy("aaaa", 30);
    r.sampling.presence_penalty = presence;
    r.sampling.frequency_penalty = frequency;
    auto ch = (*batcher)->Submit(r);
    ASSERT_TRUE(ch.has_value()) << ch.error().message;
    EXPECT_EQ(Drain(**ch).tokens, expected) << presence << " " << frequency;
    auto plain = (*batcher)->Submit(Greedy("aaaa", 30));
    ASSERT_TRUE(plain.has_value());
    EXPECT_NE(Drain(**plain).tokens, expected) << "the penalties changed nothing: a weak test";
  }
}

// OpenAI's logit_bias (refused before): the bias is added to the logits before the choice,
// so greedy decoding follows the engine's own logits plus the bias at every step. A ban
// (-100) of the token greedy decoding takes first makes it take another; +100 on a token
// makes it the choice wherever the model's logits leave it within 100 of the best.
TEST(BatcherTest, LogitBiasShiftsTheEnginesLogitsBeforeTheChoice) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  auto batcher = Batcher::Start(CpuModelOf(ref), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(batcher.has_value());
  const std::vector<int32_t> prompt = Bytes("Hello");
  const std::vector<int32_t> plain = BiasedGreedy(ref, prompt, 20, {});
  ASSERT_EQ(plain.size(), 20u);
  const std::vector<std::vector<std::pair<int32_t, float>>> biases = {
      {{plain[0], -100.0f}},                    // ban the first greedy token
      {{plain[0], -100.0f}, {plain[1], -3.5f}},  // and lower another
      {{'z', 100.0f}},                          // force one
      {{'q', 0.5f}, {'e', -0.25f}},             // nudges
  };
  for (const auto& bias : biases) {
    const std::vector<int32_t> expected = BiasedGreedy(ref, prompt, 20, bias);
    GenerationRequest r = Greedy("Hello", 20);
    r.sampling.logit_bias = bias;
    std::sort(r.sampling.logit_bias.begin(), r.sampling.logit_bias.end());
    auto ch = (*batcher)->Submit(r);
    ASSERT_TRUE(ch.has_value()) << ch.error().message;
    EXPECT_EQ(Drain(**ch).tokens, expected) << "bias on " << bias[0].first << " of " << bias[0].second;
  }
  // The ban and the force changed the output as the engine's logits say they must.
  const std::vector<int32_t> banned = BiasedGreedy(ref, prompt, 20, biases[0]);
  EXPECT_NE(banned[0], plain[0]);
  const std::vector<int32_t> forced = BiasedGreedy(ref, prompt, 20, biases[2]);
  EXPECT_EQ(std::count(forced.begin(), forced.end(), 'z'), 20) << "+100 did not force the token";
}

// Sequences batched together each keep their own bias: two biased requests and a plain one
// in the same steps give what each gives alone (the engine's logits plus its own bias).
TEST(BatcherTest, BatchedRequestsKeepTheirOwnLogitBias) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  const std::vector<int32_t> prompt = Bytes("Hello");
  const std::vector<int32_t> plain = BiasedGreedy(ref, prompt, 16, {});
  const std::vector<std::vector<std::pair<int32_t, float>>> biases = {
      {{plain[0], -100.0f}}, {{'z', 100.0f}}, {}};
  auto gated = std::make_unique<GatedModel>(CpuModelOf(ref));
  GatedModel* gate = gated.get();
  auto b = Batcher::Start(std::move(gated), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(b.has_value());
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const auto& bias : biases) {
    GenerationRequest r = Greedy("Hello", 16);
    r.sampling.logit_bias = bias;
    auto ch = (*b)->Submit(r);
    ASSERT_TRUE(ch.has_value()) << ch.error().message;
    chans.push_back(*ch);
  }
  gate->Open();
  std::vector<std::vector<int32_t>> got;
  for (size_t i = 0; i < biases.size(); ++i) {
    got.push_back(Drain(*chans[i]).tokens);
    EXPECT_EQ(got[i], BiasedGreedy(ref, prompt, 16, biases[i])) << "request " << i;
  }
  EXPECT_NE(got[0], got[2]);
  EXPECT_NE(got[1], got[2]);
  size_t widest = 0;
  for (const auto& shape : gate->shapes()) widest = std::max(widest, shape.size());
  EXPECT_EQ(widest, biases.size()) << "the requests never shared a step: a weak test";
}

// --max-waiting 0 made a replica that answered every request "overloaded: 0 requests are
// waiting and 0 running; retry later", however idle: every request enters the queue first.
TEST(BatcherTest, RefusesAQueueThatHoldsNothing) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  BatcherOptions opt;
  opt.max_waiting = 0;
  auto b = Batcher::Start(CpuModelOf(ref), tokenizer.get(), opt, nullptr);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().field, "--max-waiting");
  EXPECT_NE(b.error().message.find("at least 1"), std::string::npos) << b.error().message;
  opt.max_waiting = 1;
  auto one = Batcher::Start(CpuModelOf(ref), tokenizer.get(), opt, nullptr);
  ASSERT_TRUE(one.has_value()) << one.error().message;
  auto r = (*one)->Submit(Greedy("abc", 2));
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(Drain(**r).finish, "length");
}

// The GPU's auto step budget (cuda_model.h): the cache's positions, at most 16384, and no
// more rows than an eighth of the free device memory holds activations for.
TEST(BatcherTest, CudaAutoStepBudgetFollowsTheCacheAndTheDeviceMemory) {
  engine::GptConfig c;
  c.n_embd = 768;
  c.max_seq_len = 1024;
  KvCachePlan plan;
  plan.block_size = 16;
  plan.num_blocks = 100;  // 1,600 positions
  EXPECT_EQ(AutoCudaStepTokens(c, plan, size_t{80} << 30), 1600);
  plan.num_blocks = 10000;  // 160,000 positions: the cap
  EXPECT_EQ(AutoCudaStepTokens(c, plan, size_t{80} << 30), 16384);
  // 64 MiB free: 8 MiB for rows of 15 · 768 · 2 + 8 + (5 + 64) · 4 = 23,324 bytes.
  EXPECT_EQ(AutoCudaStepTokens(c, plan, size_t{64} << 20), (size_t{8} << 20) / 23324);
  EXPECT_EQ(AutoCudaStepTokens(c, plan, 0), 1);
}

// A request re-submitted with the first k generated tokens appended ("resumed") continues
// with exactly the tokens and text the uninterrupted request produced: greedy and seeded.
TEST(BatcherTest, ResumedRequestsContinueExactly) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  auto b = Batcher::Start(CpuModelOf(ref), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(b.has_value());
  for (double temperature : {0.0, 1.0}) {
    GenerationRequest r = Greedy("Resume me: ", 30);
    r.sampling.temperature = temperature;
    r.sampling.seed = 42;
    r.stop = {"zq"};
    Outcome full = Drain(**(*b)->Submit(r));
    ASSERT_GT(full.tokens.size(), 10u);
    for (size_t k : {size_t{1}, size_t{7}, full.tokens.size() - 1}) {
      GenerationRequest again = r;
      again.tokens.insert(again.tokens.end(), full.tokens.begin(), full.tokens.begin() + k);
      again.resumed = static_cast<int>(k);
      again.max_tokens = r.max_tokens - static_cast<int>(k);
      Outcome rest = Drain(**(*b)->Submit(again));
      std::vector<int32_t> joined(full.tokens.begin(), full.tokens.begin() + k);
      joined.insert(joined.end(), rest.tokens.begin(), rest.tokens.end());
      EXPECT_EQ(joined, full.tokens) << "temperature " << temperature << " k " << k;
      // The text already released for the first k tokens is not released again.
      TextStream replay(tokenizer.get(), r.stop);
      std::string before;
      for (size_t i = 0; i < k; ++i) before += replay.Push(full.tokens[i]);
      EXPECT_EQ(before + rest.text, full.text);
    }
  }
}

TEST(BatcherTest, SeedsDecideSampledTokens) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  auto b = Batcher::Start(CpuModelOf(ref), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(b.has_value());
  GenerationRequest r = Greedy("seed", 40);
  r.sampling.temperature = 1.5;
  r.sampling.seed = 1;
  Outcome a = Drain(**(*b)->Submit(r));
  Outcome a2 = Drain(**(*b)->Submit(r));
  r.sampling.seed = 2;
  Outcome c = Drain(**(*b)->Submit(r));
  EXPECT_EQ(a.tokens, a2.tokens);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(BatcherTest, StopsAtStopStringsWithoutSendingThem) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  auto b = Batcher::Start(CpuModelOf(ref), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(b.has_value());
  Outcome full = Drain(**(*b)->Submit(Greedy("stop", 40)));
  ASSERT_GE(full.text.size(), 12u);
  // Stop at the text generated at bytes 8..10: the reply is the 8 bytes before it.
  GenerationRequest r = Greedy("stop", 40);
  const std::string stop = full.text.substr(8, 3);
  r.stop = {stop};
  Outcome cut = Drain(**(*b)->Submit(r));
  EXPECT_EQ(cut.finish, "stop");
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
}

TEST(BatcherTest, RefusesWhatCanNeverRunAndWhatOverflowsTheQueue) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  BatcherOptions opt;
  opt.max_running = 1;
  opt.max_waiting = 1;
  // 13 blocks of 8: a whole-context sequence (96) needs 12.
  auto gated = std::make_unique<GatedModel>(CpuModelOf(ref, 13, 8, 64));
  GatedModel* gate = gated.get();
  auto b = Batcher::Start(std::move(gated), tokenizer.get(), opt, nullptr);
  ASSERT_TRUE(b.has_value());
  auto too_long = (*b)->Submit(Greedy(std::string(96, 'x'), 1));
  ASSERT_FALSE(too_long.has_value());
  EXPECT_EQ(too_long.error().field, "prompt");
  auto past_context = (*b)->Submit(Greedy("abc", 94));
  ASSERT_FALSE(past_context.has_value());
  EXPECT_EQ(past_context.error().field, "max_tokens");
  EXPECT_NE(past_context.error().message.find("97"), std::string::npos) << past_context.error().message;
  auto zero = (*b)->Submit(Greedy("abc", 0));
  ASSERT_FALSE(zero.has_value());
  EXPECT_EQ(zero.error().field, "max_tokens");

  auto first = (*b)->Submit(Greedy("first", 80));  // holds 11 of the 13 blocks
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(gate->WaitBlocked());                  // running
  auto second = (*b)->Submit(Greedy("second", 20));  // waits: one running at most
  ASSERT_TRUE(second.has_value());
  auto third = (*b)->Submit(Greedy("third", 20));
  ASSERT_FALSE(third.has_value());
  EXPECT_EQ(third.error().code, ErrorCode::kResourceExhausted);
  LoadReport load = (*b)->Load();
  EXPECT_EQ(load.waiting, 1);
  EXPECT_EQ(load.queued_tokens, 6 + 20);
  gate->Open();
  EXPECT_EQ(Drain(**first).finish, "length");
  EXPECT_EQ(Drain(**second).finish, "length");
}

// Blocks are reserved for the prompt and max_tokens: a request that does not fit next to
// the running ones waits for them rather than overcommitting the cache.
TEST(BatcherTest, RequestsWaitForCacheBlocks) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  auto gated = std::make_unique<GatedModel>(CpuModelOf(ref, 13, 8, 64));
  GatedModel* gate = gated.get();
  auto b = Batcher::Start(std::move(gated), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(b.has_value());
  auto a = (*b)->Submit(Greedy("aaaaaaaa", 56));  // 64 positions: 8 blocks
  ASSERT_TRUE(gate->WaitBlocked());
  auto c = (*b)->Submit(Greedy("cccccccc", 40));  // 48: 6 blocks; 5 are free
  gate->Release(3);
  ASSERT_TRUE(gate->WaitBlocked());
  LoadReport load = (*b)->Load();
  EXPECT_EQ(load.running, 1);
  EXPECT_EQ(load.waiting, 1);
  EXPECT_LE(load.kv_blocks_used, 13);
  gate->Open();
  EXPECT_EQ(Drain(**a).tokens.size(), 56u);
  EXPECT_EQ(Drain(**c).tokens.size(), 40u);
}

TEST(BatcherTest, CancelledRequestsLeaveTheBatch) {
  engine::GptModel ref = TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  auto gated = std::make_unique<GatedModel>(CpuModelOf(ref));
  GatedModel* gate = gated.get();
  auto b = Batcher::Start(std::move(gated), tokenizer.get(), {}, nullptr);
  ASSERT_TRUE(b.has_value());
  auto ch = (*b)->Submit(Greedy("cancel", 80));
  ASSERT_TRUE(gate->WaitBlocked());
  (*ch)->Cancel();
  gate->Open();
  // The next step drops it: its blocks come back.
  auto other = (*b)->Submit(Greedy("other", 3));
  Drain(**other);
  EXPECT_TRUE(Eventually([&] { return (*b)->Load().kv_blocks_used == 0 && (*b)->Load().running == 0; }));
}

TEST(TextStreamTest, HoldsBackPartialCharactersAndStopPrefixes) {
  auto tokenizer = engine::MakeByteTokenizer();
  TextStream s(tokenizer.get(), {"END"});
  EXPECT_EQ(s.Push('a'), "a");
  EXPECT_EQ(s.Push(0xC3), "");  // first byte of 'é'
  EXPECT_EQ(s.Push(0xA9), "\xC3\xA9");
  EXPECT_EQ(s.Push('E'), "");   // could be the stop string
  EXPECT_EQ(s.Push('N'), "");
  EXPECT_EQ(s.Push('x'), "ENx");
  EXPECT_EQ(s.Push('E'), "");
  EXPECT_EQ(s.Push('N'), "");
  EXPECT_EQ(s.Push('D'), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.Push('z'), "");
  EXPECT_EQ(s.Flush(), "");

  TextStream t(tokenizer.get(), {});
  EXPECT_EQ(t.Push(0xE2), "");
  EXPECT_EQ(t.Push(0x82), "");
  EXPECT_EQ(t.Flush(), "\xE2\x82");  // an unfinished character goes out at the end
  EXPECT_EQ(CompleteUtf8Prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xF0\x9F\x98\x80"), 6u);
}

// A .safetensors model exported by `cohort train --export` states its head count: served
// without --n-head it has it; a --n-head that contradicts it is refused naming the flag.
TEST(ServeModelLoader, ASafetensorsModelsHeadCountComesFromTheFile) {
  const engine::GptModel m = TinyModel();  // 4 heads
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("cohort-serve-heads-" +
                                                                               std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.safetensors").string();
  ASSERT_TRUE(engine::ExportGpt2(m, path).has_value());
  ModelSource src;
  src.path = path;
  src.tokenizer = "byte";
  auto loaded = LoadServeModel(src);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_EQ(loaded->config.n_head, 4);
  src.n_head = 12;
  auto wrong = LoadServeModel(src);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().field, "--n-head");
  EXPECT_NE(wrong.error().message.find("has 4 attention heads"), std::string::npos) << wrong.error().message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::serve
