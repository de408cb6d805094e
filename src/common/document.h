// Documents from files: YAML or JSON text → JSON, with errors a person can act on.
//
// Used for job spec files (src/cli) and training configs (src/engine). A file's format
// comes from its extension (.yaml/.yml: YAML, .json: JSON; anything else: JSON if it
// parses as JSON, else YAML). YAML scalars convert by YAML 1.2 core-schema rules: a
// quoted scalar is always a string; an unquoted one is null (~, null, empty), a boolean
// (true/false), an integer (12, -3, 0x1F, 0o17), a float (1.5, 1e3, .inf) or else a
// string — except under the top-level keys in `string_fields`, whose values stay strings
// whatever they look like.
//
// Every error is kInvalidArgument and starts with the source (the path as the user typed
// it); syntax errors carry a 1-based line and column: "job.yaml:3:7: ...". Pure functions
// apart from reading the file; any thread.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json.h"

namespace cohort {

// Converts one YAML document to JSON. `source` names the text in errors. Fails on a
// syntax error (with line and column), on more than one document, on a mapping key that
// is not a scalar, on a duplicate key, and on a key or value that is not UTF-8 (JSON
// cannot hold it).
Result<json> YamlToJson(std::string_view text, std::string_view source,
                        const std::set<std::string, std::less<>>& string_fields = {});

// Parses JSON text, reporting a syntax error as "source:LINE:COL: ..."; a key given twice
// in one object is an error, as in YAML.
Result<json> JsonFromText(std::string_view text, std::string_view source);

// Reads a whole file ("-": standard input). kInvalidArgument naming the path and the OS
// reason when it is missing, unreadable, a directory, or larger than max_bytes.
Result<std::string> ReadDocumentText(const std::string& path, size_t max_bytes = 16 << 20);

// ReadDocumentText, then YAML or JSON as described above.
Result<json> LoadDocument(const std::string& path,
                          const std::set<std::string, std::less<>>& string_fields = {},
                          size_t max_bytes = 16 << 20);

}  // namespace cohort
