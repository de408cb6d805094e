// Text corpora for training: a file, a directory of text files, or a glob, read in sorted
// order (files reached twice through links are read once), tokenized and split into a
// training part and a validation part (the last `val_fraction` of the tokens).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "engine/data/tokenizer.h"

namespace cohort::engine {

struct TextCorpus {
  std::vector<std::string> files;  // what was read, in order
  size_t bytes = 0;
  std::vector<int32_t> train, val;
};

// Documents are joined with the tokenizer's end-of-text token, or a blank line when it
// has none. kNotFound when nothing matches; kInvalidArgument when the text is empty.
// Errors start with `field`, the setting that named `spec` (`cohort tokenize`: --input).
Result<TextCorpus> LoadTextCorpus(const std::string& spec, const Tokenizer& tokenizer,
                                  double val_fraction, std::string_view field = "data.text");

}  // namespace cohort::engine
