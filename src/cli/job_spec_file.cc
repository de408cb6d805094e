#include "cli/job_spec_file.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "common/document.h"

namespace cohort::cli {
namespace {

std::unexpected<Error> InputError(std::string message) {
  return MakeError(ErrorCode::kInvalidArgument, std::move(message));
}

}  // namespace

const std::set<std::string, std::less<>>& SpecStringFields() {
  static const std::set<std::string, std::less<>> kFields = {"command", "env"};
  return kFields;
}

Result<json> LoadSpecDocument(const std::string& path) {
  return LoadDocument(path, SpecStringFields());
}

Result<api::JobSpec> JobSpecFromDocument(const json& doc, std::string_view source) {
  if (doc.is_null()) {
    return InputError(fmt::format("{}: is empty; a job spec needs at least 'command'", source));
  }
  if (!doc.is_object()) {
    return InputError(fmt::format("{}: must be a mapping of spec fields (name, command, nodes, ...), got {}",
                                  source, JsonTypeName(doc)));
  }
  auto spec = api::JobSpecFromJson(doc);
  if (!spec) {
    Error e = WithContext(spec.error(), source);
    AddSpecHint(e, doc);
    return std::unexpected(std::move(e));
  }
  return spec;
}

void AddSpecHint(Error& e, const json& doc) {
  if (e.field == "command" && doc.is_object() && doc.contains("command") && doc["command"].is_string()) {
    e.message += " (write the program and its arguments as a list, e.g. [python, train.py])";
  }
  // A service file (api/service.h: kind service, a model, replicas) is not a job spec:
  // whatever its first error as one ("command: is required"), say what reads it.
  if (doc.is_object() && doc.value("kind", json()) == "service" && doc.contains("model")) {
    e.message += " (this is a service file, kind: service with a model: deploy it with `cohort serve deploy "
                 "FILE`, which makes its replicas' jobs)";
  }
}

Result<api::JobSpec> LoadJobSpecFile(const std::string& path) {
  json doc = COHORT_TRY(LoadSpecDocument(path));
  return JobSpecFromDocument(doc, path == "-" ? "<stdin>" : path);
}

}  // namespace cohort::cli
