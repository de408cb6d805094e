// Text generation from a trained model: autoregressive sampling with temperature and
// top-k, re-running the model over the last max_seq_len tokens for each new token (the
// CPU reference keeps no KV cache).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/error.h"
#include "engine/model/gpt.h"
#include "engine/trainer/rng.h"

namespace cohort::engine {

struct SampleOptions {
  int tokens = 100;          // new tokens to generate
  double temperature = 0.8;  // 0: greedy (argmax)
  int top_k = 40;            // 0: the whole vocabulary
};

// Returns the `options.tokens` new ids that follow `prompt` (non-empty; ids in range).
// kInvalidArgument for an empty prompt or a negative option.
Result<std::vector<int32_t>> Generate(GptModel& model, std::span<const int32_t> prompt,
                                      const SampleOptions& options, Rng& rng);

// Picks one id from `logits` (vocab_size entries) with temperature and top-k.
int32_t SampleToken(std::span<const float> logits, double temperature, int top_k, Rng& rng);

}  // namespace cohort::engine
