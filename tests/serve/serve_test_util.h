// Helpers for the inference server's tests: a tiny random GPT with the byte tokenizer,
// and a model whose steps wait at a gate (to hold requests in the batch deterministically).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "engine/model/gpt.h"
#include "serve/inference_model.h"

namespace cohort::serve::testing {

// vocab 256 (bytes), context 96, 2 layers, 4 heads, n_embd 64; GPT-2 initialisation from
// `seed` with the embeddings scaled up (token ×5, position ×10) so that the next-token
// distribution is peaked (greedy choices far from ties, so float rounding cannot flip
// them) and depends on both the context and the position (the text changes as it goes).
inline engine::GptModel TinyModel(uint64_t seed = 7) {
  engine::GptConfig c;
  c.vocab_size = 256;
  c.max_seq_len = 96;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  auto m = engine::GptModel::Create(c);
  EXPECT_TRUE(m.has_value());
  m->InitRandom(seed);
  const engine::ParamTensor* wte = m->FindTensor("wte");
  for (size_t i = 0; i < wte->numel; ++i) m->params()[wte->offset + i] *= 5.0f;
  const engine::ParamTensor* wpe = m->FindTensor("wpe");
  for (size_t i = 0; i < wpe->numel; ++i) m->params()[wpe->offset + i] *= 10.0f;
  return std::move(*m);
}

// Greedy decoding by the engine's own forward pass (GptModel::Forward over the whole
// sequence at every step, not the server's cache path), with `bias` added to each step's
// logits before the choice of the first largest: what OpenAI's logit_bias asks for.
inline std::vector<int32_t> BiasedGreedy(engine::GptModel& model, std::vector<int32_t> seq, int n,
                                         const std::vector<std::pair<int32_t, float>>& bias) {
  const size_t V = static_cast<size_t>(model.config().vocab_size);
  const size_t Vp = static_cast<size_t>(model.config().padded_vocab_size());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int T = static_cast<int>(seq.size());
    auto ran = model.Forward(seq, {}, 1, T);
    EXPECT_TRUE(ran.has_value()) << ran.error().message;
    if (!ran) return out;
    const float* row = model.logits().data() + static_cast<size_t>(T - 1) * Vp;
    std::vector<float> logits(row, row + V);
    for (const auto& [t, b] : bias) logits[static_cast<size_t>(t)] += b;
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

inline std::unique_ptr<InferenceModel> CpuModelOf(const engine::GptModel& m, int blocks = 64,
                                                  int block_size = 8, int max_step_tokens = 256) {
  KvCachePlan plan;
  plan.block_size = block_size;
  plan.num_blocks = blocks;
  auto p = m.params();
  auto model = CreateCpuInferenceModel(m.config(), std::vector<float>(p.begin(), p.end()), plan,
                                       max_step_tokens);
  EXPECT_TRUE(model.has_value()) << model.error().message;
  return std::move(*model);
}

// Wraps a model; every Step waits until Release() was called as many times as steps ran
// before it (Open() lets every step through). Records each step's shape: per sequence, its
// first position and its new tokens.
class GatedModel final : public InferenceModel {
 public:
  explicit GatedModel(std::unique_ptr<InferenceModel> inner) : inner_(std::move(inner)) {}
  const engine::GptConfig& config() const override { return inner_->config(); }
  std::string_view device() const override { return inner_->device(); }
  const KvCachePlan& cache() const override { return inner_->cache(); }
  int max_step_tokens() const override { return inner_->max_step_tokens(); }
  Result<void> Step(std::span<const StepSequence> seqs, std::vector<float>& logits) override {
    {
      MutexLock l(mu_);
      ++waiting_;
      cv_.NotifyAll();
      cv_.WaitFor(mu_, std::chrono::seconds(30), [&] {
        mu_.AssertHeld();
        return open_ || allowed_ > 0;
      });
      if (!open_) --allowed_;
      --waiting_;
      cv_.NotifyAll();
      std::vector<std::pair<int, int>> shape;
      for (const StepSequence& q : seqs) shape.emplace_back(q.start, static_cast<int>(q.tokens.size()));
      shapes_.push_back(std::move(shape));
    }
    return inner_->Step(seqs, logits);
  }
  std::vector<std::vector<std::pair<int, int>>> shapes() {
    MutexLock l(mu_);
    return shapes_;
  }
  void Release(int steps = 1) {
    MutexLock l(mu_);
    allowed_ += steps;
    cv_.NotifyAll();
  }
  void Open() {
    MutexLock l(mu_);
    open_ = true;
    cv_.NotifyAll();
  }
  // Waits (at most `timeout`) until a step is blocked at the gate with no release left to
  // take.
  bool WaitBlocked(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    MutexLock l(mu_);
    return cv_.WaitFor(mu_, timeout, [&] {
      mu_.AssertHeld();
      return waiting_ > 0 && allowed_ == 0;
    });
  }

 private:
  std::unique_ptr<InferenceModel> inner_;
  Mutex mu_;
  CondVar cv_;
  int allowed_ GUARDED_BY(mu_) = 0;
  int waiting_ GUARDED_BY(mu_) = 0;
  bool open_ GUARDED_BY(mu_) = false;
  std::vector<std::vector<std::pair<int, int>>> shapes_ GUARDED_BY(mu_);
};

}  // namespace cohort::serve::testing
