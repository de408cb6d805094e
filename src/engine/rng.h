// Xoshiro256: the engine's one pseudo-random generator — xoshiro256** (Blackman & Vigna)
// seeded through SplitMix64. Used for weight initialisation (NormalRng), the sampler's
// epoch shuffles and text sampling, so a seed means the same stream everywhere. Its four
// words are the whole state (saved in checkpoints). Plain value; one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "common/error.h"

namespace cohort::engine {

// One step of SplitMix64: advances `x` and returns a well-mixed 64-bit value.
inline uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (auto& w : s_) w = SplitMix64(seed);
  }

  uint64_t Next() {
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

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform in [0, n), n >= 1, without modulo bias (Lemire's multiply-and-reject).
  uint64_t Below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = -n % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  std::array<uint64_t, 4> state() const { return s_; }

  // kInvalidArgument unless `words` has 4 entries, not all zero (xoshiro's one bad state).
  Result<void> Restore(std::span<const uint64_t> words) {
    if (words.size() != 4 || (words[0] | words[1] | words[2] | words[3]) == 0) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "generator state must be 4 words, not all zero (got {} words)", words.size());
    }
    for (size_t i = 0; i < 4; ++i) s_[i] = words[i];
    return {};
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_{};
};

}  // namespace cohort::engine
