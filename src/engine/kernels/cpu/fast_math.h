// Vectorisable exp and tanh for the CPU kernels (internal to kernels/cpu), and the
// function-multiversioning attribute the hot loops use.
//
// FastExp: Cody–Waite range reduction x = n·ln2 + r, |r| <= ln2/2, a degree-6 polynomial
// for e^r and 2^n built in the exponent bits; relative error < 3e-7 (a few float ulps)
// for x in [-87, 88]; inputs are clamped to that range (so exp of a very negative number
// is ~1e-38, not 0). Written with plain float/int operations so GCC vectorises it in an
// `omp simd` loop at any ISA level (SSE2 included) without -ffast-math.
#pragma once

#include <cstdint>
#include <cstring>

// Compiles a function for AVX-512, AVX2 and the baseline, picked at load time by CPU
// features (GCC ifunc; "arch=" clones would dispatch on the CPU model and miss models GCC
// does not know). Empty where unsupported.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define COHORT_CPU_CLONES \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define COHORT_CPU_CLONES
#endif

namespace cohort::engine::cpu {


__attribute__((always_inline)) inline float FastExp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float kRound = 12582912.0f;  // 1.5·2^23: adding and subtracting rounds to integer
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// tanh(x) = 1 − 2 / (e^{2x} + 1); exact limits ±1 for large |x|. Absolute error < 1e-6.

__attribute__((always_inline)) inline float FastTanh(float x) { return 1.0f - 2.0f / (FastExp(2.0f * x) + 1.0f); }

}  // namespace cohort::engine::cpu
