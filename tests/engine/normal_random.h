// Random test inputs for the CPU kernels' tests: n values shift + scale·N(0, 1), a pure
// function of the arguments (std::mt19937_64 and libstdc++'s normal distribution).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace cohort::engine::testing {

inline std::vector<float> NormalRandom(size_t n, uint64_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = shift + scale * normal(rng);
  return v;
}

}  // namespace cohort::engine::testing
