// Job dependencies: a spec's `dependency` (`cohort submit --dependency`), in Slurm's syntax.
//
//   after:12          start once job 12 has started (or was cancelled before it did)
//   afterany:12:13    start once jobs 12 and 13 have ended, however
//   afterok:12        start once job 12 SUCCEEDED; never if it ends otherwise
//   afternotok:12     start once job 12 ended otherwise (FAILED, TIMEOUT, CANCELLED); never if it SUCCEEDED
//   singleton         start once no earlier job of the same name and user is active
//
// Conditions are joined with ',' (all must hold). A job id may name an array (all its
// elements: it ends SUCCEEDED only if every element did) or one element ("12_7"). The head
// evaluates them at each scheduling pass (head/core/dependencies.h). Pure values; any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/job_array.h"
#include "common/error.h"

namespace cohort::api {

enum class DependencyKind { kAfter, kAfterAny, kAfterOk, kAfterNotOk, kSingleton };
std::string_view DependencyKindName(DependencyKind k);  // "afterok", ...

struct DependencyCondition {
  DependencyKind kind = DependencyKind::kAfterAny;
  std::vector<JobRef> jobs;  // empty for singleton
};

inline constexpr size_t kMaxDependencyJobs = 1000;

// Parses "afterok:12:13,afterany:14_2,singleton"; kInvalidArgument naming `field` for an
// unknown type, a type without job ids (or singleton with some), a bad id, '?' (any-of,
// not supported), or more than kMaxDependencyJobs ids.
Result<std::vector<DependencyCondition>> ParseDependency(std::string_view text, const std::string& field);

// The canonical text ParseDependency reads back.
std::string FormatDependency(const std::vector<DependencyCondition>& conditions);

}  // namespace cohort::api
