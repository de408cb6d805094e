// GptLayout: where every parameter tensor of a GptConfig lives in the flat buffer (the
// order documented in gpt.h). Internal to the model; plain values.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/model/gpt.h"

namespace cohort::engine {

// Offsets (in floats) of one transformer block's tensors; [begin, end) is the block.
struct LayerOffsets {
  size_t begin = 0, end = 0;
  size_t ln1_w = 0, ln1_b = 0, qkv_w = 0, qkv_b = 0, attn_proj_w = 0, attn_proj_b = 0;
  size_t ln2_w = 0, ln2_b = 0, fc_w = 0, fc_b = 0, fc_proj_w = 0, fc_proj_b = 0;
};

struct GptLayout {
  size_t wte = 0, wpe = 0, ln_f_w = 0, ln_f_b = 0, total = 0;
  std::vector<LayerOffsets> layers;
  std::vector<ParamTensor> tensors;

  // `config` must be valid.
  static GptLayout Build(const GptConfig& config);
};

}  // namespace cohort::engine
