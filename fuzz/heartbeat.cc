// The agent protocol's bodies as the head and the agent decode them: a registration and a
// heartbeat (agent to head), a heartbeat reply and an agent timing (head to agent). The
// first byte picks the decoder ('0'..'3'); the rest is the body. What is accepted must
// survive its own encoding.
#include "api/types.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  auto [which, body] = fuzz::Select(data, size, 4);
  auto encode = [](const auto& v) { return api::ToJson(v); };
  switch (which) {
    case 0:
      fuzz::FuzzMessage(body, api::RegistrationFromJson, encode, "registration");
      break;
    case 1:
      fuzz::FuzzMessage(body, api::HeartbeatFromJson, encode, "heartbeat");
      break;
    case 2:
      fuzz::FuzzMessage(body, api::HeartbeatReplyFromJson, encode, "heartbeat reply");
      break;
    default:
      fuzz::FuzzMessage(body, api::AgentTimingFromJson, encode, "agent timing");
      break;
  }
  return 0;
}
