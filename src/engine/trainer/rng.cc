#include "engine/trainer/rng.h"

namespace cohort::engine {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& w : s_) w = SplitMix64(seed);
}

uint64_t Rng::Next() {
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

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

Result<void> Rng::Restore(std::span<const uint64_t> words) {
  if (words.size() != 4 || (words[0] | words[1] | words[2] | words[3]) == 0) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "generator state must be 4 words, not all zero (got {} words)", words.size());
  }
  for (size_t i = 0; i < 4; ++i) s_[i] = words[i];
  return {};
}

}  // namespace cohort::engine
