// The OpenAI-compatible wire format of the server: requests of POST /v1/completions and
// POST /v1/chat/completions decoded into a GenerationRequest, replies and stream chunks
// encoded, errors in OpenAI's shape.
//
// Requests are read strictly (common/json.h): a wrong type or a value out of range is a
// 400 that names the field in `param`; a field OpenAI defines but this server does not
// implement is accepted only with its neutral value (best_of 1
// or n; chat: response_format text, no tools or functions, tool_choice
// none or auto, parallel_tool_calls, store false, metadata), and an unknown field is refused. Supported: prompt (a string
// or token ids, or a list of them: one choice each), n (choices per prompt; choice i*n + j
// is sample j of prompt i, seeded seed + j; at most kMaxChoices in all), messages (chat), max_tokens (chat also
// max_completion_tokens; when neither is sent 16, chat 256, cut to the context the prompt
// leaves), temperature [0, 2], top_p (0, 1], top_k (an extension, as vLLM's),
// seed, presence_penalty and frequency_penalty [-2, 2], logit_bias (an object of at most 300
// token ids, as strings, to a bias in [-100, 100] added to the logit: sampling.h), stop (a string or up to 4), stream with stream_options.include_usage, logprobs
// (completions: 0..5 top alternatives; chat: logprobs true with top_logprobs 0..20), user,
// and for completions echo (as vLLM: the reply's text starts with the prompt, decoded from its
// tokens; with logprobs the prompt's tokens come first in the logprobs object, the first
// with a null logprob and top_logprobs, the others the model's log-probability of each
// token after those before it; max_tokens 0 is then allowed, for the prompt alone: how
// lm-evaluation-harness scores a text's loglikelihood; a stream sends the prompt as one
// chunk before the generated tokens). text_offset counts characters (code points) of the
// choice's text, echoed prompt included.
//
// Chat template, for models without a chat format of their own (GPT-2 has none): each
// message becomes "<Role>: <content>\n" (System, User, Assistant), and the prompt ends with
// "Assistant:"; "\nUser:" and "\nSystem:" are added to the stop strings so that the model's
// turn ends where it would start writing the next one.
//
// Failover (the gateway's extension): "cohort_resume": {"tokens": [ids], "echoed": bool}
// appends tokens a failed replica already generated and sent to the prompt; this replica
// continues after them (GenerationRequest::resumed), counts them in
// usage.completion_tokens, does not repeat the chat stream's opening role chunk, and
// counts logprobs.text_offset on from the text the client already has: the prompt's echo
// when "echoed" says it went out (completions' echo), then the text the tokens released,
// replayed here as the failed replica released it (TextStream). A moved stream's offsets
// are those of one that never moved, bit for bit (a count the gateway made of the text it
// relayed could not be: JSON carries invalid UTF-8 replaced, which text_offset does not
// count so). Every stream chunk that carries a generated
// token lists it in "token_ids" (an extension OpenAI clients ignore), which is how the
// gateway knows what it has sent.
//
// Plain functions over values; any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/openai_error.h"
#include "engine/data/tokenizer.h"
#include "serve/batcher.h"

namespace cohort::serve {

inline constexpr int kMaxChoices = 128;  // prompts x n of one request

struct ApiRequest {
  bool chat = false;
  std::string model;
  GenerationRequest generation;  // the first choice's (what every choice shares)
  // Every choice's generation in the reply's order (choice k has GenerationRequest::choice
  // k): one per prompt and sample; choices[0] is `generation`.
  std::vector<GenerationRequest> choices;
  int n = 1;  // samples per prompt
  bool stream = false;
  bool include_usage = false;
  // A failover's continuation ("cohort_resume"), and the text the client already has from
  // the failed replica (an echoed prompt's included): this reply's text_offset goes on
  // after it.
  bool resuming = false;
  std::string resumed_text;
};

// Decodes a request body (parsed JSON) for the given endpoint. Errors name the field.
Result<ApiRequest> ParseApiRequest(const json& body, bool chat, const engine::Tokenizer& tokenizer);

// Characters in `text`: its UTF-8 code points, a character cut short at the end not counted
// (a stray byte that is not a continuation byte counts as one). text_offset counts these.
size_t CodePoints(std::string_view text);

// The chat template above applied to `messages` (already checked).
std::string ApplyChatTemplate(const std::vector<std::pair<std::string, std::string>>& messages);

// The SSE body text of an error inside a stream ("data: {...}\n\n").
std::string SseData(const json& j);
// A JSON text safe for any bytes (invalid UTF-8 becomes U+FFFD).
std::string DumpJson(const json& j);

// Builds one request's reply: feed every TokenEvent to Add; in a stream, Add returns the
// chunk to send (empty: nothing for this event), Finish the closing chunks; otherwise
// Body() is the whole reply once the last event was added.
class ResponseBuilder {
 public:
  // One choice's reply (`index`: its place in choices); CombinedBody and CombinedUsage join
  // those of a request with several.
  ResponseBuilder(const ApiRequest& request, const engine::Tokenizer& tokenizer, std::string id,
                  int64_t created, std::string model_name, int prompt_tokens, int index = 0);

  // The chunk announcing the assistant's turn (chat streams not resumed), or "".
  std::string Opening() const;
  std::string Add(const TokenEvent& e);
  // Closing chunks of a stream: usage (when asked; this choice's, or `usage`) and "data: [DONE]".
  std::string Finish() const;
  std::string Finish(const json& usage) const;
  json Body() const;

  const std::string& finish_reason() const { return finish_reason_; }
  const std::string& error() const { return error_; }
  int prompt_tokens() const { return prompt_tokens_; }
  int completion_tokens() const { return completion_tokens_; }

  // The usage of a request's choices (`n` per prompt): each prompt counted once, as
  // OpenAI does, and every choice's completion tokens.
  static json CombinedUsage(const std::vector<std::unique_ptr<ResponseBuilder>>& choices, int n);
  // The whole reply of a request with several choices: every choice, and CombinedUsage.
  static json CombinedBody(const std::vector<std::unique_ptr<ResponseBuilder>>& choices, int n);

 private:
  json Choice(const TokenEvent* e, const std::string& text, bool last) const;
  json LogprobsOf(const TokenEvent& e) const;
  json Usage() const;

  const ApiRequest& request_;
  const engine::Tokenizer& tokenizer_;
  std::string id_;
  int64_t created_;
  std::string model_;
  int prompt_tokens_;
  int index_;
  int completion_tokens_;
  std::string AddPrompt(const TokenEvent& e);
  // Characters (CodePoints) of text_, and text_ extended, keeping count.
  size_t Chars() const;
  void Append(std::string_view text);

  // The reply's text from text_start_; before it, a resumed reply's client's text
  // (ApiRequest::resumed_text), which text_offset counts.
  std::string text_;
  size_t text_start_ = 0;
  size_t lead_bytes_ = 0;  // text_'s bytes that start a character
  size_t offset_ = 0;      // the text_offset of the token being added (Choice)
  std::vector<TokenEvent> prompt_events_;  // an echoed prompt's tokens until all are here
  std::vector<TokenEvent> events_;  // non-stream, with log-probabilities
  std::vector<size_t> offsets_;     // each such token's text offset
  std::string finish_reason_, error_;
};

}  // namespace cohort::serve
