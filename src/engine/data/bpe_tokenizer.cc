// GPT-2's byte-level BPE (openai/gpt-2 encoder.py, Hugging Face's GPT2Tokenizer):
//  1. "<|endoftext|>" in the text is the end-of-text id; the rest is split by GPT-2's
//     pre-tokenizer regex (PCRE2 with Unicode properties);
//  2. each piece's bytes become printable characters (bytes_to_unicode), and
//  3. adjacent symbols are merged by rank (merges.txt order) until no ranked pair is left.
// Pieces' encodings are cached (a mutex-guarded map), so Encode stays callable from any
// thread.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/json.h"
#include "engine/data/tokenizer.h"

namespace cohort::engine {
namespace {

constexpr std::string_view kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
constexpr size_t kMaxCacheEntries = size_t{1} << 16;

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// encoder.py's bytes_to_unicode: printable Latin-1 bytes map to themselves, the others to
// U+0100 upwards in byte order.
std::array<uint32_t, 256> BytesToUnicode() {
  std::array<uint32_t, 256> map{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) map[b] = printable[b] ? static_cast<uint32_t>(b) : 256 + n++;
  return map;
}

// Decodes one UTF-8 code point at s[i] (advancing i); invalid input yields its byte.
uint32_t NextCodePoint(std::string_view s, size_t& i, bool& valid) {
  auto c = static_cast<uint8_t>(s[i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  valid = len > 0 && i + len <= s.size();
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; valid && k < len; ++k) {
    auto cc = static_cast<uint8_t>(s[i + k]);
    if ((cc >> 6) != 2) valid = false;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (!valid) {
    ++i;
    return c;
  }
  i += len;
  return cp;
}

int LineOf(std::string_view text, size_t byte) {
  int line = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

Result<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return Errorf(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable,
                  "{}: cannot open: {}", path, std::strerror(errno));
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct PcreCodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct PcreMatchDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  std::string_view name() const override { return "gpt2-bpe"; }
  int vocab_size() const override { return vocab_size_; }
  int eot_token() const override { return eot_; }

  std::vector<int32_t> Encode(std::string_view text) const override {
    std::vector<int32_t> out;
    std::unique_ptr<pcre2_match_data, PcreMatchDeleter> md(
        pcre2_match_data_create_from_pattern(re_.get(), nullptr));
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t eot = eot_ >= 0 ? text.find(kEndOfText, pos) : std::string_view::npos;
      EncodeOrdinary(text.substr(pos, eot == std::string_view::npos ? eot : eot - pos),
                     md.get(), out);
      if (eot == std::string_view::npos) break;
      out.push_back(eot_);
      pos = eot + kEndOfText.size();
    }
    return out;
  }

  std::string Decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id >= 0 && id < vocab_size_ && has_id_[static_cast<size_t>(id)]) {
        out += decoded_[static_cast<size_t>(id)];
      } else {
        out += kReplacement;
      }
    }
    return out;
  }

  static Result<std::unique_ptr<Tokenizer>> Load(const std::string& vocab_path,
                                                 const std::string& merges_path);

 private:
  void EncodeOrdinary(std::string_view text, pcre2_match_data* md,
                      std::vector<int32_t>& out) const {
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset < text.size()) {
      int rc = pcre2_match(re_.get(), subject, text.size(), offset, 0, md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(re_.get(), subject, text.size(), offset, PCRE2_NO_JIT, md, nullptr);
      }
      if (rc < 0) {  // no match (or a matcher limit): the rest is one piece
        EncodePiece(text.substr(offset), out);
        return;
      }
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t begin = ov[0], end = ov[1];
      if (begin > offset) EncodePiece(text.substr(offset, begin - offset), out);  // invalid UTF-8
      if (end == begin) end = begin + 1;  // never for this pattern; guards the loop
      EncodePiece(text.substr(begin, end - begin), out);
      offset = end;
    }
  }

  void EncodePiece(std::string_view piece, std::vector<int32_t>& out) const {
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(std::string(piece));
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<std::string> word;
    word.reserve(piece.size());
    for (char c : piece) word.push_back(byte_symbol_[static_cast<uint8_t>(c)]);
    while (word.size() > 1) {
      int best = INT_MAX;
      size_t best_i = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        auto it = ranks_.find(word[i] + ' ' + word[i + 1]);
        if (it != ranks_.end() && it->second < best) {
          best = it->second;
          best_i = i;
        }
      }
      if (best == INT_MAX) break;
      const std::string first = word[best_i], second = word[best_i + 1];
      std::vector<std::string> merged;
      merged.reserve(word.size());
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
          merged.push_back(first + second);
          i += 2;
        } else {
          merged.push_back(word[i]);
          ++i;
        }
      }
      word = std::move(merged);
    }
    std::vector<int32_t> ids;
    ids.reserve(word.size());
    for (const std::string& s : word) ids.push_back(encoder_.at(s));  // checked at load
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(piece), std::move(ids));
  }

  std::unique_ptr<pcre2_code, PcreCodeDeleter> re_;
  std::unordered_map<std::string, int32_t> encoder_;  // symbol string -> id
  std::unordered_map<std::string, int> ranks_;        // "first second" -> merge rank
  std::array<std::string, 256> byte_symbol_;          // byte -> its symbol (UTF-8)
  std::vector<std::string> decoded_;                  // id -> bytes
  std::vector<bool> has_id_;
  int vocab_size_ = 0;
  int eot_ = -1;

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // guarded by cache_mu_
};

Result<std::unique_ptr<Tokenizer>> Gpt2BpeTokenizer::Load(const std::string& vocab_path,
                                                          const std::string& merges_path) {
  auto tok = std::unique_ptr<Gpt2BpeTokenizer>(new Gpt2BpeTokenizer());
  std::string vocab_text = COHORT_TRY(ReadText(vocab_path));
  std::string merges_text = COHORT_TRY(ReadText(merges_path));

  // vocab.json: {"symbol": id, ...}. The strict reader never throws: nlohmann's parse
  // threw out_of_range, not parse_error, for a number beyond a double (1e400).
  auto parsed = ParseJsonText(vocab_text);
  if (!parsed) {
    const JsonParseError& e = parsed.error();
    std::string where = e.byte == 0 ? vocab_path
                                    : fmt::format("{}:{}", vocab_path, LineOf(vocab_text, e.byte - 1));
    return Errorf(ErrorCode::kInvalidArgument, "{}: malformed JSON: {}{}", where,
                  e.field.empty() ? "" : e.field + ": ", e.message);
  }
  nlohmann::json vocab = std::move(*parsed);
  if (!vocab.is_object()) {
    return Errorf(ErrorCode::kInvalidArgument, "{}:1: expected a JSON object of symbol: id",
                  vocab_path);
  }
  constexpr int64_t kMaxId = int64_t{1} << 24;
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= kMaxId) {
      // The key as written (if the file escapes differently, name the file alone).
      std::string key = nlohmann::json(it.key()).dump(-1, ' ', false,
                                                      nlohmann::json::error_handler_t::replace);
      size_t at = vocab_text.find(key);
      std::string where = at == std::string::npos
                              ? vocab_path
                              : fmt::format("{}:{}", vocab_path, LineOf(vocab_text, at));
      return Errorf(ErrorCode::kInvalidArgument, "{}: id of {} must be an integer in [0, {})",
                    where, key, kMaxId);
    }
    max_id = std::max(max_id, it.value().get<int64_t>());
  }
  tok->vocab_size_ = static_cast<int>(max_id + 1);
  tok->decoded_.assign(static_cast<size_t>(tok->vocab_size_), "");
  tok->has_id_.assign(static_cast<size_t>(tok->vocab_size_), false);

  std::array<uint32_t, 256> b2u = BytesToUnicode();
  std::unordered_map<uint32_t, uint8_t> u2b;
  for (int b = 0; b < 256; ++b) {
    tok->byte_symbol_[b] = Utf8(b2u[b]);
    u2b[b2u[b]] = static_cast<uint8_t>(b);
  }
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    auto id = static_cast<size_t>(it.value().get<int64_t>());
    if (tok->has_id_[id]) {
      return Errorf(ErrorCode::kInvalidArgument, "{}: id {} is assigned twice (again to {})",
                    vocab_path, id, nlohmann::json(it.key()).dump());
    }
    tok->has_id_[id] = true;
    tok->encoder_.emplace(it.key(), static_cast<int32_t>(id));
    // Decoded bytes: each symbol character back to its byte; others kept as UTF-8.
    const std::string& sym = it.key();
    std::string bytes;
    for (size_t i = 0; i < sym.size();) {
      size_t start = i;
      bool valid = true;
      uint32_t cp = NextCodePoint(sym, i, valid);
      auto b = u2b.find(cp);
      if (valid && b != u2b.end()) {
        bytes.push_back(static_cast<char>(b->second));
      } else {
        bytes.append(sym, start, i - start);
      }
    }
    tok->decoded_[id] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    if (!tok->encoder_.contains(tok->byte_symbol_[b])) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "{}: no entry for byte 0x{:02x} (symbol \"{}\"); byte-level BPE needs all "
                    "256",
                    vocab_path, b, tok->byte_symbol_[b]);
    }
  }
  if (auto it = tok->encoder_.find(std::string(kEndOfText)); it != tok->encoder_.end()) {
    tok->eot_ = it->second;
  }

  // merges.txt: optional "#version" line, then "first second" per line in rank order.
  std::istringstream lines(merges_text);
  std::string line;
  int line_no = 0;
  int rank = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string::npos) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "{}:{}: expected two symbols separated by one space, got \"{}\"",
                    merges_path, line_no, line);
    }
    std::string merged = line.substr(0, sp) + line.substr(sp + 1);
    if (!tok->encoder_.contains(merged)) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "{}:{}: merge \"{}\" makes \"{}\", which is not in {}", merges_path,
                    line_no, line, merged, vocab_path);
    }
    tok->ranks_.emplace(line, rank++);  // a repeated merge keeps its first rank
  }

  int err = 0;
  PCRE2_SIZE err_offset = 0;
  tok->re_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()), kPattern.size(),
                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err,
                               &err_offset, nullptr));
  if (!tok->re_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return Errorf(ErrorCode::kInternal, "GPT-2 pre-tokenizer regex: {} at {}",
                  reinterpret_cast<const char*>(msg), err_offset);
  }
  pcre2_jit_compile(tok->re_.get(), PCRE2_JIT_COMPLETE);  // optional speed-up
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadGpt2BpeTokenizer(const std::string& vocab_json_path,
                                                       const std::string& merges_txt_path) {
  return Gpt2BpeTokenizer::Load(vocab_json_path, merges_txt_path);
}

}  // namespace cohort::engine
