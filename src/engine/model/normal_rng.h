// NormalRng: deterministic standard-normal samples from a 64-bit seed (xoshiro256** seeded
// by splitmix64, Box–Muller). The same seed gives the same sequence on every platform.
// Not thread-safe; one per thread.
#pragma once

#include <cmath>
#include <cstdint>

namespace cohort::engine {

class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) {
    for (uint64_t& s : s_) s = SplitMix(seed);
  }

  // Uniform 64-bit value.
  uint64_t NextU64() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in (0, 1]: 53 random bits.
  double NextUniform() { return (static_cast<double>(NextU64() >> 11) + 1.0) * 0x1.0p-53; }

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
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace cohort::engine
