// Strict JSON reading for inputs from outside (API bodies, spec files, agent reports).
//
// ObjectReader walks one JSON object: each accessor reads a field, checks its type and
// range, and returns a Result whose error names the field ("spec.nodes: must be an integer
// between 1 and 4096, got -2"). Finish() rejects fields nobody read, with a suggestion
// for a near-miss ("unknown field 'gpus' (did you mean 'gpus_per_node'?)"). Not
// thread-safe; one reader per object being decoded.
#pragma once

#include <cstdint>
#include <expected>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace cohort {

using json = nlohmann::json;

// JSON from outside is nested at most this deep (arrays and objects): nlohmann's dump,
// copy and comparison recurse once per level, so a 4 MiB body of '[' would overflow a
// thread's stack. Real bodies, specs and configs nest fewer than ten levels.
inline constexpr size_t kMaxJsonDepth = 64;

// Why JSON text did not parse. `byte` is the 1-based offset of a syntax error (0: the
// error has no position); `field` is the field being read when the parser gave up
// ("tasks[2].rss_bytes", empty at the top level); `message` says what is wrong, without
// either ("number out of range: 1e400").
struct JsonParseError {
  size_t byte = 0;
  std::string field;
  std::string message;
};

// Parses text as JSON, refusing syntax errors, numbers beyond a double (1e400, -1e400)
// and nesting deeper than kMaxJsonDepth; with `refuse_duplicate_keys` (what a person
// writes: spec files, configs), also an object that gives a key twice ("the key 'nodes' is
// given twice"). Without it the last value wins, as in JavaScript and Python: a program's
// output may hold two keys that differed only in bytes its encoder replaced (U+FFFD).
// Never throws.
std::expected<json, JsonParseError> ParseJsonText(std::string_view text, bool refuse_duplicate_keys = false);

// ParseJsonText with kInvalidArgument errors: a syntax error names `what` and the byte
// offset ("request body is not valid JSON: syntax error at byte 12"); a number out of
// range names its field ("nodes: number out of range: 1e400"), or `what` at the top level.
Result<json> ParseJson(std::string_view text, std::string_view what = "request body");

// A value as messages show it: dump(), except that non-finite numbers (which dump() writes
// as null) read "inf", "-inf" or "nan", and long values are cut at `max_chars`.
std::string JsonValueText(const json& j, size_t max_chars = 200);

// Human name of a JSON value's type ("string", "integer", "array").
std::string_view JsonTypeName(const json& j);

// What a decoder does with the fields of an object it did not read. kRefuse for what a
// person writes (a job spec, a CLI request), where an unknown field is a typo; kIgnore for
// what another Cohort version sends between head and agent during a rolling upgrade, where
// refusing a new field would cut the node off (docs/ARCHITECTURE.md, "Wire compatibility").
// Ignored fields are dropped: a decoder copies only what it read.
enum class UnknownFields { kRefuse, kIgnore };

// Levenshtein distance, for "did you mean" suggestions.
size_t EditDistance(std::string_view a, std::string_view b);

class ObjectReader {
 public:
  // Fails unless `j` is an object. `path` prefixes field names in messages ("spec").
  static Result<ObjectReader> Open(const json& j, std::string path = {});

  bool Has(std::string_view key) const;

  // A missing field takes `def`; with no default the field is required. A string longer
  // than `max_bytes` is an error naming the limit.
  Result<std::string> String(std::string_view key, std::optional<std::string> def = std::nullopt,
                             size_t max_bytes = SIZE_MAX);
  Result<int64_t> Int(std::string_view key, std::optional<int64_t> def, int64_t min, int64_t max);
  Result<double> Double(std::string_view key, std::optional<double> def, double min, double max);
  Result<bool> Bool(std::string_view key, std::optional<bool> def = std::nullopt);
  Result<std::vector<std::string>> StringList(std::string_view key,
                                              std::optional<std::vector<std::string>> def);
  Result<std::map<std::string, std::string>> StringMap(std::string_view key);
  // The raw value of a nested field (marked as read), or nullptr when absent.
  const json* Raw(std::string_view key);

  // Full name of a field for messages: "spec.nodes".
  std::string FieldName(std::string_view key) const;

  // Rejects any field that no accessor read.
  Result<void> Finish() const;
  // Finish() under kRefuse; OK under kIgnore.
  Result<void> Finish(UnknownFields unknown) const {
    if (unknown == UnknownFields::kIgnore) return {};
    return Finish();
  }

 private:
  ObjectReader(const json& j, std::string path) : j_(&j), path_(std::move(path)) {}
  const json* Find(std::string_view key);

  const json* j_;
  std::string path_;
  std::set<std::string, std::less<>> seen_;
};

}  // namespace cohort
