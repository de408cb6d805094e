// Helpers shared by the GPT model parity tests on CUDA (cuda_model_test.cc,
// cuda_shard_test.cc): bf16-exact random weights, batches with a learnable rule and ignored
// targets, and the per-tensor gradient comparison. Header-only, host C++.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/model/gpt.h"

namespace cohort::engine::cuda::testing {

inline bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Random weights for every tensor (no zeros: biases and LayerNorm shifts are random too),
// rounded to bf16 so that the GPU's bf16 copy equals its float32 master and both devices
// compute with the same numbers.
inline std::vector<float> RandomParams(const GptModel& model, uint64_t seed) {
  std::vector<float> p(model.params().size());
  for (const ParamTensor& t : model.tensors()) {
    const std::string& n = t.name;
    const bool ln_weight = EndsWith(n, "ln1.w") || EndsWith(n, "ln2.w") || n == "ln_f.w";
    const float scale = ln_weight ? 0.1f : EndsWith(n, ".b") ? 0.02f : 0.04f;
    std::vector<float> r = RandomVector(t.numel, seed * 1000003 + t.offset, scale);
    for (size_t i = 0; i < t.numel; ++i) p[t.offset + i] = (ln_weight ? 1.0f : 0.0f) + r[i];
  }
  return RoundBf16(p);
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

// Random tokens; targets follow a learnable rule (next = 7·token + 3 mod V) three times in
// four, are random otherwise, and -1 (ignored) at every 11th position.
inline Batch MakeBatch(const GptConfig& c, int B, int T, uint64_t seed) {
  Batch b;
  const size_t n = static_cast<size_t>(B) * T;
  std::vector<float> u = RandomVector(2 * n, seed, 1.0f);
  auto id = [&c](float x) {
    int v = static_cast<int>((x * 0.5f + 0.5f) * c.vocab_size);
    return std::clamp(v, 0, c.vocab_size - 1);
  };
  for (size_t i = 0; i < n; ++i) {
    const int32_t tok = id(u[i]);
    b.tokens.push_back(tok);
    int32_t target = (7 * tok + 3) % c.vocab_size;
    if (i % 4 == 3) target = id(u[n + i]);
    if (i % 11 == 5) target = -1;
    b.targets.push_back(target);
  }
  return b;
}

// Per-tensor gradient comparison: each tensor's ||gpu − cpu|| / ||cpu|| below `tol`.
// Tensors whose CPU gradient is exactly zero (none in these tests) must be zero on the GPU.
inline void ExpectGradsClose(const std::vector<ParamTensor>& tensors, const std::vector<float>& gpu,
                      std::span<const float> cpu, double tol, const std::string& what) {
  double worst = 0;
  std::string worst_name;
  for (const ParamTensor& t : tensors) {
    std::span<const float> a(gpu.data() + t.offset, t.numel), b(cpu.data() + t.offset, t.numel);
    const double e = RelError(a, b);
    EXPECT_LT(e, tol) << what << ": gradient of " << t.name;
    if (e > worst) worst = e, worst_name = t.name;
  }
  std::printf("%s: worst gradient rel err %.3e (%s)\n", what.c_str(), worst, worst_name.c_str());
}

}  // namespace cohort::engine::cuda::testing
