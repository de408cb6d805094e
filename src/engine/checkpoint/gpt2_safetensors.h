// GPT-2 weights in Hugging Face's naming (the `model.safetensors` of "gpt2" and its
// fine-tunes): wte.weight, wpe.weight, h.{i}.ln_1.{weight,bias},
// h.{i}.attn.c_attn.{weight,bias}, h.{i}.attn.c_proj.{weight,bias},
// h.{i}.ln_2.{weight,bias}, h.{i}.mlp.c_fc.{weight,bias}, h.{i}.mlp.c_proj.{weight,bias},
// ln_f.{weight,bias}; optionally prefixed "transformer." (GPT2LMHeadModel), with the
// buffers h.{i}.attn.bias / masked_bias ignored and lm_head.weight (tied) ignored.
// Hugging Face's Conv1D stores weights as (in, out): they are transposed to and from
// GptModel's (out, in).
#pragma once

#include <string>

#include "common/error.h"
#include "engine/model/gpt.h"

namespace cohort::engine {

// The model shape stored in a GPT-2 safetensors file: n_layer from the h.{i} blocks,
// n_embd and vocab_size from wte, max_seq_len from wpe, and the head count, which no tensor
// shape gives, from the file's __metadata__ "n_head" (ExportGpt2 writes it) or the
// config.json beside it (Hugging Face's). `n_head` > 0 is the caller's count: kInvalidArgument
// (field n_head) when the file states another; 0 takes the file's, kInvalidArgument when it
// states none. Checked: n_embd % n_head == 0.
Result<GptConfig> ReadGpt2Config(const std::string& path, int n_head);

// Copies the file's weights into `model`. kInvalidArgument naming the tensor when one is
// missing, has the wrong shape, or an unknown tensor is present. The model is unchanged
// on error.
Result<void> ImportGpt2(const std::string& path, GptModel& model);

// Writes `model` with the names above (no prefix; vocab rows beyond vocab_size dropped) and
// __metadata__ {"format": "pt", "n_head": "<heads>"}.
Result<void> ExportGpt2(const GptModel& model, const std::string& path);

}  // namespace cohort::engine
