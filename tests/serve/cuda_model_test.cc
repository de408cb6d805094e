// The GPU backend of the server (serve/cuda_model.h) against the CPU one: the same steps
// (two sequences, chunked prefill then decoding, scattered cache blocks) give the same
// logits within bf16's precision, and continuous batching on the GPU gives the tokens of
// one request at a time. Runs on the CUDA emulator in CI (tests/engine/cuda_emu.cmake) and,
// as serve_cuda_gpu_test (label gpu; skips without a device), on a real GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "cuda_test_util.h"
#include "engine/data/tokenizer.h"
#include "serve/batcher.h"
#include "serve/cuda_model.h"
#include "serve_test_util.h"

namespace cohort::serve {
namespace {

std::unique_ptr<InferenceModel> CudaModelOf(const engine::GptModel& m, int blocks, int block_size, int step) {
  KvCachePlan plan;
  plan.block_size = block_size;
  plan.num_blocks = blocks;
  auto model = CreateCudaInferenceModel(m.config(), m.params(), plan, step);
  EXPECT_TRUE(model.has_value()) << model.error().message;
  return model ? std::move(*model) : nullptr;
}

TEST(CudaInferenceModelTest, StepsMatchTheCpuBackendWithinBf16) {
  COHORT_SKIP_WITHOUT_GPU();
  engine::GptModel ref = testing::TinyModel();
  auto cpu = testing::CpuModelOf(ref, 32, 8, 64);
  auto gpu = CudaModelOf(ref, 32, 8, 64);
  ASSERT_TRUE(gpu);
  const std::string a = "The GPU and the CPU agree, mostly.", b = "Second sequence here";
  std::vector<int32_t> ta(a.begin(), a.end()), tb(b.begin(), b.end());
  const std::vector<int> blocks_a = {7, 1, 30, 4, 12}, blocks_b = {2, 19, 25, 0};
  int pa = 0, pb = 0;
  double worst = 0, scale = 0;
  int agree = 0, rows = 0;
  // Chunks of 9 then single tokens, both sequences in every step.
  while (pa < static_cast<int>(ta.size()) && pb < static_cast<int>(tb.size())) {
    const int na = pa == 0 ? 9 : 1, nb = pb == 0 ? 9 : 1;
    StepSequence qa{std::span<const int32_t>(ta.data() + pa, na), pa, blocks_a, true};
    StepSequence qb{std::span<const int32_t>(tb.data() + pb, nb), pb, blocks_b, true};
    const StepSequence both[] = {qa, qb};
    std::vector<float> lc, lg;
    ASSERT_TRUE(cpu->Step(both, lc).has_value());
    auto r = gpu->Step(both, lg);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    ASSERT_EQ(lc.size(), lg.size());
    const size_t V = ref.config().vocab_size;
    for (size_t row = 0; row < 2; ++row) {
      for (size_t v = 0; v < V; ++v) {
        worst = std::max(worst, static_cast<double>(std::fabs(lc[row * V + v] - lg[row * V + v])));
        scale = std::max(scale, static_cast<double>(std::fabs(lc[row * V + v])));
      }
      const auto cb = lc.begin() + row * V, gb = lg.begin() + row * V;
      agree += std::max_element(cb, cb + V) - cb == std::max_element(gb, gb + V) - gb;
      ++rows;
    }
    pa += na;
    pb += nb;
  }
  std::printf("largest |cpu - gpu| logit difference %.4f (logits up to %.2f); argmax agrees on %d of %d rows\n",
              worst, scale, agree, rows);
  EXPECT_LT(worst, 0.02 * scale + 0.05) << "largest |cpu - gpu| " << worst << " of logits up to " << scale;
  EXPECT_GE(agree, rows * 9 / 10) << agree << " of " << rows << " argmaxes agree";
}

// A step wanting the logits of more rows than the model's logit buffer holds (256) gets
// them computed a slice at a time: every row's logits equal the CPU backend's within bf16.
TEST(CudaInferenceModelTest, LogitsOfMoreRowsThanTheBufferComeInSlices) {
  COHORT_SKIP_WITHOUT_GPU();
  engine::GptModel ref = testing::TinyModel();
  const int n = 300;
  auto cpu = testing::CpuModelOf(ref, n, 4, 512);
  auto gpu = CudaModelOf(ref, n, 4, 512);
  ASSERT_TRUE(gpu);
  std::vector<int32_t> tokens(n);
  std::vector<std::vector<int>> blocks(n);
  std::vector<StepSequence> step;
  for (int i = 0; i < n; ++i) {
    tokens[i] = (37 * i + 11) % 256;
    blocks[i] = {i};
  }
  for (int i = 0; i < n; ++i) step.push_back({std::span<const int32_t>(&tokens[i], 1), 0, blocks[i], true});
  std::vector<float> lc, lg;
  ASSERT_TRUE(cpu->Step(step, lc).has_value());
  auto r = gpu->Step(step, lg);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(lc.size(), lg.size());
  const size_t V = ref.config().vocab_size;
  for (int i = 0; i < n; ++i) {
    double worst = 0, scale = 0;
    for (size_t v = 0; v < V; ++v) {
      worst = std::max(worst, static_cast<double>(std::fabs(lc[i * V + v] - lg[i * V + v])));
      scale = std::max(scale, static_cast<double>(std::fabs(lc[i * V + v])));
    }
    ASSERT_LT(worst, 0.02 * scale + 0.05) << "row " << i << ": largest |cpu - gpu| " << worst;
  }
}

// The auto step budget on a device: the cache's 320 positions (far under the memory bound);
// a burst of six 30-token prompts then prefills in the first step, all six whole.
TEST(CudaInferenceModelTest, AutoStepBudgetPrefillsABurstInOneStep) {
  COHORT_SKIP_WITHOUT_GPU();
  engine::GptModel ref = testing::TinyModel();
  auto model = CudaModelOf(ref, 40, 8, kAutoStepTokens);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->max_step_tokens(), 320);
  auto tokenizer = engine::MakeByteTokenizer();
  auto gated = std::make_unique<testing::GatedModel>(std::move(model));
  testing::GatedModel* gate = gated.get();
  BatcherOptions opt;
  opt.max_running = 8;
  opt.prefill_chunk = 64;
  auto b = Batcher::Start(std::move(gated), tokenizer.get(), opt, nullptr);
  ASSERT_TRUE(b.has_value()) << b.error().message;
  EXPECT_EQ((*b)->decode_step_tokens(), 320);  // auto: the model's budget, under 2048
  auto request = [](int i, int n, int max_tokens) {
    GenerationRequest r;
    for (int k = 0; k < n; ++k) r.tokens.push_back('a' + (k + 5 * i) % 26);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.stop_at_eot = false;
    return r;
  };
  // A one-token request's step held at the gate while the burst queues.
  auto primer = *(*b)->Submit(request(9, 1, 1));
  ASSERT_TRUE(gate->WaitBlocked());
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (int i = 0; i < 6; ++i) chans.push_back(*(*b)->Submit(request(i, 30, 3)));
  gate->Open();
  ASSERT_TRUE(primer->Next(std::chrono::seconds(300)).has_value());
  for (auto& ch : chans) {
    int tokens = 0;
    for (;;) {
      auto e = ch->Next(std::chrono::seconds(300));
      ASSERT_TRUE(e.has_value());
      tokens += e->token >= 0;
      if (!e->finish_reason.empty()) {
        EXPECT_EQ(e->finish_reason, "length") << e->error;
        break;
      }
    }
    EXPECT_EQ(tokens, 3);
  }
  const auto shapes = gate->shapes();
  ASSERT_GE(shapes.size(), 2u);
  // The step after the primer's: all six prompts whole, 180 tokens.
  ASSERT_EQ(shapes[1].size(), 6u);
  for (const auto& [start, n] : shapes[1]) EXPECT_EQ(std::make_pair(start, n), std::make_pair(0, 30));
}

TEST(CudaInferenceModelTest, BatchedRequestsGiveTheTokensOfOneAtATime) {
  COHORT_SKIP_WITHOUT_GPU();
  engine::GptModel ref = testing::TinyModel();
  auto tokenizer = engine::MakeByteTokenizer();
  std::vector<GenerationRequest> reqs;
  for (const char* p : {"first prompt", "2", "a somewhat longer third prompt"}) {
    GenerationRequest r;
    r.tokens.assign(p, p + std::char_traits<char>::length(p));
    r.max_tokens = 12;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  auto run = [&](bool together) {
    auto b = Batcher::Start(CudaModelOf(ref, 32, 8, 64), tokenizer.get(), BatcherOptions{8, 16, 5}, nullptr);
    EXPECT_TRUE(b.has_value());
    std::vector<std::vector<int32_t>> out(reqs.size());
    std::vector<std::shared_ptr<RequestChannel>> chans;
    auto drain = [](RequestChannel& ch) {
      std::vector<int32_t> t;
      for (;;) {
        auto e = ch.Next(std::chrono::seconds(300));
        if (!e) return t;
        if (e->token >= 0) t.push_back(e->token);
        if (!e->finish_reason.empty()) return t;
      }
    };
    for (size_t i = 0; i < reqs.size(); ++i) {
      chans.push_back(*(*b)->Submit(reqs[i]));
      if (!together) out[i] = drain(*chans.back());
    }
    if (together) {
      for (size_t i = 0; i < reqs.size(); ++i) out[i] = drain(*chans[i]);
    }
    return out;
  };
  const auto alone = run(false), batched = run(true);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(alone[i].size(), 12u);
    EXPECT_EQ(batched[i], alone[i]) << "request " << i;
  }
}

}  // namespace
}  // namespace cohort::serve
