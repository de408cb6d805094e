// Tokenizer: text <-> token ids. Two implementations: a byte-level tokenizer (ids 0..255
// are the bytes; the default) and GPT-2's byte-level BPE loaded from Hugging Face's
// vocab.json + merges.txt (50257 ids, <|endoftext|> = 50256). Immutable after creation;
// any thread may call any method.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cohort::engine {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte" or "gpt2-bpe".
  virtual std::string_view name() const = 0;
  virtual int vocab_size() const = 0;
  // The end-of-text id documents are separated by, or -1 when the tokenizer has none.
  virtual int eot_token() const = 0;
  virtual std::vector<int32_t> Encode(std::string_view text) const = 0;
  // Ids outside [0, vocab_size) decode to U+FFFD; bytes that are not valid UTF-8 are
  // kept as they are.
  virtual std::string Decode(std::span<const int32_t> ids) const = 0;
};

// Byte-level: vocab_size 256, no end-of-text token.
std::unique_ptr<Tokenizer> MakeByteTokenizer();

// GPT-2 BPE. kNotFound for a missing file; kInvalidArgument naming the file and line for
// malformed JSON, an id that is not an integer, a merges line that is not two symbols,
// or a merge whose result is not in the vocabulary (and naming the file for a vocabulary
// that lacks one of the 256 byte symbols). vocab_size is the largest id + 1;
// eot_token is the id of "<|endoftext|>" when the vocabulary has it, which Encode emits
// for that literal text. Encodings of pre-tokenized pieces are cached behind a mutex.
Result<std::unique_ptr<Tokenizer>> LoadGpt2BpeTokenizer(const std::string& vocab_json_path,
                                                       const std::string& merges_txt_path);

}  // namespace cohort::engine
