// Job spec files for `cohort submit`: YAML or JSON on disk → api::JobSpec.
//
// The file's format comes from its extension (.yaml/.yml: YAML, .json: JSON; anything
// else: JSON if it parses as JSON, else YAML). YAML is converted to the same JSON the API
// takes, then checked by api::JobSpecFromJson, so a file and a POST body obey exactly the
// same rules. YAML scalars convert by YAML 1.2 core-schema rules: a quoted scalar is
// always a string; an unquoted one is null (~, null, empty), a boolean (true/false), an
// integer (12, -3, 0x1F, 0o17), a float (1.5, 1e3, .inf) or else a string — except
// inside `command` and `env`, whose values are strings whatever they look like.
//
// Every error is kInvalidArgument (exit code 2) and starts with the file name as the user
// typed it, then the field: "job.yaml: nodes: must be between 1 and 4096, got 0". Syntax
// errors carry a 1-based line and column: "job.yaml:3:7: ...". Pure functions apart from
// reading the file; safe to call from any thread.
#pragma once

#include <set>
#include <string>
#include <string_view>

#include "api/types.h"
#include "common/document.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::cli {

// The YAML/JSON conversion lives in common/document.h (shared with training configs).
using ::cohort::JsonFromText;
using ::cohort::YamlToJson;

// The fields LoadSpecDocument passes as `string_fields`: "command" and "env".
const std::set<std::string, std::less<>>& SpecStringFields();

// Reads `path` and parses it as described above, without checking it is a job spec.
// A missing or unreadable file is kInvalidArgument naming the path and the OS reason.
Result<json> LoadSpecDocument(const std::string& path);

// Adds to an error about spec document `doc` how to mend a common mistake (a command written
// as one string instead of a list).
void AddSpecHint(Error& e, const json& doc);

// Checks a spec document with api::JobSpecFromJson, prefixing errors with `source`.
// An empty document (null) gets its own message rather than a type error.
Result<api::JobSpec> JobSpecFromDocument(const json& doc, std::string_view source);

// LoadSpecDocument then JobSpecFromDocument.
Result<api::JobSpec> LoadJobSpecFile(const std::string& path);

}  // namespace cohort::cli
