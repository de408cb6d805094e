#include "engine/data/tokenizer.h"

namespace cohort::engine {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

class ByteTokenizer final : public Tokenizer {
 public:
  std::string_view name() const override { return "byte"; }
  int vocab_size() const override { return 256; }
  int eot_token() const override { return -1; }

  std::vector<int32_t> Encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
    return ids;
  }

  std::string Decode(std::span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) {
        out.push_back(static_cast<char>(id));
      } else {
        out += kReplacement;
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace cohort::engine
