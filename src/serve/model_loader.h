// LoadServeModel: the weights, shape and tokenizer a replica serves, from either
//   - a `cohort train` checkpoint directory (LoadLatestCheckpoint: the newest verified
//     step); its state.json names the tokenizer the run used ("byte" or "gpt2-bpe"), or
//   - a GPT-2 safetensors file (Hugging Face's naming, checkpoint/gpt2_safetensors.h),
//     whose head count no tensor shape gives: the file's own (its __metadata__, which
//     `cohort train --export` writes, or a config.json beside it), or `n_head` when given.
// A GPT-2 BPE tokenizer is read from `bpe_vocab`/`bpe_merges`, or, when those are empty,
// from vocab.json and merges.txt beside the model (Hugging Face's layout). The tokenizer
// must fit the model: its vocabulary may not be larger than the model's embeddings.
//
// Plain functions; the result is owned by the caller.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/data/tokenizer.h"
#include "engine/model/gpt.h"

namespace cohort::serve {

struct ModelSource {
  std::string path;             // checkpoint directory or .safetensors file
  std::string tokenizer = "auto";  // auto (the checkpoint's; gpt2 for safetensors), byte, gpt2
  std::string bpe_vocab, bpe_merges;
  int n_head = 0;               // safetensors only; 0: the file's (an error when it states none)
};

struct LoadedModel {
  engine::GptConfig config;
  std::vector<float> params;  // the GptModel layout
  std::unique_ptr<engine::Tokenizer> tokenizer;
  std::string description;    // "checkpoint /x/step_00000200" / "safetensors /x/model.safetensors"
};

// kNotFound for a missing path or tokenizer file; kInvalidArgument naming the field
// ("--model", "--tokenizer", "--n-head") for anything malformed or inconsistent.
Result<LoadedModel> LoadServeModel(const ModelSource& source);

}  // namespace cohort::serve
