// A job spec file in YAML as `cohort submit job.yaml` reads it: common/document's YAML
// to JSON conversion (alias and depth checks, core-schema scalars, `command` and `env`
// kept as strings), then the checks of job_spec_check.h.
#include "common/document.h"
#include "job_spec_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  auto doc = YamlToJson(fuzz::AsText(data, size), "job.yaml", cli::SpecStringFields());
  fuzz::CheckError(doc, "YamlToJson");
  if (!doc) return 0;
  // What the conversion makes is JSON the CLI may send: the head's parser must take it
  // (the same depth limit; non-finite numbers dump as null).
  auto sent = ParseJson(doc->dump(-1, ' ', false, json::error_handler_t::replace), "yaml");
  if (!sent) fuzz::Fail("YAML converted to JSON the parser refuses: {}", sent.error().message);
  fuzz::CheckJobSpecDocument(*doc, "job.yaml");
  return 0;
}
