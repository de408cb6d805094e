// A replica's OpenAI-compatible requests (serve/openai_api.h) as POST /v1/completions
// ('0') and /v1/chat/completions ('1') read them, with the byte tokenizer: an error must
// say what is wrong, and an accepted request must be one the batcher can take (tokens in
// range, max_tokens >= 1, the resumed tokens within the prompt, sampling in range).
#include "engine/data/tokenizer.h"
#include "fuzz_util.h"
#include "serve/openai_api.h"

namespace {

using namespace cohort;

void Check(std::string_view body, bool chat) {
  static const auto tokenizer = engine::MakeByteTokenizer();
  auto j = ParseJson(body, "request body");
  fuzz::CheckError(j, "ParseJson");
  if (!j) return;
  auto r = serve::ParseApiRequest(*j, chat, *tokenizer);
  fuzz::CheckError(r, "ParseApiRequest");
  if (!r) return;
  const serve::GenerationRequest& g = r->generation;
  if (g.tokens.empty()) fuzz::Fail("an accepted request has no tokens");
  for (int32_t t : g.tokens) {
    if (t < 0 || t >= tokenizer->vocab_size()) fuzz::Fail("token {} is out of range", t);
  }
  if (g.max_tokens < 1) fuzz::Fail("max_tokens {} accepted", g.max_tokens);
  if (g.resumed < 0 || g.resumed > static_cast<int>(g.tokens.size())) fuzz::Fail("resumed {} accepted", g.resumed);
  if (!(g.sampling.temperature >= 0 && g.sampling.temperature <= 2) ||
      !(g.sampling.top_p > 0 && g.sampling.top_p <= 1) || g.sampling.top_k < 0) {
    fuzz::Fail("sampling out of range accepted");
  }
  if (g.top_logprobs < -1 || g.top_logprobs > 20) fuzz::Fail("top_logprobs {} accepted", g.top_logprobs);
  if (r->include_usage && !r->stream) fuzz::Fail("stream_options without stream accepted");
}

const fuzz::BodyFuzzer kKinds[] = {
    [](std::string_view b) { Check(b, false); },
    [](std::string_view b) { Check(b, true); },
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzSelected(data, size, kKinds);
  return 0;
}
