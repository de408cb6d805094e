#include "api/job_dependency.h"

#include <fmt/format.h>

namespace cohort::api {

namespace {

constexpr std::pair<std::string_view, DependencyKind> kKinds[] = {
    {"after", DependencyKind::kAfter},
    {"afterany", DependencyKind::kAfterAny},
    {"afterok", DependencyKind::kAfterOk},
    {"afternotok", DependencyKind::kAfterNotOk},
    {"singleton", DependencyKind::kSingleton},
};

std::string RefText(const JobRef& r) { return r.is_element() ? fmt::format("{}_{}", r.job, r.task) : std::to_string(r.job); }

}  // namespace

std::string_view DependencyKindName(DependencyKind k) {
  for (const auto& [name, kind] : kKinds) {
    if (kind == k) return name;
  }
  return "?";
}

Result<std::vector<DependencyCondition>> ParseDependency(std::string_view text, const std::string& field) {
  std::vector<DependencyCondition> out;
  if (text.find('?') != std::string_view::npos) {
    return FieldError(field, "'{}': '?' (any of the conditions) is not supported; join conditions with ','",
                      text.substr(0, 64));
  }
  size_t ids = 0;
  for (const std::string_view part : SplitParts(text, ',')) {
    if (part.empty()) return FieldError(field, "'{}' has an empty condition between commas", text.substr(0, 64));
    const size_t colon = part.find(':');
    const std::string_view type = part.substr(0, colon);
    DependencyCondition c;
    bool known = false;
    for (const auto& [name, kind] : kKinds) {
      if (type == name) {
        c.kind = kind;
        known = true;
      }
    }
    if (!known) {
      return FieldError(field, "'{}': unknown dependency type '{}'; use after, afterany, afterok, afternotok or "
                               "singleton",
                        part.substr(0, 64), type.substr(0, 32));
    }
    if (c.kind == DependencyKind::kSingleton) {
      if (colon != std::string_view::npos) return FieldError(field, "'{}': singleton takes no job ids", part.substr(0, 64));
      out.push_back(std::move(c));
      continue;
    }
    if (colon == std::string_view::npos) {
      return FieldError(field, "'{}' names no job: write {}:JOBID[:JOBID...]", part.substr(0, 64), type);
    }
    for (const std::string_view id : SplitParts(part.substr(colon + 1), ':')) {
      c.jobs.push_back(COHORT_TRY(ParseJobRef(id, field)));
      if (++ids > kMaxDependencyJobs) return FieldError(field, "names more than {} jobs", kMaxDependencyJobs);
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string FormatDependency(const std::vector<DependencyCondition>& conditions) {
  std::string out;
  for (const auto& c : conditions) {
    if (!out.empty()) out += ',';
    out += DependencyKindName(c.kind);
    for (const auto& r : c.jobs) out += ":" + RefText(r);
  }
  return out;
}

}  // namespace cohort::api
