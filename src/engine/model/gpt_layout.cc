#include "engine/model/gpt_layout.h"

#include <string>

namespace cohort::engine {

GptLayout GptLayout::Build(const GptConfig& config) {
  GptLayout lay;
  const int64_t C = config.n_embd, Vp = config.padded_vocab_size();
  size_t offset = 0;
  auto add = [&lay, &offset](std::string name, std::vector<int64_t> shape) {
    size_t numel = 1;
    for (int64_t d : shape) numel *= static_cast<size_t>(d);
    const bool decay = shape.size() >= 2;
    lay.tensors.push_back(ParamTensor{std::move(name), std::move(shape), offset, numel, decay});
    const size_t at = offset;
    offset += numel;
    return at;
  };
  lay.wte = add("wte", {Vp, C});
  lay.wpe = add("wpe", {config.max_seq_len, C});
  for (int l = 0; l < config.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    LayerOffsets w;
    w.begin = offset;
    w.ln1_w = add(p + "ln1.w", {C});
    w.ln1_b = add(p + "ln1.b", {C});
    w.qkv_w = add(p + "qkv.w", {3 * C, C});
    w.qkv_b = add(p + "qkv.b", {3 * C});
    w.attn_proj_w = add(p + "attn_proj.w", {C, C});
    w.attn_proj_b = add(p + "attn_proj.b", {C});
    w.ln2_w = add(p + "ln2.w", {C});
    w.ln2_b = add(p + "ln2.b", {C});
    w.fc_w = add(p + "fc.w", {4 * C, C});
    w.fc_b = add(p + "fc.b", {4 * C});
    w.fc_proj_w = add(p + "fc_proj.w", {C, 4 * C});
    w.fc_proj_b = add(p + "fc_proj.b", {C});
    w.end = offset;
    lay.layers.push_back(w);
  }
  lay.ln_f_w = add("ln_f.w", {C});
  lay.ln_f_b = add("ln_f.b", {C});
  lay.total = offset;
  return lay;
}

}  // namespace cohort::engine
