#include "common/document.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

namespace cohort {
namespace {

// Aliases (`*a`, naming a node anchored `&a`) become copies of their node when a document
// is converted. This bounds what a document may expand to, so that "billion laughs"
// (anchors of lists of aliases of anchors ...) fails at once with little memory instead of
// taking gigabytes; the nesting it may reach is kMaxJsonDepth, as for JSON. Spec files and
// configs that share a block with an anchor copy tens to hundreds of nodes.
constexpr size_t kMaxAliasNodes = 100'000;  // nodes copied by all aliases of one document

std::unexpected<Error> InputError(std::string message) {
  return MakeError(ErrorCode::kInvalidArgument, std::move(message));
}

bool IsPlainInteger(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

bool IsPlainFloat(std::string_view s) {
  // [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

// A plain (unquoted, untagged) scalar by the YAML 1.2 core schema.
json PlainScalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (IsPlainInteger(s)) {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0) return static_cast<int64_t>(v);
    if (s[0] != '-') {
      errno = 0;
      unsigned long long u = std::strtoull(s.c_str(), &end, 10);
      if (errno == 0) return static_cast<uint64_t>(u);
    }
    return std::strtod(s.c_str(), nullptr);  // out of range: a (large) number, still not a string
  }
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
    int base = s[1] == 'x' ? 16 : 8;
    std::string digits = s.substr(2);
    bool ok = std::all_of(digits.begin(), digits.end(), [&](char c) {
      return base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) != 0 : (c >= '0' && c <= '7');
    });
    if (ok) {
      errno = 0;
      unsigned long long u = std::strtoull(digits.c_str(), nullptr, base);
      if (errno == 0) {
        if (u <= static_cast<unsigned long long>(std::numeric_limits<int64_t>::max())) {
          return static_cast<int64_t>(u);
        }
        return static_cast<uint64_t>(u);
      }
    }
  }
  if (IsPlainFloat(s)) return std::strtod(s.c_str(), nullptr);
  std::string_view v = s;
  bool neg = v.starts_with('-');
  if (neg || v.starts_with('+')) v.remove_prefix(1);
  if (v == ".inf" || v == ".Inf" || v == ".INF") {
    return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  return s;
}

// The offset of the first byte of `s` that is not part of well-formed UTF-8 (RFC 3629: no
// overlong forms, surrogates or code points past U+10FFFF), or npos. JSON text is UTF-8,
// so a YAML string that is not could be neither sent nor stored.
size_t InvalidUtf8At(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if (cc < (k == 1 ? lo : 0x80) || cc > (k == 1 ? hi : 0xBF)) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

std::string Where(std::string_view source, const YAML::Mark& m) {
  if (m.is_null()) return std::string(source);
  return fmt::format("{}:{}:{}", source, m.line + 1, m.column + 1);
}

// Fails unless a scalar's text is UTF-8, naming where it is and the first bad byte.
Result<void> CheckUtf8(const YAML::Node& node, std::string_view source) {
  const std::string& text = node.Scalar();
  size_t at = InvalidUtf8At(text);
  if (at == std::string_view::npos) return {};
  return InputError(fmt::format("{}: a string is not valid UTF-8 (byte 0x{:02x} at offset {} of it)",
                                Where(source, node.Mark()), static_cast<unsigned char>(text[at]),
                                at));
}

// Thrown by AliasChecker out of yaml-cpp's parser; caught in CheckAliases.
struct AliasError {
  YAML::Mark mark;
  std::string message;
};

// Follows a document's parse events (no nodes are built) and knows, for every anchored
// node, how many nodes it expands to and how deep it nests, so that an alias that would
// expand the document past kMaxAliasNodes, nest it past kMaxJsonDepth, or refer to a node
// that contains it (`a: &a [*a]`, a cycle) is refused before anything is converted.
//
// It also stops yaml-cpp 0.7's parser where it would loop for ever: on a token that no
// rule takes (a ',' outside a flow collection), HandleNextDocument reports an empty
// document and leaves the token in place, so every later call reports another one there
// (yaml-cpp issue 1040, fixed upstream after 0.8). A document that starts where the one
// before it started is that loop.
class AliasChecker : public YAML::EventHandler {
 public:
  explicit AliasChecker(std::string_view text) : text_(text) {}

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (documents_++ > 0 && mark.pos == last_start_.pos) {
      std::string token = mark.pos >= 0 && static_cast<size_t>(mark.pos) < text_.size()
                              ? fmt::format(" '{}'", text_[static_cast<size_t>(mark.pos)])
                              : "";
      throw AliasError{mark, fmt::format("invalid YAML: unexpected token{}", token)};
    }
    last_start_ = mark;
    anchors_.clear();
    frames_.clear();
    expanded_ = 0;
  }
  void OnDocumentEnd() override {}
  void OnAnchor(const YAML::Mark&, const std::string& name) override { anchor_name_ = name; }
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { Leaf(anchor); }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, const std::string&) override {
    Leaf(anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapEnd() override { Close(); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override;

 private:
  struct Tree {
    size_t nodes = 1;
    size_t height = 0;  // collections nested in it, itself included; 0 for a scalar
  };
  struct Anchor {
    std::string name;
    Tree tree;
    bool open = false;  // a collection still being read: an alias to it is a cycle
  };
  struct Frame {
    YAML::anchor_t anchor = 0;
    Tree tree;
  };

  Anchor* Define(YAML::anchor_t anchor) {
    if (anchor == YAML::NullAnchor) return nullptr;
    if (anchors_.size() <= anchor) anchors_.resize(anchor + 1);
    anchors_[anchor].name = anchor_name_;
    return &anchors_[anchor];
  }
  void Leaf(YAML::anchor_t anchor) {
    if (Anchor* a = Define(anchor)) a->tree = Tree{};
    Add(Tree{});
  }
  void Open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (frames_.size() >= kMaxJsonDepth) {
      throw AliasError{mark, fmt::format("nested more than {} levels deep", kMaxJsonDepth)};
    }
    if (Anchor* a = Define(anchor)) a->open = true;
    frames_.push_back({anchor, Tree{1, 1}});
  }
  void Close() {
    Frame f = frames_.back();
    frames_.pop_back();
    if (f.anchor != YAML::NullAnchor) {
      anchors_[f.anchor].tree = f.tree;
      anchors_[f.anchor].open = false;
    }
    Add(f.tree);
  }
  // Counts `child` into the collection being read.
  void Add(const Tree& child) {
    if (frames_.empty()) return;
    Tree& t = frames_.back().tree;
    t.nodes += child.nodes;
    t.height = std::max(t.height, child.height + 1);
  }

  std::string_view text_;        // the whole input, to name a token the parser stops at
  size_t documents_ = 0;         // documents started so far
  YAML::Mark last_start_;        // where the last one started
  std::vector<Anchor> anchors_;  // by yaml-cpp's anchor number (from 1, per document)
  std::vector<Frame> frames_;    // the collections being read, outermost first
  std::string anchor_name_;      // the name of the anchor the next node event carries
  size_t expanded_ = 0;          // nodes copied by this document's aliases so far
};

void AliasChecker::OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) {
  const Anchor& a = anchors_.at(anchor);
  if (a.open) {
    throw AliasError{mark, fmt::format("recursive alias *{}: it refers to the node that contains it", a.name)};
  }
  expanded_ += a.tree.nodes;
  if (expanded_ > kMaxAliasNodes) {
    throw AliasError{mark, fmt::format("YAML alias expansion exceeds {} nodes (at alias *{})", kMaxAliasNodes, a.name)};
  }
  if (frames_.size() + a.tree.height > kMaxJsonDepth) {
    throw AliasError{mark, fmt::format("alias *{} nests the document more than {} levels deep", a.name, kMaxJsonDepth)};
  }
  Add(a.tree);
}

// Reads every document of `text` with AliasChecker; syntax errors are reported as
// YamlToJson reports them.
Result<void> CheckAliases(std::string_view text, std::string_view source) {
  std::istringstream in{std::string(text)};
  YAML::Parser parser(in);
  AliasChecker checker(text);
  try {
    while (parser.HandleNextDocument(checker)) {
    }
  } catch (const AliasError& e) {
    return InputError(fmt::format("{}: {}", Where(source, e.mark), e.message));
  } catch (const YAML::Exception& e) {
    return InputError(fmt::format("{}: invalid YAML: {}", Where(source, e.mark), e.msg));
  }
  return {};
}

// `as_strings`: numbers and booleans keep their text (under a string-only field).
Result<json> Convert(const YAML::Node& node, std::string_view source, bool as_strings,
                     const std::set<std::string, std::less<>>* string_fields = nullptr) {
  const bool top_level = string_fields != nullptr;
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar: {
      COHORT_TRY_VOID(CheckUtf8(node, source));
      const std::string& tag = node.Tag();
      const std::string& value = node.Scalar();
      // "!" is the non-specific tag of quoted and block scalars; "?" marks a plain one.
      if (tag == "!" || tag == "tag:yaml.org,2002:str") return json(value);
      if (tag == "?" || tag.empty()) {
        json v = PlainScalar(value);
        if (as_strings && (v.is_number() || v.is_boolean())) return json(value);
        return v;
      }
      if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
          tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
        return PlainScalar(value);
      }
      return InputError(fmt::format("{}: unsupported YAML tag '{}'", Where(source, node.Mark()), tag));
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(COHORT_TRY(Convert(item, source, as_strings)));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          return InputError(
              fmt::format("{}: a mapping key must be a plain name", Where(source, kv.first.Mark())));
        }
        COHORT_TRY_VOID(CheckUtf8(kv.first, source));
        const std::string& key = kv.first.Scalar();
        if (out.contains(key)) {
          return InputError(fmt::format("{}: duplicate key '{}'", Where(source, kv.first.Mark()), key));
        }
        out[key] = COHORT_TRY(Convert(kv.second, source, as_strings || (top_level && string_fields->contains(key))));
      }
      return out;
    }
  }
  return json(nullptr);
}

bool LooksLikeJson(std::string_view text) {
  size_t i = text.find_first_not_of(" \t\r\n");
  return i != std::string_view::npos && (text[i] == '{' || text[i] == '[');
}

}  // namespace

Result<std::string> ReadDocumentText(const std::string& path, size_t max_bytes) {
  std::FILE* f = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (!f) return InputError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::error_code ec;
  if (path != "-" && std::filesystem::is_directory(path, ec)) {
    std::fclose(f);
    return InputError(fmt::format("{}: is a directory, not a file", path));
  }
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    text.append(buf, n);
    if (text.size() > max_bytes) {
      if (f != stdin) std::fclose(f);
      return InputError(fmt::format("{}: larger than {} MiB", path, max_bytes >> 20));
    }
  }
  bool failed = std::ferror(f) != 0;
  int err = errno;
  if (f != stdin) std::fclose(f);
  if (failed) return InputError(fmt::format("{}: cannot read: {}", path, std::strerror(err)));
  return text;
}


Result<json> YamlToJson(std::string_view text, std::string_view source,
                        const std::set<std::string, std::less<>>& string_fields) {
  COHORT_TRY_VOID(CheckAliases(text, source));
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    return InputError(fmt::format("{}: invalid YAML: {}", Where(source, e.mark), e.msg));
  }
  if (docs.empty()) return json(nullptr);
  if (docs.size() > 1) {
    return InputError(fmt::format("{}: has {} YAML documents ('---'); expected exactly one",
                                  source, docs.size()));
  }
  try {
    return Convert(docs[0], source, /*as_strings=*/false, &string_fields);
  } catch (const YAML::Exception& e) {
    return InputError(fmt::format("{}: invalid YAML: {}", Where(source, e.mark), e.msg));
  }
}

Result<json> JsonFromText(std::string_view text, std::string_view source) {
  auto j = ParseJsonText(text, /*refuse_duplicate_keys=*/true);
  if (j) return std::move(*j);
  const JsonParseError& e = j.error();
  if (e.byte == 0) {
    return InputError(e.field.empty() ? fmt::format("{}: {}", source, e.message)
                                      : fmt::format("{}: {}: {}", source, e.field, e.message));
  }
  // e.byte is 1-based: the position of the last character read.
  size_t pos = std::min<size_t>(e.byte - 1, text.size());
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return InputError(fmt::format("{}:{}:{}: invalid JSON: {}", source, line, col, e.message));
}

Result<json> LoadDocument(const std::string& path,
                          const std::set<std::string, std::less<>>& string_fields,
                          size_t max_bytes) {
  std::string text = COHORT_TRY(ReadDocumentText(path, max_bytes));
  std::string source = path == "-" ? "<stdin>" : path;
  std::string ext = path == "-" ? "" : std::filesystem::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".json") return JsonFromText(text, source);
  if (ext == ".yaml" || ext == ".yml") return YamlToJson(text, source, string_fields);
  auto as_json = JsonFromText(text, source);
  if (as_json) return as_json;
  auto as_yaml = YamlToJson(text, source, string_fields);
  if (as_yaml) return as_yaml;
  return LooksLikeJson(text) ? as_json : as_yaml;
}

}  // namespace cohort
