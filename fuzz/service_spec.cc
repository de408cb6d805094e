// Inference services on the wire: the spec `cohort serve deploy` sends (POST
// /v1/services) and the status view the head answers with. The first byte picks the
// decoder ('0' spec, '1' status); what is accepted must survive its own encoding.
#include "api/service.h"
#include "fuzz_util.h"

namespace {

using namespace cohort;

json Encode(const auto& value) { return api::ToJson(value); }

const fuzz::BodyFuzzer kDecoders[] = {
    [](std::string_view b) { fuzz::FuzzMessage(b, api::ServiceSpecFromJson, Encode<api::ServiceSpec>, "service spec"); },
    [](std::string_view b) {
      fuzz::FuzzMessage(b, api::ServiceStatusFromJson, Encode<api::ServiceStatus>, "service status");
    },
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzSelected(data, size, kDecoders);
  return 0;
}
