// The head's other replies as the CLI and the agents decode them: a stored job and node,
// the node list, a job's status, the dashboard and the usage report. The first byte picks
// the decoder ('0'..'5'); the rest is the body. What is accepted must survive its own
// encoding.
#include "api/dashboard.h"
#include "api/types.h"
#include "api/usage.h"
#include "api/views.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  auto [which, body] = fuzz::Select(data, size, 6);
  auto encode = [](const auto& v) { return api::ToJson(v); };
  switch (which) {
    case 0:
      fuzz::FuzzMessage(body, api::JobFromJson, encode, "job");
      break;
    case 1:
      fuzz::FuzzMessage(body, api::NodeFromJson, encode, "node");
      break;
    case 2:
      fuzz::FuzzMessage(body, api::NodeListFromJson, api::NodeListToJson, "node list");
      break;
    case 3:
      fuzz::FuzzMessage(body, [](const json& j) { return api::JobStatusFromJson(j); }, encode,
                        "job status");
      break;
    case 4:
      fuzz::FuzzMessage(body, api::DashboardFromJson, encode, "dashboard");
      break;
    default:
      fuzz::FuzzMessage(body, api::UsageReportFromJson, encode, "usage report");
      break;
  }
  return 0;
}
