// What the checkpoint tests share: a small model shape and a bitwise comparison (floats as
// bytes: -0, denormals and NaN bits count).
#pragma once

#include <cstring>
#include <vector>

#include "engine/model/gpt.h"

namespace cohort::engine::testing {

inline GptConfig SmallConfig() {
  GptConfig c;
  c.vocab_size = 50;
  c.max_seq_len = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

inline bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace cohort::engine::testing
