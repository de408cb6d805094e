// A job spec as `POST /v1/jobs` and `cohort submit job.json` take it: JSON text through
// the strict parser and api::JobSpecFromJson (via cli::JobSpecFromDocument, the file
// path's check). What is accepted must survive its own encoding (ToJson, dump, parse).
#include "api/types.h"
#include "cli/job_spec_file.h"
#include "common/document.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  auto doc = JsonFromText(fuzz::AsText(data, size), "job.json");
  fuzz::CheckError(doc, "JsonFromText");
  if (!doc) return 0;
  auto spec = cli::JobSpecFromDocument(*doc, "job.json");
  fuzz::CheckError(spec, "JobSpecFromDocument");
  if (!spec) return 0;
  fuzz::CheckRoundTrip(
      api::ToJson(*spec), [](const json& j) { return api::JobSpecFromJson(j); },
      [](const api::JobSpec& s) { return api::ToJson(s); }, "job spec");
  return 0;
}
