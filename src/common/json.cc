#include "common/json.h"

#include <algorithm>
#include <cmath>

namespace cohort {

namespace {

// Thrown by the parse callback when the text nests deeper than kMaxJsonDepth; caught in
// ParseJsonText and never outside this file.
struct TooDeep {};
// An object that holds a key twice: where (its own path) and which key.
struct DuplicateKey {
  std::string where;
  std::string key;
};

// Follows nlohmann's parse events to know which field the parser is in, so that an error
// the lexer finds (a number out of range) names the field, and to refuse deep nesting
// before anything recursive walks the value.
class FieldTracker {
 public:
  explicit FieldTracker(bool refuse_duplicate_keys) : refuse_duplicate_keys_(refuse_duplicate_keys) {}

  bool On(json::parse_event_t event, const json& parsed) {
    using E = json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start: {
        if (depth_ == kMaxJsonDepth) throw TooDeep{};
        // Frames stay allocated after their object or array ends: the next one at that
        // depth reuses the key list's storage (a heartbeat is dozens of small objects).
        if (depth_ == frames_.size()) frames_.emplace_back();
        Frame& f = frames_[depth_++];
        f.array = event == E::array_start;
        f.index = 0;
        f.keys.clear();
        break;
      }
      case E::key:
        frames_[depth_ - 1].keys.push_back(parsed.get<std::string>());
        break;
      case E::object_end:
        // nlohmann keeps the last of two equal keys: the object then has fewer members than
        // the keys read. A person's spec or config with `nodes` twice is refused rather than
        // read as whichever came last (YAML refuses it too).
        if (refuse_duplicate_keys_ && parsed.size() != frames_[depth_ - 1].keys.size()) {
          std::vector<std::string> keys = frames_[--depth_].keys;
          std::sort(keys.begin(), keys.end());
          auto dup = std::adjacent_find(keys.begin(), keys.end());
          throw DuplicateKey{Path(), dup == keys.end() ? std::string() : *dup};
        }
        [[fallthrough]];
      case E::array_end:
        --depth_;
        ElementDone();
        break;
      case E::value:
        ElementDone();
        break;
    }
    return true;
  }

  // "tasks[2].rss_bytes": where the parser is now; empty at the top level.
  std::string Path() const {
    std::string out;
    for (size_t d = 0; d < depth_; ++d) {
      const Frame& f = frames_[d];
      if (f.array) {
        out += fmt::format("[{}]", f.index);
      } else if (!f.keys.empty()) {
        out += (out.empty() ? "" : ".") + f.keys.back();
      }
    }
    return out;
  }

 private:
  struct Frame {
    bool array = false;
    size_t index = 0;               // arrays: the element being read
    std::vector<std::string> keys;  // objects: the keys read so far, the latest last
  };

  void ElementDone() {
    if (depth_ > 0 && frames_[depth_ - 1].array) ++frames_[depth_ - 1].index;
  }

  bool refuse_duplicate_keys_;
  std::vector<Frame> frames_;  // frames_[0, depth_) are open
  size_t depth_ = 0;
};

std::string Shorten(std::string s, size_t max_chars) {
  if (s.size() > max_chars) {
    s.resize(max_chars);
    s += "...";
  }
  return s;
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: syntax
// error ..." without the exception's name and the position.
std::string SyntaxMessage(const json::parse_error& e) {
  std::string what = e.what();
  if (size_t p = what.find(": "); p != std::string::npos && what.find("parse error") < p) {
    what = what.substr(p + 2);
  } else if (size_t b = what.find("] "); b != std::string::npos) {
    what = what.substr(b + 2);
  }
  return Shorten(std::move(what), 300);
}

// "number out of range: 1e400" from nlohmann's "... number overflow parsing '1e400'".
std::string OutOfRangeMessage(const json::exception& e) {
  std::string what = e.what();
  size_t open = what.find('\'');
  size_t close = what.rfind('\'');
  if (open == std::string::npos || close <= open) return "number out of range";
  return "number out of range: " + Shorten(what.substr(open + 1, close - open - 1), 40);
}

}  // namespace

std::expected<json, JsonParseError> ParseJsonText(std::string_view text, bool refuse_duplicate_keys) {
  FieldTracker tracker(refuse_duplicate_keys);
  auto callback = [&tracker](int, json::parse_event_t event, json& parsed) { return tracker.On(event, parsed); };
  try {
    return json::parse(text, callback);
  } catch (const json::parse_error& e) {
    return std::unexpected(JsonParseError{e.byte, tracker.Path(), SyntaxMessage(e)});
  } catch (const json::exception& e) {
    return std::unexpected(JsonParseError{0, tracker.Path(), OutOfRangeMessage(e)});
  } catch (const DuplicateKey& d) {
    return std::unexpected(JsonParseError{0, d.where, fmt::format("the key '{}' is given twice", d.key)});
  } catch (const TooDeep&) {
    return std::unexpected(
        JsonParseError{0, {}, fmt::format("arrays and objects nested more than {} levels deep", kMaxJsonDepth)});
  }
}

Result<json> ParseJson(std::string_view text, std::string_view what) {
  auto j = ParseJsonText(text);
  if (j) return std::move(*j);
  const JsonParseError& e = j.error();
  if (e.byte > 0) {
    return Errorf(ErrorCode::kInvalidArgument, "{} is not valid JSON: syntax error at byte {}", what, e.byte);
  }
  if (!e.field.empty()) return FieldError(e.field, "{}", e.message);
  return Errorf(ErrorCode::kInvalidArgument, "{}: {}", what, e.message);
}

std::string JsonValueText(const json& j, size_t max_chars) {
  if (j.is_number_float() && !std::isfinite(j.get<double>())) {
    double d = j.get<double>();
    return std::isnan(d) ? "nan" : d > 0 ? "inf" : "-inf";
  }
  return Shorten(j.dump(-1, ' ', false, json::error_handler_t::replace), max_chars);
}

std::string_view JsonTypeName(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "object";
    case json::value_t::array: return "array";
    case json::value_t::string: return "string";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    default: return "value";
  }
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Result<ObjectReader> ObjectReader::Open(const json& j, std::string path) {
  if (!j.is_object()) {
    std::string name = path.empty() ? "body" : path;
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: must be a JSON object, got {}", name, JsonTypeName(j)),
                     path);
  }
  return ObjectReader(j, std::move(path));
}

bool ObjectReader::Has(std::string_view key) const {
  auto it = j_->find(std::string(key));
  return it != j_->end() && !it->is_null();
}

std::string ObjectReader::FieldName(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const json* ObjectReader::Find(std::string_view key) {
  seen_.emplace(key);
  auto it = j_->find(std::string(key));
  if (it == j_->end() || it->is_null()) return nullptr;
  return &*it;
}

const json* ObjectReader::Raw(std::string_view key) { return Find(key); }

Result<std::string> ObjectReader::String(std::string_view key, std::optional<std::string> def, size_t max_bytes) {
  const json* v = Find(key);
  if (!v) {
    if (def) return *def;
    return FieldError(FieldName(key), "is required");
  }
  if (!v->is_string()) return FieldError(FieldName(key), "must be a string, got {}", JsonTypeName(*v));
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() > max_bytes) return FieldError(FieldName(key), "must be at most {} bytes, got {}", max_bytes, s.size());
  return s;
}

Result<int64_t> ObjectReader::Int(std::string_view key, std::optional<int64_t> def, int64_t min,
                                  int64_t max) {
  const json* v = Find(key);
  if (!v) {
    if (def) return *def;
    return FieldError(FieldName(key), "is required");
  }
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) {
      return FieldError(FieldName(key), "must be between {} and {}, got {}", min, max, JsonValueText(*v));
    }
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    return FieldError(FieldName(key), "must be an integer, got {} {}", JsonTypeName(*v), JsonValueText(*v));
  }
  if (x < min || x > max) {
    return FieldError(FieldName(key), "must be between {} and {}, got {}", min, max, x);
  }
  return x;
}

Result<double> ObjectReader::Double(std::string_view key, std::optional<double> def, double min,
                                    double max) {
  const json* v = Find(key);
  if (!v) {
    if (def) return *def;
    return FieldError(FieldName(key), "is required");
  }
  if (!v->is_number()) return FieldError(FieldName(key), "must be a number, got {}", JsonTypeName(*v));
  double x = v->get<double>();
  if (!std::isfinite(x) || x < min || x > max) {
    return FieldError(FieldName(key), "must be between {} and {}, got {}", min, max, JsonValueText(*v));
  }
  return x;
}

Result<bool> ObjectReader::Bool(std::string_view key, std::optional<bool> def) {
  const json* v = Find(key);
  if (!v) {
    if (def) return *def;
    return FieldError(FieldName(key), "is required");
  }
  if (!v->is_boolean()) return FieldError(FieldName(key), "must be true or false, got {}", JsonTypeName(*v));
  return v->get<bool>();
}

Result<std::vector<std::string>> ObjectReader::StringList(
    std::string_view key, std::optional<std::vector<std::string>> def) {
  const json* v = Find(key);
  if (!v) {
    if (def) return *def;
    return FieldError(FieldName(key), "is required");
  }
  if (!v->is_array()) {
    return FieldError(FieldName(key), "must be an array of strings, got {}", JsonTypeName(*v));
  }
  std::vector<std::string> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_string()) {
      return FieldError(fmt::format("{}[{}]", FieldName(key), i), "must be a string, got {}",
                        JsonTypeName(e));
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

Result<std::map<std::string, std::string>> ObjectReader::StringMap(std::string_view key) {
  const json* v = Find(key);
  std::map<std::string, std::string> out;
  if (!v) return out;
  if (!v->is_object()) {
    return FieldError(FieldName(key), "must be an object of strings, got {}", JsonTypeName(*v));
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_string()) {
      return FieldError(FieldName(key) + "." + it.key(), "must be a string, got {}",
                        JsonTypeName(it.value()));
    }
    out.emplace(it.key(), it.value().get<std::string>());
  }
  return out;
}

Result<void> ObjectReader::Finish() const {
  for (auto it = j_->begin(); it != j_->end(); ++it) {
    if (seen_.contains(it.key())) continue;
    std::string best;
    size_t best_d = 3;  // suggest only close matches
    for (const auto& s : seen_) {
      size_t d = EditDistance(it.key(), s);
      if (d < best_d || (s.starts_with(it.key()) && best.empty())) {
        best_d = std::min(d, best_d);
        best = s;
      }
    }
    std::string msg = fmt::format("unknown field '{}'", it.key());
    if (!best.empty()) msg += fmt::format(" (did you mean '{}'?)", best);
    return MakeError(ErrorCode::kInvalidArgument, FieldName(it.key()) + ": " + msg,
                     FieldName(it.key()));
  }
  return {};
}

}  // namespace cohort
