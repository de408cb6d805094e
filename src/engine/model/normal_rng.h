// NormalRng: deterministic standard-normal samples from a 64-bit seed (engine/rng.h's
// xoshiro256**, Box–Muller). The same seed gives the same sequence on every platform.
// Not thread-safe; one per thread.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/rng.h"

namespace cohort::engine {

class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : bits_(seed) {}

  // Uniform 64-bit value.
  uint64_t NextU64() { return bits_.Next(); }

  // Uniform in (0, 1]: 53 random bits.
  double NextUniform() { return (static_cast<double>(NextU64() >> 11) + 1.0) * 0x1.0p-53; }

  // Skips the next k values of Next(): the generator ends where k calls would leave it, at
  // the cost of two 64-bit draws per pair and no Box–Muller (seeking for a sharded init).
  void Skip(uint64_t k) {
    if (k > 0 && has_spare_) {
      has_spare_ = false;
      --k;
    }
    for (uint64_t i = 0; i < k / 2 * 2; ++i) bits_.Next();
    if (k % 2 == 1) (void)Next();  // draws a pair, keeps its second value as the spare
  }

  // Standard normal (Box–Muller, both values of each pair used).
  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return static_cast<float>(spare_);
    }
    const double u1 = NextUniform(), u2 = NextUniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * 3.14159265358979323846 * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return static_cast<float>(r * std::cos(theta));
  }

 private:
  Xoshiro256 bits_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace cohort::engine
