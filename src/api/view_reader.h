// Helpers shared by the decoders (views.cc, dashboard.cc, usage.cc, codecs.cc): lists and
// optional fields over ObjectReader, each naming the bad field by its full path. Not part
// of the API; included only by those files.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace cohort::api::view_reader {

// `key`'s list of integers between min and max (at most max_len); empty when absent.
inline Result<std::vector<int>> IntList(ObjectReader& r, std::string_view key, int min, int max,
                                 size_t max_len) {
  const json* v = r.Raw(key);
  std::vector<int> out;
  if (!v) return out;
  if (!v->is_array() || v->size() > max_len) {
    return FieldError(r.FieldName(key), "must be an array of at most {} integers", max_len);
  }
  for (const auto& e : *v) {
    if (!e.is_number_integer() || e.get<int64_t>() < min || e.get<int64_t>() > max) {
      return FieldError(r.FieldName(key), "elements must be integers between {} and {}", min, max);
    }
    out.push_back(e.get<int>());
  }
  return out;
}

// Full name of element `i` of `key` ("nodes[3]").
inline std::string ElementName(const ObjectReader& r, std::string_view key, size_t i) {
  return fmt::format("{}[{}]", r.FieldName(key), i);
}

// The array at `key`, or an error naming it; `required` false: an absent or null field is
// an empty array.
inline Result<const json*> Array(ObjectReader& r, std::string_view key, bool required) {
  static const json kEmpty = json::array();
  const json* v = r.Raw(key);
  if (!v) {
    if (required) return FieldError(r.FieldName(key), "is required");
    return &kEmpty;
  }
  if (!v->is_array()) return FieldError(r.FieldName(key), "must be an array, got {}", JsonTypeName(*v));
  return v;
}

// Decodes each element of the array at `key` with decode(element, "key[i]").
template <typename T, typename F>
Result<std::vector<T>> List(ObjectReader& r, std::string_view key, bool required, F&& decode) {
  const json* a = COHORT_TRY(Array(r, key, required));
  std::vector<T> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) out.push_back(COHORT_TRY(decode((*a)[i], ElementName(r, key, i))));
  return out;
}

// An optional number: absent or null is std::nullopt.
inline Result<std::optional<double>> OptionalDouble(ObjectReader& r, std::string_view key, double min, double max) {
  if (!r.Has(key)) {
    (void)r.Raw(key);
    return std::optional<double>();
  }
  return std::optional<double>(COHORT_TRY(r.Double(key, std::nullopt, min, max)));
}

inline Result<std::optional<int64_t>> OptionalInt(ObjectReader& r, std::string_view key, int64_t min, int64_t max) {
  if (!r.Has(key)) {
    (void)r.Raw(key);
    return std::optional<int64_t>();
  }
  return std::optional<int64_t>(COHORT_TRY(r.Int(key, std::nullopt, min, max)));
}

// A stored record's decoder (NodeFromJson, JobFromJson) with `path` in front of its error.
template <typename T>
Result<T> Record(Result<T> r, const std::string& path) {
  if (!r && !path.empty()) return std::unexpected(WithContext(std::move(r.error()), path));
  return r;
}

}  // namespace cohort::api::view_reader
