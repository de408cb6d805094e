// TextStream: the text of a generation as it grows token by token, cut at stop strings.
//
// Tokens decode to bytes (a GPT-2 BPE token may hold part of a UTF-8 character); the
// stream emits text only up to the last complete character, and holds back a tail that
// could still become a stop string, so a client never sees part of a stop string or half
// a character. When a stop string appears, the text before it is emitted and the stream
// is stopped; the stop string itself is never emitted (OpenAI's behaviour).
//
// What has been emitted depends only on the tokens pushed so far, which is what lets a
// replica that takes over a generation (the gateway's failover) replay the tokens already
// sent and know exactly which text the client has. Plain value; one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/tokenizer.h"

namespace cohort::serve {

class TextStream {
 public:
  TextStream(const engine::Tokenizer* tokenizer, std::vector<std::string> stop);

  // Adds a generated token; returns the text that may now be emitted (often the token's
  // own text, sometimes "" while bytes are held back, sometimes more than one token's).
  std::string Push(int32_t token);
  // At the end of a generation that did not stop: everything still held back.
  std::string Flush();

  bool stopped() const { return stopped_; }
  // Bytes of text emitted so far (the offset of the next emitted byte).
  size_t emitted() const { return emitted_; }

 private:
  const engine::Tokenizer* tokenizer_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  std::string bytes_;    // every generated token's bytes
  size_t emitted_ = 0;   // bytes_[0, emitted_) went out
  bool stopped_ = false;
};

// The length of the longest prefix of `s` that ends on a UTF-8 character boundary (an
// incomplete multi-byte sequence at the end is cut; invalid bytes count as characters).
size_t CompleteUtf8Prefix(std::string_view s);

}  // namespace cohort::serve
