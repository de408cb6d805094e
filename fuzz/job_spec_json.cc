// A job spec as `POST /v1/jobs` and `cohort submit job.json` take it: JSON text through
// the strict parser, then the checks of job_spec_check.h.
#include "common/document.h"
#include "job_spec_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  auto doc = JsonFromText(fuzz::AsText(data, size), "job.json");
  fuzz::CheckError(doc, "JsonFromText");
  if (doc) fuzz::CheckJobSpecDocument(*doc, "job.json");
  return 0;
}
