#include "serve/text_stream.h"

#include <algorithm>

namespace cohort::serve {

size_t CompleteUtf8Prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of a sequence that is not finished.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for its lead
    size_t len = 1;
    if ((c & 0xE0) == 0xC0) len = 2;
    else if ((c & 0xF0) == 0xE0) len = 3;
    else if ((c & 0xF8) == 0xF0) len = 4;
    return len > back ? n - back : n;
  }
  return n;
}

TextStream::TextStream(const engine::Tokenizer* tokenizer, std::vector<std::string> stop)
    : tokenizer_(tokenizer), stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  for (const auto& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

std::string TextStream::Push(int32_t token) {
  if (stopped_) return {};
  const size_t old_size = bytes_.size();
  bytes_ += tokenizer_->Decode(std::span<const int32_t>(&token, 1));
  // A stop string that ends in the new bytes (it may begin in held-back ones).
  if (!stop_.empty()) {
    const size_t from = old_size >= max_stop_ ? old_size - max_stop_ + 1 : 0;
    size_t first = std::string::npos;
    for (const auto& s : stop_) {
      const size_t at = bytes_.find(s, std::max(from, emitted_));
      if (at != std::string::npos) first = std::min(first, at);
    }
    if (first != std::string::npos) {
      stopped_ = true;
      std::string out = bytes_.substr(emitted_, first - emitted_);
      emitted_ = first;
      return out;
    }
  }
  size_t end = CompleteUtf8Prefix(bytes_);
  // Hold back the longest tail that is a proper prefix of some stop string.
  for (const auto& s : stop_) {
    for (size_t len = std::min(s.size() - 1, bytes_.size()); len > 0; --len) {
      if (bytes_.compare(bytes_.size() - len, len, s, 0, len) == 0) {
        end = std::min(end, bytes_.size() - len);
        break;
      }
    }
  }
  if (end <= emitted_) return {};
  std::string out = bytes_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return out;
}

std::string TextStream::Flush() {
  if (stopped_) return {};
  std::string out = bytes_.substr(emitted_);
  emitted_ = bytes_.size();
  return out;
}

}  // namespace cohort::serve
