// Text generation from a trained model: autoregressive sampling with temperature and
// top-k, re-running the model over the last max_seq_len tokens for each new token (the
// CPU reference keeps no KV cache).
#pragma once

#include <cstdint>
#include <functional>
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

// A model as sampling sees it: the next-token logits (vocab_size values) after `window`
// (1 to max_window ids), e.g. a GPU model's last-position logits.
using NextTokenLogitsFn =
    std::function<Result<std::vector<float>>(std::span<const int32_t> window)>;

// Generate for any model: the window is the last min(context, max_window) ids. The
// GptModel overload is this with max_window = max_seq_len.
Result<std::vector<int32_t>> Generate(const NextTokenLogitsFn& next_logits, int max_window,
                                      std::span<const int32_t> prompt,
                                      const SampleOptions& options, Rng& rng);

// Picks one id from `logits` (vocab_size entries) with temperature and top-k.
int32_t SampleToken(std::span<const float> logits, double temperature, int top_k, Rng& rng);

}  // namespace cohort::engine
