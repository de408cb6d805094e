// The head's other replies as the CLI and the agents decode them: a stored job and node,
// the node list, a job's status, the dashboard and the usage report. The first byte picks
// the decoder ('0'..'5'); the rest is the body. What is accepted must survive its own
// encoding.
#include "api/dashboard.h"
#include "api/types.h"
#include "api/usage.h"
#include "api/views.h"
#include "fuzz_util.h"

namespace {

using namespace cohort;

json Encode(const auto& value) { return api::ToJson(value); }
Result<api::JobStatus> JobStatusFromJson(const json& j) { return api::JobStatusFromJson(j); }

const fuzz::BodyFuzzer kDecoders[] = {
    [](std::string_view b) { fuzz::FuzzMessage(b, api::JobFromJson, Encode<api::Job>, "job"); },
    [](std::string_view b) { fuzz::FuzzMessage(b, api::NodeFromJson, Encode<api::Node>, "node"); },
    [](std::string_view b) { fuzz::FuzzMessage(b, api::NodeListFromJson, api::NodeListToJson, "node list"); },
    [](std::string_view b) { fuzz::FuzzMessage(b, JobStatusFromJson, Encode<api::JobStatus>, "job status"); },
    [](std::string_view b) { fuzz::FuzzMessage(b, api::DashboardFromJson, Encode<api::Dashboard>, "dashboard"); },
    [](std::string_view b) { fuzz::FuzzMessage(b, api::UsageReportFromJson, Encode<api::UsageReport>, "usage report"); },
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzSelected(data, size, kDecoders);
  return 0;
}
