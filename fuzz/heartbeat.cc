// The agent protocol's bodies as the head and the agent decode them: a registration and a
// heartbeat (agent to head), a heartbeat reply and an agent timing (head to agent). The
// first byte picks the decoder ('0'..'3'); the rest is the body. What is accepted must
// survive its own encoding.
#include "api/types.h"
#include "fuzz_util.h"

namespace {

using namespace cohort;

json Encode(const auto& value) { return api::ToJson(value); }

const fuzz::BodyFuzzer kDecoders[] = {
    [](std::string_view b) { fuzz::FuzzMessage(b, api::RegistrationFromJson, Encode<api::Registration>, "registration"); },
    [](std::string_view b) { fuzz::FuzzMessage(b, api::HeartbeatFromJson, Encode<api::Heartbeat>, "heartbeat"); },
    [](std::string_view b) { fuzz::FuzzMessage(b, api::HeartbeatReplyFromJson, Encode<api::HeartbeatReply>, "heartbeat reply"); },
    [](std::string_view b) { fuzz::FuzzMessage(b, api::AgentTimingFromJson, Encode<api::AgentTiming>, "agent timing"); },
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzSelected(data, size, kDecoders);
  return 0;
}
