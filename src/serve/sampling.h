// Token sampling for the server: greedy, or temperature with top-k and top-p (nucleus),
// and the log-probabilities the API reports.
//
// Reproducibility: the random draw for the i-th generated token of a request comes from
// a generator seeded by (seed, i) alone, not from a stream advanced by earlier tokens.
// So a request re-submitted with its first i tokens appended to the prompt (the gateway's
// failover) draws exactly what the original would have drawn for token i on: seeded
// sampling is as exact across a failover as greedy decoding.
//
// Greedy (temperature 0) takes the first largest logit, as the engine's own sampler
// (engine/trainer/sampling.h) does. Plain functions; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace cohort::serve {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  int top_k = 0;             // 0: no limit
  double top_p = 1.0;        // (0, 1]
  uint64_t seed = 0;
  // OpenAI's penalties, in [-2, 2]: before sampling, each token's logit loses
  // frequency_penalty for every time the request generated it, and presence_penalty once
  // if it generated it at all (the prompt does not count).
  double presence_penalty = 0;
  double frequency_penalty = 0;
  bool penalized() const { return presence_penalty != 0 || frequency_penalty != 0; }
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) pairs, one per id, added to the
  // token's logit before sampling: -100 all but bans a token, +100 all but forces it. As in
  // vLLM (its sampler's logit-bias processor runs before the penalties) the bias comes
  // first; both only add to logits, so the order changes no choice. Like the penalties it
  // shapes the choice, not the log-probabilities reported (vLLM's default raw logprobs).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // The logits are adjusted before sampling (ApplyAdjustments): penalties or a bias.
  bool adjusted() const { return penalized() || !logit_bias.empty(); }
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// The index of the first largest value (std::max_element's answer; NaNs are never the
// largest, and a span of only NaNs gives 0). Sixteen independent running maxima, then one
// scan for the first index that holds the maximum: greedy decoding ran std::max_element
// over the whole vocabulary for every sequence of every step, a serial compare chain that
// cost ~0.2 ms a sequence at GPT-2's 50257 (bench_serve_gpu, H200 host: 13 ms of a 16 ms
// step at 64 streams, the model's step itself 3.3 ms).
int32_t Argmax(std::span<const float> values);

// Applies the penalties of `params` to `logits` for the tokens generated so far.
void ApplyPenalties(std::span<float> logits, std::span<const int32_t> generated, const SamplingParams& params);
// Adds `params.logit_bias` to `logits` (ids outside the span are skipped).
void ApplyLogitBias(std::span<float> logits, const SamplingParams& params);
// Both, in vLLM's order: the bias, then the penalties.
void ApplyAdjustments(std::span<float> logits, std::span<const int32_t> generated, const SamplingParams& params);

// The id to emit as generated token number `index` (0-based) after `logits`
// (vocab_size values).
int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, int64_t index);

// log softmax(logits)[token], and the `top` most likely ids with theirs (highest first,
// ties by id), from the model's distribution before temperature.
float TokenLogprobOf(std::span<const float> logits, int32_t token);
std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int top);

}  // namespace cohort::serve
