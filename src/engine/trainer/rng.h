// Rng: xoshiro256** (Blackman & Vigna), seeded through SplitMix64. Its four words are the
// whole state, saved in checkpoints so that a resumed run samples the same text. Plain
// value; one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "common/error.h"

namespace cohort::engine {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1) with 53 random bits.
  double Uniform();
  std::array<uint64_t, 4> state() const { return s_; }
  // kInvalidArgument unless `words` has 4 entries, not all zero.
  Result<void> Restore(std::span<const uint64_t> words);

 private:
  std::array<uint64_t, 4> s_{};
};

}  // namespace cohort::engine
