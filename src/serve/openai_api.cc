#include "serve/openai_api.h"

#include <algorithm>
#include <charconv>
#include <random>

#include "serve/text_stream.h"

namespace cohort::serve {

namespace {

constexpr int kMaxStopStrings = 4;
constexpr size_t kMaxStopBytes = 256;
constexpr size_t kMaxPromptBytes = 4 << 20;

constexpr size_t kMaxLogitBias = 300;
constexpr double kMaxBias = 100;

// Reads `logit_bias`: an object of at most 300 token ids (decimal integers as strings, as
// JSON keys must be) to a bias in [-100, 100]. Errors name the entry: logit_bias.<key>.
Result<std::vector<std::pair<int32_t, float>>> ReadLogitBias(const json* v, int vocab) {
  std::vector<std::pair<int32_t, float>> out;
  if (!v) return out;
  if (!v->is_object()) {
    return FieldError("logit_bias", "must be an object of token id to bias, got {}", JsonTypeName(*v));
  }
  if (v->size() > kMaxLogitBias) {
    return FieldError("logit_bias", "at most {} entries, got {}", kMaxLogitBias, v->size());
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    const std::string shown = key.size() > 40 ? key.substr(0, 40) + "..." : key;
    const std::string field = "logit_bias." + shown;
    int64_t id = 0;
    const char* end = key.data() + key.size();
    const auto [ptr, ec] = std::from_chars(key.data(), end, id);
    if (key.empty() || ec == std::errc::invalid_argument || ptr != end) {
      return FieldError(field, "'{}' is not a token id: the keys are token ids (integers, as strings)", shown);
    }
    if (ec == std::errc::result_out_of_range || id < 0 || id >= vocab) {
      return FieldError(field, "token id {} is outside the vocabulary [0, {})", shown, vocab);
    }
    const json& bias = it.value();
    if (!bias.is_number()) return FieldError(field, "must be a number in [-100, 100], got {}", JsonTypeName(bias));
    const double b = bias.get<double>();
    if (!(b >= -kMaxBias && b <= kMaxBias)) return FieldError(field, "must be in [-100, 100], got {}", b);
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].first == out[i - 1].first) {
      return FieldError("logit_bias", "token id {} is given twice (as two spellings of one integer)", out[i].first);
    }
  }
  return out;
}

// Reads `stop`: a string or an array of at most 4 strings.
Result<std::vector<std::string>> ReadStop(const json* v) {
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStopStrings) {
      return FieldError("stop", "at most {} stop strings, got {}", kMaxStopStrings, v->size());
    }
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        return FieldError(fmt::format("stop[{}]", i), "must be a string, got {}", JsonTypeName((*v)[i]));
      }
      out.push_back((*v)[i].get<std::string>());
    }
  } else {
    return FieldError("stop", "must be a string or an array of strings, got {}", JsonTypeName(*v));
  }
  for (const auto& s : out) {
    if (s.size() > kMaxStopBytes) return FieldError("stop", "a stop string is at most {} bytes", kMaxStopBytes);
  }
  return out;
}

Result<std::vector<int32_t>> ReadTokenIds(const json& v, const std::string& field, int vocab) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    if (!t.is_number_integer()) {
      return FieldError(fmt::format("{}[{}]", field, i), "must be a token id (an integer), got {}",
                        JsonTypeName(t));
    }
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab) {
      return FieldError(fmt::format("{}[{}]", field, i), "token id {} is outside [0, {})", id, vocab);
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

// The prompts of /v1/completions: a string or token ids (one prompt), or a list of strings
// and token-id lists (one prompt each). None may encode to no tokens.
Result<std::vector<std::vector<int32_t>>> ReadPrompts(const json* v, const engine::Tokenizer& tok) {
  if (!v) return FieldError("prompt", "is required");
  auto encode = [&](const std::string& s, const std::string& field) -> Result<std::vector<int32_t>> {
    if (s.size() > kMaxPromptBytes) return FieldError(field, "is longer than {} bytes", kMaxPromptBytes);
    std::vector<int32_t> ids = tok.Encode(s);
    if (ids.empty()) return FieldError(field, "is empty (it encodes to no tokens)");
    return ids;
  };
  std::vector<std::vector<int32_t>> out;
  if (v->is_string()) {
    out.push_back(COHORT_TRY(encode(v->get_ref<const std::string&>(), "prompt")));
    return out;
  }
  if (!v->is_array()) {
    return FieldError("prompt", "must be a string, an array of token ids or a list of prompts, got {}",
                      JsonTypeName(*v));
  }
  if (v->empty()) return FieldError("prompt", "is empty");
  const json& first = (*v)[0];
  if (!first.is_string() && !first.is_array()) {
    out.push_back(COHORT_TRY(ReadTokenIds(*v, "prompt", tok.vocab_size())));
    return out;
  }
  if (v->size() > static_cast<size_t>(kMaxChoices)) {
    return FieldError("prompt", "at most {} prompts in one request, got {}", kMaxChoices, v->size());
  }
  size_t bytes = 0;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& p = (*v)[i];
    const std::string field = fmt::format("prompt[{}]", i);
    if (p.is_string()) {
      bytes += p.get_ref<const std::string&>().size();
      if (bytes > kMaxPromptBytes) return FieldError("prompt", "is longer than {} bytes in all", kMaxPromptBytes);
      out.push_back(COHORT_TRY(encode(p.get_ref<const std::string&>(), field)));
    } else if (p.is_array()) {
      if (p.empty()) return FieldError(field, "is empty");
      out.push_back(COHORT_TRY(ReadTokenIds(p, field, tok.vocab_size())));
    } else {
      return FieldError(field, "must be a string or an array of token ids, got {}", JsonTypeName(p));
    }
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> ReadMessages(const json* v) {
  if (!v) return FieldError("messages", "is required");
  if (!v->is_array()) return FieldError("messages", "must be an array, got {}", JsonTypeName(*v));
  if (v->empty()) return FieldError("messages", "is empty");
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string path = fmt::format("messages[{}]", i);
    ObjectReader m = COHORT_TRY(ObjectReader::Open((*v)[i], path));
    std::string role = COHORT_TRY(m.String("role"));
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant") {
      return FieldError(path + ".role", "must be system, developer, user or assistant, got '{}'", role);
    }
    const json* content = m.Raw("content");
    std::string text;
    if (!content || content->is_null()) {
      text = "";
    } else if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const std::string part_path = fmt::format("{}.content[{}]", path, k);
        ObjectReader part = COHORT_TRY(ObjectReader::Open((*content)[k], part_path));
        const std::string type = COHORT_TRY(part.String("type"));
        if (type != "text") return FieldError(part_path + ".type", "only text parts are supported, got '{}'", type);
        text += COHORT_TRY(part.String("text"));
        COHORT_TRY_VOID(part.Finish());
      }
    } else {
      return FieldError(path + ".content", "must be a string or an array of text parts, got {}",
                        JsonTypeName(*content));
    }
    (void)m.Raw("name");
    COHORT_TRY_VOID(m.Finish());
    out.emplace_back(std::move(role), std::move(text));
  }
  return out;
}

// Without nulls (OpenAI clients send "stop": null for "not given").
json WithoutNulls(const json& body) {
  json out = json::object();
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (!it.value().is_null()) out[it.key()] = it.value();
  }
  return out;
}

// Chat fields OpenAI defines for what this server does not do (tools, structured output,
// stored completions), accepted with the values that ask for none of it.
Result<void> ReadNeutralChatFields(ObjectReader& r) {
  if (const json* v = r.Raw("response_format")) {
    ObjectReader f = COHORT_TRY(ObjectReader::Open(*v, "response_format"));
    const std::string type = COHORT_TRY(f.String("type"));
    if (type != "text") return FieldError("response_format.type", "only 'text' is supported, got '{}'", type);
    COHORT_TRY_VOID(f.Finish());
  }
  for (const char* key : {"tools", "functions"}) {
    if (const json* v = r.Raw(key); v && !(v->is_array() && v->empty())) {
      return FieldError(key, "tools are not supported (only an empty list)");
    }
  }
  for (const char* key : {"tool_choice", "function_call"}) {
    if (!r.Has(key)) continue;
    const std::string choice = COHORT_TRY(r.String(key));
    if (choice != "none" && choice != "auto") {
      return FieldError(key, "tools are not supported (only 'none' or 'auto'), got '{}'", choice);
    }
  }
  (void)COHORT_TRY(r.Bool("parallel_tool_calls", true));
  if (COHORT_TRY(r.Bool("store", false))) return FieldError("store", "stored completions are not supported");
  if (const json* v = r.Raw("metadata"); v && !v->is_object()) {
    return FieldError("metadata", "must be an object, got {}", JsonTypeName(*v));
  }
  return {};
}

}  // namespace

namespace {

// Bytes of `text` that start a character: every byte but a continuation byte.
size_t LeadBytes(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

// `text` ends in a character cut short (a token holding part of one): not there yet.
bool EndsIncomplete(std::string_view text) {
  for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back;
  }
  return false;
}

}  // namespace

size_t CodePoints(std::string_view text) { return LeadBytes(text) - (EndsIncomplete(text) ? 1 : 0); }

std::string ApplyChatTemplate(const std::vector<std::pair<std::string, std::string>>& messages) {
  std::string out;
  for (const auto& [role, content] : messages) {
    out += role == "system" ? "System: " : role == "user" ? "User: " : "Assistant: ";
    out += content;
    out += "\n";
  }
  out += "Assistant:";
  return out;
}

Result<ApiRequest> ParseApiRequest(const json& raw, bool chat, const engine::Tokenizer& tok) {
  if (!raw.is_object()) {
    return FieldError("body", "must be a JSON object, got {}", JsonTypeName(raw));
  }
  const json body = WithoutNulls(raw);
  ObjectReader r = COHORT_TRY(ObjectReader::Open(body));
  ApiRequest out;
  out.chat = chat;
  out.model = COHORT_TRY(r.String("model", std::nullopt, 256));
  GenerationRequest& g = out.generation;
  std::vector<std::string> extra_stop;
  std::vector<std::vector<int32_t>> prompts;
  if (chat) {
    const auto messages = COHORT_TRY(ReadMessages(r.Raw("messages")));
    prompts.push_back(tok.Encode(ApplyChatTemplate(messages)));
    g.prompt_field = "messages";
    extra_stop = {"\nUser:", "\nSystem:"};
  } else {
    prompts = COHORT_TRY(ReadPrompts(r.Raw("prompt"), tok));
  }
  g.tokens = prompts.front();
  constexpr int64_t kMaxTokens = 1 << 20;
  g.max_tokens_default = !r.Has("max_tokens") && !(chat && r.Has("max_completion_tokens"));
  if (chat && r.Has("max_completion_tokens")) {
    g.max_tokens = static_cast<int>(COHORT_TRY(r.Int("max_completion_tokens", 16, 1, kMaxTokens)));
    g.max_tokens_field = "max_completion_tokens";
    (void)r.Raw("max_tokens");
  } else {
    g.max_tokens = static_cast<int>(COHORT_TRY(r.Int("max_tokens", chat ? 256 : 16, chat ? 1 : 0, kMaxTokens)));
  }
  g.sampling.temperature = COHORT_TRY(r.Double("temperature", 1.0, 0.0, 2.0));
  g.sampling.top_p = COHORT_TRY(r.Double("top_p", 1.0, 0.0, 1.0));
  if (g.sampling.top_p <= 0) return FieldError("top_p", "must be greater than 0, got {}", g.sampling.top_p);
  g.sampling.top_k = static_cast<int>(COHORT_TRY(r.Int("top_k", 0, -1, 1 << 20)));
  if (g.sampling.top_k < 0) g.sampling.top_k = 0;  // vLLM's -1: no limit
  if (r.Has("seed")) {
    g.sampling.seed = static_cast<uint64_t>(COHORT_TRY(r.Int("seed", 0, INT64_MIN, INT64_MAX)));
  } else {
    g.sampling.seed = std::random_device{}() * 0x100000001ULL ^ std::random_device{}();
  }
  g.stop = COHORT_TRY(ReadStop(r.Raw("stop")));
  for (auto& s : extra_stop) g.stop.push_back(s);
  out.stream = COHORT_TRY(r.Bool("stream", false));
  if (const json* so = r.Raw("stream_options")) {
    ObjectReader s = COHORT_TRY(ObjectReader::Open(*so, "stream_options"));
    out.include_usage = COHORT_TRY(s.Bool("include_usage", false));
    COHORT_TRY_VOID(s.Finish());
    if (!out.stream) return FieldError("stream_options", "is only allowed with stream: true");
  }
  if (chat) {
    const bool lp = COHORT_TRY(r.Bool("logprobs", false));
    const int top = static_cast<int>(COHORT_TRY(r.Int("top_logprobs", 0, 0, 20)));
    if (r.Has("top_logprobs") && !lp) return FieldError("top_logprobs", "needs logprobs: true");
    g.top_logprobs = lp ? top : -1;
  } else {
    g.top_logprobs = r.Has("logprobs") ? static_cast<int>(COHORT_TRY(r.Int("logprobs", 0, 0, 5))) : -1;
  }
  (void)COHORT_TRY(r.String("user", "", 256));
  out.n = static_cast<int>(COHORT_TRY(r.Int("n", 1, 1, kMaxChoices)));
  if (static_cast<int64_t>(prompts.size()) * out.n > kMaxChoices) {
    return FieldError("n", "{} prompts x n {} is {} choices; at most {} in one request", prompts.size(), out.n,
                      prompts.size() * out.n, kMaxChoices);
  }
  if (r.Has("best_of")) {
    const int64_t best_of = COHORT_TRY(r.Int("best_of", 1, 1, kMaxChoices));
    if (best_of != 1 && best_of != out.n) {
      return FieldError("best_of", "only 1 or n ({}) is supported (every choice generated is returned), got {}",
                        out.n, best_of);
    }
  }
  g.sampling.presence_penalty = COHORT_TRY(r.Double("presence_penalty", 0.0, -2.0, 2.0));
  g.sampling.frequency_penalty = COHORT_TRY(r.Double("frequency_penalty", 0.0, -2.0, 2.0));
  if (!chat) g.echo = COHORT_TRY(r.Bool("echo", false));
  if (g.max_tokens == 0 && !g.echo) {
    return FieldError("max_tokens", "must be >= 1 (0 only with echo: true, for the prompt alone), got 0");
  }
  if (!chat && r.Has("suffix")) {
    if (!COHORT_TRY(r.String("suffix", "", 1 << 20)).empty()) return FieldError("suffix", "is not supported");
  }
  g.sampling.logit_bias = COHORT_TRY(ReadLogitBias(r.Raw("logit_bias"), tok.vocab_size()));
  if (chat) COHORT_TRY_VOID(ReadNeutralChatFields(r));
  if (const json* resume = r.Raw("cohort_resume")) {
    ObjectReader s = COHORT_TRY(ObjectReader::Open(*resume, "cohort_resume"));
    const json* tokens = s.Raw("tokens");
    if (!tokens || !tokens->is_array()) return FieldError("cohort_resume.tokens", "must be an array of token ids");
    const std::vector<int32_t> ids = COHORT_TRY(ReadTokenIds(*tokens, "cohort_resume.tokens", tok.vocab_size()));
    const bool echoed = COHORT_TRY(s.Bool("echoed", false));
    COHORT_TRY_VOID(s.Finish());
    if (echoed && chat) return FieldError("cohort_resume.echoed", "a chat has no echo");
    // The text the client has, as the failed replica's reply built it: the echoed prompt
    // token by token (ResponseBuilder::AddPrompt), then what the tokens released.
    out.resuming = true;
    if (echoed) {
      for (int32_t t : prompts.front()) out.resumed_text += tok.Decode(std::span<const int32_t>(&t, 1));
    }
    TextStream replay(&tok, g.stop);
    for (int32_t t : ids) out.resumed_text += replay.Push(t);
    if (prompts.size() * out.n > 1) {
      return FieldError("cohort_resume", "a request of several choices (n, or several prompts) cannot be resumed");
    }
    if (g.echo) return FieldError("echo", "an echoed prompt cannot be resumed (cohort_resume)");
    if (static_cast<int64_t>(ids.size()) >= g.max_tokens) {
      return FieldError("cohort_resume.tokens", "{} tokens already sent leave none of max_tokens {}",
                        ids.size(), g.max_tokens);
    }
    g.tokens.insert(g.tokens.end(), ids.begin(), ids.end());
    g.resumed = static_cast<int>(ids.size());
    g.max_tokens -= g.resumed;
  }
  COHORT_TRY_VOID(r.Finish());
  // One generation per prompt and sample: sample j of a prompt draws with seed + j, so that
  // the samples differ and each is reproducible.
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int j = 0; j < out.n; ++j) {
      GenerationRequest c = g;
      if (i > 0) c.tokens = prompts[i];
      if (prompts.size() > 1) c.prompt_field = fmt::format("prompt[{}]", i);
      c.sampling.seed = g.sampling.seed + static_cast<uint64_t>(j);
      c.choice = static_cast<int>(out.choices.size());
      out.choices.push_back(std::move(c));
    }
  }
  return out;
}

std::string DumpJson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string SseData(const json& j) { return "data: " + DumpJson(j) + "\n\n"; }

// ----- ResponseBuilder ---------------------------------------------------------------------

ResponseBuilder::ResponseBuilder(const ApiRequest& request, const engine::Tokenizer& tokenizer,
                                 std::string id, int64_t created, std::string model_name,
                                 int prompt_tokens, int index)
    : request_(request),
      tokenizer_(tokenizer),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model_name)),
      prompt_tokens_(prompt_tokens),
      index_(index),
      completion_tokens_(request.generation.resumed) {
  if (request.resuming) {
    Append(request.resumed_text);
    text_start_ = text_.size();
  }
}

json ResponseBuilder::LogprobsOf(const TokenEvent& e) const {
  auto text_of = [&](int32_t t) { return tokenizer_.Decode(std::span<const int32_t>(&t, 1)); };
  auto bytes_of = [&](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(static_cast<int>(c));
    return b;
  };
  if (request_.chat) {
    json top = json::array();
    for (const auto& t : e.top) {
      const std::string s = text_of(t.token);
      top.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(s)}});
    }
    const std::string s = text_of(e.token);
    return {{"token", s}, {"logprob", e.logprob}, {"bytes", bytes_of(s)}, {"top_logprobs", top}};
  }
  if (!e.has_logprob) return {{"token", text_of(e.token)}, {"logprob", nullptr}, {"top", nullptr}};
  json top = json::object();
  for (const auto& t : e.top) top[text_of(t.token)] = t.logprob;
  return {{"token", text_of(e.token)}, {"logprob", e.logprob}, {"top", top}};
}

json ResponseBuilder::Usage() const {
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_}};
}

json ResponseBuilder::Choice(const TokenEvent* e, const std::string& text, bool last) const {
  json c = {{"index", index_}};
  const bool want_lp = request_.generation.top_logprobs >= 0;
  if (request_.chat) {
    c["delta"] = text.empty() && !e ? json::object() : json{{"content", text}};
  } else {
    c["text"] = text;
  }
  if (want_lp && e && e->token >= 0) {
    json lp = LogprobsOf(*e);
    if (request_.chat) {
      c["logprobs"] = {{"content", json::array({lp})}};
    } else {
      c["logprobs"] = {{"tokens", json::array({lp["token"]})},
                       {"token_logprobs", json::array({lp["logprob"]})},
                       {"top_logprobs", json::array({lp["top"]})},
                       {"text_offset", json::array({offset_})}};
    }
  } else {
    c["logprobs"] = nullptr;
  }
  c["finish_reason"] = last ? json(finish_reason_) : json(nullptr);
  if (e && e->token >= 0) c["token_ids"] = json::array({e->token});
  return c;
}

std::string ResponseBuilder::Opening() const {
  if (!request_.chat || request_.resuming) return "";
  json chunk = {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_}};
  chunk["choices"] = json::array({{{"index", index_},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}});
  return SseData(chunk);
}

std::string ResponseBuilder::Add(const TokenEvent& e) {
  if (e.prompt) return AddPrompt(e);
  if (e.token >= 0) ++completion_tokens_;
  const bool last = !e.finish_reason.empty();
  if (last) {
    finish_reason_ = e.finish_reason == "error" ? "error" : e.finish_reason;
    error_ = e.error;
  }
  offset_ = Chars();
  Append(e.text);
  if (!request_.stream) {
    if (request_.generation.top_logprobs >= 0 && e.token >= 0) {
      events_.push_back(e);
      offsets_.push_back(offset_);
    }
    return "";
  }
  if (last && e.finish_reason == "error") {
    Error err(ErrorCode::kInternal, e.error.empty() ? "generation failed" : e.error);
    return SseData(OpenAiErrorBody(err));
  }
  json chunk = {{"id", id_},
                {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_}};
  chunk["choices"] = json::array({Choice(&e, e.text, last)});
  return SseData(chunk);
}

size_t ResponseBuilder::Chars() const { return lead_bytes_ - (EndsIncomplete(text_) ? 1 : 0); }

void ResponseBuilder::Append(std::string_view text) {
  text_ += text;
  lead_bytes_ += LeadBytes(text);
}

// The prompt's tokens arrive one event each (GenerationRequest::echo); once all are here,
// the prompt's text starts the reply: one chunk of a stream (with no token_ids: the gateway
// counts only generated tokens), or the start of the body's text and log-probabilities.
std::string ResponseBuilder::AddPrompt(const TokenEvent& e) {
  prompt_events_.push_back(e);
  if (static_cast<int>(prompt_events_.size()) < prompt_tokens_) return "";
  const bool want_lp = request_.generation.top_logprobs >= 0;
  json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()},
             {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  const size_t start = text_.size();
  for (const TokenEvent& p : prompt_events_) {
    const size_t offset = Chars();
    if (want_lp) {
      json one = LogprobsOf(p);
      lp["tokens"].push_back(one["token"]);
      lp["token_logprobs"].push_back(one["logprob"]);
      lp["top_logprobs"].push_back(one["top"]);
      lp["text_offset"].push_back(offset);
      if (!request_.stream) {
        events_.push_back(p);
        offsets_.push_back(offset);
      }
    }
    Append(tokenizer_.Decode(std::span<const int32_t>(&p.token, 1)));
  }
  prompt_events_.clear();
  if (!request_.stream) return "";
  const std::string text = text_.substr(start);
  json choice = {{"index", index_}, {"text", text}, {"logprobs", want_lp ? lp : json(nullptr)},
                 {"finish_reason", nullptr}};
  return SseData({{"id", id_},
                  {"object", "text_completion"},
                  {"created", created_},
                  {"model", model_},
                  {"choices", json::array({choice})}});
}

std::string ResponseBuilder::Finish() const { return Finish(Usage()); }

std::string ResponseBuilder::Finish(const json& usage) const {
  std::string out;
  if (request_.include_usage) {
    json chunk = {{"id", id_},
                  {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created_},
                  {"model", model_},
                  {"choices", json::array()},
                  {"usage", usage}};
    out += SseData(chunk);
  }
  out += "data: [DONE]\n\n";
  return out;
}

json ResponseBuilder::Body() const {
  json choice = {{"index", index_}, {"finish_reason", finish_reason_}};
  json lp = nullptr;
  if (request_.generation.top_logprobs >= 0) {
    if (request_.chat) {
      lp = {{"content", json::array()}};
      for (const auto& e : events_) lp["content"].push_back(LogprobsOf(e));
    } else {
      lp = {{"tokens", json::array()}, {"token_logprobs", json::array()},
            {"top_logprobs", json::array()}, {"text_offset", json::array()}};
      for (size_t i = 0; i < events_.size(); ++i) {
        json one = LogprobsOf(events_[i]);
        lp["tokens"].push_back(one["token"]);
        lp["token_logprobs"].push_back(one["logprob"]);
        lp["top_logprobs"].push_back(one["top"]);
        lp["text_offset"].push_back(offsets_[i]);
      }
    }
  }
  choice["logprobs"] = lp;
  const std::string text = text_.substr(text_start_);
  if (request_.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  return {{"id", id_},
          {"object", request_.chat ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array({choice})},
          {"usage", Usage()}};
}

json ResponseBuilder::CombinedUsage(const std::vector<std::unique_ptr<ResponseBuilder>>& choices, int n) {
  int prompt = 0, completion = 0;
  for (size_t k = 0; k < choices.size(); ++k) {
    if (k % static_cast<size_t>(std::max(n, 1)) == 0) prompt += choices[k]->prompt_tokens();
    completion += choices[k]->completion_tokens();
  }
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

json ResponseBuilder::CombinedBody(const std::vector<std::unique_ptr<ResponseBuilder>>& choices, int n) {
  json body = choices.front()->Body();
  json all = json::array();
  for (const auto& c : choices) all.push_back(c->Body()["choices"][0]);
  body["choices"] = std::move(all);
  body["usage"] = CombinedUsage(choices, n);
  return body;
}

}  // namespace cohort::serve
