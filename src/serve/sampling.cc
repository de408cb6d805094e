#include "serve/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "engine/rng.h"

namespace cohort::serve {

namespace {

double LogSumExp(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  return mx + std::log(sum);
}

// A uniform double in [0, 1) for draw `index` of stream `seed`.
double Uniform(uint64_t seed, int64_t index) {
  uint64_t x = seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(index + 1));
  engine::Xoshiro256 rng(engine::SplitMix64(x));
  return static_cast<double>(rng.Next() >> 11) * 0x1.0p-53;
}

}  // namespace

int32_t Argmax(std::span<const float> values) {
  constexpr size_t kLanes = 16;
  const size_t n = values.size();
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -INFINITY);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) lane[l] = values[i + l] > lane[l] ? values[i + l] : lane[l];
  }
  for (; i < n; ++i) lane[0] = values[i] > lane[0] ? values[i] : lane[0];
  float best = lane[0];
  for (size_t l = 1; l < kLanes; ++l) best = lane[l] > best ? lane[l] : best;
  for (i = 0; i < n; ++i) {
    if (values[i] == best) return static_cast<int32_t>(i);
  }
  return 0;  // only NaNs
}

void ApplyPenalties(std::span<float> logits, std::span<const int32_t> generated, const SamplingParams& params) {
  if (!params.penalized()) return;
  std::unordered_map<int32_t, int> counts;
  for (int32_t t : generated) counts[t] += 1;
  for (const auto& [t, c] : counts) {
    if (t < 0 || static_cast<size_t>(t) >= logits.size()) continue;
    logits[t] -= static_cast<float>(params.frequency_penalty * c + params.presence_penalty);
  }
}

void ApplyLogitBias(std::span<float> logits, const SamplingParams& params) {
  for (const auto& [t, bias] : params.logit_bias) {
    if (t < 0 || static_cast<size_t>(t) >= logits.size()) continue;
    logits[t] += bias;
  }
}

void ApplyAdjustments(std::span<float> logits, std::span<const int32_t> generated, const SamplingParams& params) {
  ApplyLogitBias(logits, params);
  ApplyPenalties(logits, generated, params);
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, int64_t index) {
  const int n = static_cast<int>(logits.size());
  if (params.temperature <= 0 || params.top_k == 1) return Argmax(logits);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  const int k = (params.top_k <= 0 || params.top_k > n) ? n : params.top_k;
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  if (k < n) {
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), higher);
  } else {
    std::sort(ids.begin(), ids.end(), higher);
  }
  const double top = logits[ids[0]];
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[ids[i]] - top) / params.temperature);
  // Nucleus: the smallest prefix (highest first) whose mass reaches top_p.
  int keep = k;
  if (params.top_p < 1.0) {
    double mass = 0;
    for (int i = 0; i < k; ++i) {
      mass += p[i] / sum;
      if (mass >= params.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = 0;
    for (int i = 0; i < keep; ++i) sum += p[i];
  }
  double u = Uniform(params.seed, index) * sum;
  for (int i = 0; i < keep; ++i) {
    if ((u -= p[i]) < 0) return ids[i];
  }
  return ids[keep - 1];
}

float TokenLogprobOf(std::span<const float> logits, int32_t token) {
  return static_cast<float>(logits[token] - LogSumExp(logits));
}

std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int top) {
  const int n = static_cast<int>(logits.size());
  top = std::clamp(top, 0, n);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const double lse = LogSumExp(logits);
  std::vector<TokenLogprob> out;
  for (int i = 0; i < top; ++i) out.push_back({ids[i], static_cast<float>(logits[ids[i]] - lse)});
  return out;
}

}  // namespace cohort::serve
