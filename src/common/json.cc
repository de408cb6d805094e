#include "common/json.h"

#include <algorithm>
#include <cmath>

namespace cohort {

Result<json> ParseJson(std::string_view text, std::string_view what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Re-parse with exceptions only to learn where the syntax error is.
    try {
      json unused = json::parse(text);
      (void)unused;
    } catch (const json::parse_error& e) {
      return Errorf(ErrorCode::kInvalidArgument, "{} is not valid JSON: syntax error at byte {}",
                    what, e.byte);
    }
    return Errorf(ErrorCode::kInvalidArgument, "{} is not valid JSON", what);
  }
  return j;
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

Result<std::string> ObjectReader::String(std::string_view key, std::optional<std::string> def) {
  const json* v = Find(key);
  if (!v) {
    if (def) return *def;
    return FieldError(FieldName(key), "is required");
  }
  if (!v->is_string()) return FieldError(FieldName(key), "must be a string, got {}", JsonTypeName(*v));
  return v->get<std::string>();
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
      return FieldError(FieldName(key), "must be between {} and {}, got {}", min, max, v->dump());
    }
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    return FieldError(FieldName(key), "must be an integer, got {} {}", JsonTypeName(*v), v->dump());
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
    return FieldError(FieldName(key), "must be between {} and {}, got {}", min, max, v->dump());
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
