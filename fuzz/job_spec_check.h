// What the two job spec targets check on a document, however it was written: the CLI's
// check (cli::JobSpecFromDocument), and that an accepted spec survives its own encoding
// (ToJson, dump, parse, JobSpecFromJson), as the CLI sends it to the head.
#pragma once

#include "api/types.h"
#include "cli/job_spec_file.h"
#include "fuzz_util.h"

namespace cohort::fuzz {

inline void CheckJobSpecDocument(const json& doc, std::string_view source) {
  auto spec = cli::JobSpecFromDocument(doc, source);
  CheckError(spec, "JobSpecFromDocument");
  if (!spec) return;
  CheckRoundTrip(
      api::ToJson(*spec), [](const json& j) { return api::JobSpecFromJson(j); },
      [](const api::JobSpec& s) { return api::ToJson(s); }, source);
}

}  // namespace cohort::fuzz
