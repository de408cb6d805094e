// One replica over HTTP: the OpenAI-compatible routes, streaming, log-probabilities, and
// every kind of bad request answered in OpenAI's error shape while the server keeps serving.
#include <gtest/gtest.h>

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/json.h"
#include "engine/data/tokenizer.h"
#include "serve/openai_api.h"
#include "serve/server.h"
#include "serve_test_util.h"

namespace cohort::serve {
namespace {

using testing::CpuModelOf;
using testing::GatedModel;
using testing::TinyModel;

class ServerFixture {
 public:
  explicit ServerFixture(std::unique_ptr<InferenceModel> model, BatcherOptions batcher = {},
                         std::optional<std::chrono::milliseconds> keep_alive = std::nullopt) {
    ServerOptions so;
    so.model_name = "tiny";
    so.http_threads = 8;
    if (keep_alive) so.keep_alive = *keep_alive;
    auto s = InferenceServer::Create(engine::MakeByteTokenizer(), std::move(model), batcher, so);
    EXPECT_TRUE(s.has_value()) << s.error().message;
    server_ = std::move(*s);
    auto port = server_->Bind();
    EXPECT_TRUE(port.has_value());
    port_ = *port;
    thread_ = std::thread([this] { server_->Serve(); });
  }
  ~ServerFixture() {
    server_->Stop();
    thread_.join();
  }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  InferenceServer& server() { return *server_; }
  int port() const { return port_; }

 private:
  std::unique_ptr<InferenceServer> server_;
  int port_ = 0;
  std::thread thread_;
};

json Post(httplib::Client& c, const std::string& path, const std::string& body, int* status,
          httplib::Headers* headers = nullptr) {
  auto r = c.Post(path.c_str(), body, "application/json");
  if (!r) {
    ADD_FAILURE() << "no reply";
    return nullptr;
  }
  *status = r->status;
  if (headers) *headers = r->headers;
  auto j = ParseJson(r->body);
  EXPECT_TRUE(j.has_value()) << r->body;
  return j ? *j : json(nullptr);
}

// Sends a completions request with `body` over a raw connection to 127.0.0.1:`port`, for
// a test to hang up on (close) while it is served; -1 on failure.
int SendCompletionsRequest(int port, const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// The events of an SSE body: each "data: " payload ([DONE] as the string "[DONE]").
std::vector<json> Events(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") {
      out.push_back("[DONE]");
    } else {
      auto j = ParseJson(data);
      EXPECT_TRUE(j.has_value()) << data;
      if (j) out.push_back(*j);
    }
    pos = end;
  }
  return out;
}

TEST(ServeApiTest, ModelsCompletionsAndStreams) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  json m = *ParseJson(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  // One model by its id (the SDKs' models.retrieve); another id is a 404 naming the model.
  auto one = c.Get("/v1/models/tiny");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200) << one->body;
  EXPECT_EQ(ParseJson(one->body)->value("id", ""), "tiny") << one->body;
  auto other = c.Get("/v1/models/nope");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ((*ParseJson(other->body))["error"]["param"], "model") << other->body;

  int status = 0;
  json done = Post(c, "/v1/completions",
                   R"({"model":"tiny","prompt":"Hello","max_tokens":12,"temperature":0})", &status);
  ASSERT_EQ(status, 200) << done.dump();
  EXPECT_EQ(done["object"], "text_completion");
  EXPECT_EQ(done["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(done["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(done["usage"]["completion_tokens"], 12);
  EXPECT_EQ(done["usage"]["total_tokens"], 17);
  const std::string text = done["choices"][0]["text"];

  // The same request streamed: one chunk per token, the same text, usage, then [DONE].
  auto r = c.Post("/v1/completions",
                  R"({"model":"tiny","prompt":"Hello","max_tokens":12,"temperature":0,"stream":true,
                      "stream_options":{"include_usage":true}})",
                  "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  auto events = Events(r->body);
  ASSERT_EQ(events.size(), 12u + 2);
  std::string streamed;
  for (size_t i = 0; i < 12; ++i) {
    streamed += events[i]["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(events[i]["choices"][0]["token_ids"].size(), 1u);
    EXPECT_EQ(events[i]["choices"][0]["finish_reason"].is_null(), i < 11);
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(events[12]["usage"]["completion_tokens"], 12);
  EXPECT_EQ(events[13], "[DONE]");

  // Token ids as the prompt: the same continuation.
  json ids = Post(c, "/v1/completions",
                  R"({"model":"tiny","prompt":[72,101,108,108,111],"max_tokens":12,"temperature":0})", &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(ids["choices"][0]["text"], text);

  // Log-probabilities: one entry per token, each with its top alternatives.
  json lp = Post(c, "/v1/completions",
                 R"({"model":"tiny","prompt":"Hello","max_tokens":4,"temperature":0,"logprobs":3})", &status);
  ASSERT_EQ(status, 200);
  const json& l = lp["choices"][0]["logprobs"];
  ASSERT_EQ(l["tokens"].size(), 4u);
  ASSERT_EQ(l["top_logprobs"].size(), 4u);
  EXPECT_EQ(l["top_logprobs"][0].size(), 3u);
  for (const auto& v : l["token_logprobs"]) EXPECT_LE(v.get<double>(), 0.0);
  // Greedy: the chosen token is the most likely one.
  double best = -1e9;
  for (auto& [tok, v] : l["top_logprobs"][0].items()) best = std::max(best, v.get<double>());
  EXPECT_NEAR(l["token_logprobs"][0].get<double>(), best, 1e-5);
}

// lm-evaluation-harness's loglikelihood requests, as vLLM answers them (the legacy
// completions contract): echo returns the prompt's text before the completion; with
// logprobs the prompt's tokens come first in the logprobs object, the first with a null
// log-probability, each other one the model's own (GptModel::Forward over the same tokens);
// max_tokens 0 with echo is the prompt alone; text_offset counts characters of the text
// returned. echo was refused ("is not supported") and max_tokens 0 with it.
TEST(ServeApiTest, EchoReturnsThePromptWithTheModelsOwnLogprobs) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  const std::string prompt = "Hello, world";
  const std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  const int T = static_cast<int>(tokens.size());
  const size_t V = 256, Vp = static_cast<size_t>(ref.config().padded_vocab_size());
  ASSERT_TRUE(ref.Forward(tokens, {}, 1, T).has_value());
  // log p(tokens[p] | tokens[< p]): the log-softmax of the logits at position p - 1.
  auto expected = [&](int p) {
    const float* row = ref.logits().data() + static_cast<size_t>(p - 1) * Vp;
    double max = row[0], sum = 0;
    for (size_t v = 0; v < V; ++v) max = std::max<double>(max, row[v]);
    for (size_t v = 0; v < V; ++v) sum += std::exp(row[v] - max);
    return row[tokens[p]] - max - std::log(sum);
  };

  int status = 0;
  json only = Post(c, "/v1/completions",
                   json{{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 2}}.dump(),
                   &status);
  ASSERT_EQ(status, 200) << only.dump();
  const json& ch = only["choices"][0];
  EXPECT_EQ(ch["text"], prompt);
  EXPECT_EQ(ch["finish_reason"], "length");
  EXPECT_EQ(only["usage"]["prompt_tokens"], T);
  EXPECT_EQ(only["usage"]["completion_tokens"], 0);
  const json& lp = ch["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), static_cast<size_t>(T)) << lp.dump();
  ASSERT_EQ(lp["token_logprobs"].size(), static_cast<size_t>(T));
  ASSERT_EQ(lp["top_logprobs"].size(), static_cast<size_t>(T));
  ASSERT_EQ(lp["text_offset"].size(), static_cast<size_t>(T));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null()) << lp.dump();
  EXPECT_TRUE(lp["top_logprobs"][0].is_null()) << lp.dump();
  for (int p = 0; p < T; ++p) {
    EXPECT_EQ(lp["tokens"][p], std::string(1, prompt[p]));
    EXPECT_EQ(lp["text_offset"][p], p);
    if (p == 0) continue;
    EXPECT_NEAR(lp["token_logprobs"][p].get<double>(), expected(p), 2e-3) << "prompt token " << p;
    // Keyed by text: alternatives that are stray bytes share the key U+FFFD.
    EXPECT_GE(lp["top_logprobs"][p].size(), 1u) << lp["top_logprobs"][p].dump();
    EXPECT_LE(lp["top_logprobs"][p].size(), 2u) << lp["top_logprobs"][p].dump();
  }

  // With tokens to generate: the prompt, then what the same request without echo returns;
  // the offsets go on from the prompt's end.
  json plain = Post(c, "/v1/completions",
                    json{{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}}.dump(), &status);
  ASSERT_EQ(status, 200);
  const json echo_request = {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0},
                             {"echo", true}, {"logprobs", 0}};
  json echoed = Post(c, "/v1/completions", echo_request.dump(), &status);
  ASSERT_EQ(status, 200) << echoed.dump();
  const std::string completion = plain["choices"][0]["text"];
  EXPECT_EQ(echoed["choices"][0]["text"], prompt + completion);
  EXPECT_EQ(echoed["usage"]["completion_tokens"], 5);
  const json& elp = echoed["choices"][0]["logprobs"];
  ASSERT_EQ(elp["tokens"].size(), static_cast<size_t>(T) + 5) << elp.dump();
  for (int p = 1; p < T; ++p) EXPECT_EQ(elp["token_logprobs"][p], lp["token_logprobs"][p]) << p;
  size_t offset = prompt.size();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(elp["text_offset"][T + i], offset) << i;
    offset += elp["tokens"][T + i].get<std::string>().size();  // ASCII here
  }

  // Streamed: the prompt as one chunk (no token_ids: nothing was generated), then the
  // tokens one chunk each.
  json stream_request = echo_request;
  stream_request["stream"] = true;
  auto r = c.Post("/v1/completions", stream_request.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto events = Events(r->body);
  ASSERT_EQ(events.size(), 1u + 5 + 1) << r->body;
  const json& first = events[0]["choices"][0];
  EXPECT_EQ(first["text"], prompt);
  EXPECT_FALSE(first.contains("token_ids")) << first.dump();
  EXPECT_EQ(first["logprobs"]["tokens"].size(), static_cast<size_t>(T));
  EXPECT_TRUE(first["logprobs"]["token_logprobs"][0].is_null());
  EXPECT_EQ(first["logprobs"]["token_logprobs"][T - 1], lp["token_logprobs"][T - 1]);
  std::string streamed;
  for (int i = 1; i <= 5; ++i) {
    streamed += events[i]["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(events[i]["choices"][0]["logprobs"]["text_offset"][0], elp["text_offset"][T + i - 1]) << i;
  }
  EXPECT_EQ(streamed, completion);

  // Token ids as the prompt: their text is echoed. Characters, not bytes: "é" is two byte
  // tokens, both at the offset of the character they make.
  json ids = Post(c, "/v1/completions",
                  json{{"model", "tiny"}, {"prompt", {104, 0xC3, 0xA9, 108, 111}}, {"max_tokens", 0}, {"echo", true},
                       {"logprobs", 0}}.dump(),
                  &status);
  ASSERT_EQ(status, 200) << ids.dump();
  EXPECT_EQ(ids["choices"][0]["text"], "h\xC3\xA9lo");
  EXPECT_EQ(ids["choices"][0]["logprobs"]["text_offset"], json::array({0, 1, 1, 2, 3}));

  // max_tokens 0 without echo is a bad request naming the field.
  json zero = Post(c, "/v1/completions", R"({"model":"tiny","prompt":"Hi","max_tokens":0})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(zero["error"]["param"], "max_tokens") << zero.dump();
}

// Several prompts in one request, and n samples of each (LangChain's OpenAI LLM batches
// prompts so; vLLM and OpenAI take both): choice i*n + j is sample j of prompt i, each the
// tokens its own request would get (sample j seeded seed + j), streamed or not, with usage
// counting each prompt once and every choice's tokens.
TEST(ServeApiTest, SeveralPromptsAndSamplesAreChoices) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  int status = 0;
  auto one = [&](const std::string& prompt, const std::string& extra) {
    json r = Post(c, "/v1/completions",
                  R"({"model":"tiny","prompt":")" + prompt + R"(","max_tokens":6)" + extra + "}", &status);
    EXPECT_EQ(status, 200) << r.dump();
    return r["choices"][0]["text"].get<std::string>();
  };
  const std::string greedy_ab = one("ab", R"(,"temperature":0)");
  const std::string greedy_xyz = one("xyz", R"(,"temperature":0)");
  ASSERT_NE(greedy_ab, greedy_xyz);

  json both = Post(c, "/v1/completions",
                   R"({"model":"tiny","prompt":["ab","xyz"],"n":2,"max_tokens":6,"temperature":0})", &status);
  ASSERT_EQ(status, 200) << both.dump();
  ASSERT_EQ(both["choices"].size(), 4u) << both.dump();
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(both["choices"][k]["index"], k);
    EXPECT_EQ(both["choices"][k]["text"], k < 2 ? greedy_ab : greedy_xyz) << k;
    EXPECT_EQ(both["choices"][k]["finish_reason"], "length");
  }
  EXPECT_EQ(both["usage"]["prompt_tokens"], 2 + 3);
  EXPECT_EQ(both["usage"]["completion_tokens"], 4 * 6);
  EXPECT_EQ(both["usage"]["total_tokens"], 5 + 24);

  // Sampled: sample j is the request with seed + j, and the samples differ.
  json sampled = Post(c, "/v1/completions",
                      R"({"model":"tiny","prompt":"ab","n":3,"max_tokens":6,"temperature":1.5,"seed":40})", &status);
  ASSERT_EQ(status, 200) << sampled.dump();
  ASSERT_EQ(sampled["choices"].size(), 3u);
  std::set<std::string> texts;
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(sampled["choices"][j]["text"], one("ab", fmt::format(R"(,"temperature":1.5,"seed":{})", 40 + j))) << j;
    texts.insert(sampled["choices"][j]["text"].get<std::string>());
  }
  EXPECT_GT(texts.size(), 1u);

  // Streamed: every chunk names its choice; each choice's text is the same; one usage.
  auto r = c.Post("/v1/completions",
                  R"({"model":"tiny","prompt":["ab","xyz"],"n":2,"max_tokens":6,"temperature":0,"stream":true,
                      "stream_options":{"include_usage":true}})",
                  "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto events = Events(r->body);
  ASSERT_EQ(events.size(), 4u * 6 + 2) << r->body;
  std::map<int, std::string> streamed;
  std::map<int, int> finished;
  for (size_t i = 0; i < 4 * 6; ++i) {
    const json& ch = events[i]["choices"][0];
    streamed[ch["index"].get<int>()] += ch["text"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finished[ch["index"].get<int>()] += 1;
  }
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(streamed[k], k < 2 ? greedy_ab : greedy_xyz) << k;
    EXPECT_EQ(finished[k], 1) << k;
  }
  EXPECT_EQ(events[24]["usage"], both["usage"]);
  EXPECT_EQ(events[25], "[DONE]");

  // Chat: n replies, each stream choice opened with its role.
  json chat = Post(c, "/v1/chat/completions",
                   R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"n":2,"max_tokens":3,"temperature":0})",
                   &status);
  ASSERT_EQ(status, 200) << chat.dump();
  ASSERT_EQ(chat["choices"].size(), 2u);
  EXPECT_EQ(chat["choices"][1]["index"], 1);
  EXPECT_EQ(chat["choices"][1]["message"], chat["choices"][0]["message"]);
  EXPECT_EQ(chat["usage"]["completion_tokens"], 6);
  auto cs = c.Post("/v1/chat/completions",
                   R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"n":2,"max_tokens":3,"temperature":0,
                       "stream":true})",
                   "application/json");
  ASSERT_TRUE(cs);
  auto chunks = Events(cs->body);
  ASSERT_EQ(chunks.size(), 2u + 2 * 3 + 1) << cs->body;
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[0]["choices"][0]["index"], 0);
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[1]["choices"][0]["index"], 1);
}

// Each choice waits in the queue as a request: a request of more choices than the queue
// holds could never be admitted (its 429 would be retried forever), so it is a 400.
TEST(ServeApiTest, MoreChoicesThanTheQueueHoldsIsABadRequest) {
  engine::GptModel ref = TinyModel();
  BatcherOptions b;
  b.max_waiting = 2;
  ServerFixture f(CpuModelOf(ref), b);
  auto c = f.Client();
  int status = 0;
  json too_many = Post(c, "/v1/completions", R"({"model":"tiny","prompt":"ab","n":3,"max_tokens":2})", &status);
  EXPECT_EQ(status, 400) << too_many.dump();
  EXPECT_EQ(too_many["error"]["param"], "n") << too_many.dump();
  EXPECT_NE(too_many["error"]["message"].get<std::string>().find("--max-waiting 2"), std::string::npos)
      << too_many.dump();
  json prompts = Post(c, "/v1/completions", R"({"model":"tiny","prompt":["a","b","c"],"max_tokens":2})", &status);
  EXPECT_EQ(status, 400) << prompts.dump();
  EXPECT_EQ(prompts["error"]["param"], "prompt") << prompts.dump();
  json two = Post(c, "/v1/completions", R"({"model":"tiny","prompt":"ab","n":2,"max_tokens":2})", &status);
  EXPECT_EQ(status, 200) << two.dump();
  EXPECT_EQ(two["choices"].size(), 2u);
}

// The gateway's health canary (X-Cohort-Canary: 1, a one-token greedy completion every few
// seconds) is answered but is not traffic: an idle replica showed 0.1 tokens/s, a time to
// first token and a request count made of canaries alone.
TEST(ServeApiTest, CanariesStayOutOfTheMetrics) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  const std::string canary = R"({"model":"tiny","prompt":"Hi","max_tokens":1,"temperature":0})";
  for (int i = 0; i < 3; ++i) {
    auto r = c.Post("/v1/completions", httplib::Headers{{"X-Cohort-Canary", "1"}}, canary, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  auto metrics = [&] {
    auto m = c.Get("/metrics");
    EXPECT_TRUE(m);
    return m ? m->body : std::string();
  };
  std::string text = metrics();
  EXPECT_NE(text.find("cohort_serve_output_tokens_total{model=\"tiny\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cohort_serve_prompt_tokens_total{model=\"tiny\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cohort_serve_time_to_first_token_seconds_count{model=\"tiny\"} 0\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("outcome=\"length\"} 1"), std::string::npos) << text;
  auto load = c.Get("/load");
  ASSERT_TRUE(load);
  EXPECT_EQ(ParseJson(load->body)->value("tokens_per_second", -1.0), 0.0) << load->body;
  // A client's request counts.
  int status = 0;
  Post(c, "/v1/completions", canary, &status);
  ASSERT_EQ(status, 200);
  text = metrics();
  EXPECT_NE(text.find("cohort_serve_output_tokens_total{model=\"tiny\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cohort_serve_time_to_first_token_seconds_count{model=\"tiny\"} 1\n"), std::string::npos)
      << text;
}

TEST(ServeApiTest, ChatUsesThePlainTemplate) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  int status = 0;
  const std::string body = R"({"model":"tiny","messages":[{"role":"system","content":"Be brief."},
      {"role":"user","content":"Hi"}],"max_tokens":6,"temperature":0,"seed":3})";
  json done = Post(c, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << done.dump();
  EXPECT_EQ(done["object"], "chat.completion");
  EXPECT_EQ(done["choices"][0]["message"]["role"], "assistant");
  const std::string prompt = ApplyChatTemplate({{"system", "Be brief."}, {"user", "Hi"}});
  EXPECT_EQ(prompt, "System: Be brief.\nUser: Hi\nAssistant:");
  EXPECT_EQ(done["usage"]["prompt_tokens"], static_cast<int>(prompt.size()));
  const std::string content = done["choices"][0]["message"]["content"];

  std::string streamed_body = body;
  streamed_body.insert(streamed_body.size() - 1, R"(,"stream":true)");
  auto r = c.Post("/v1/chat/completions", streamed_body, "application/json");
  ASSERT_TRUE(r);
  auto events = Events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    streamed += events[i]["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(streamed, content);
  EXPECT_EQ(events.back(), "[DONE]");
}

// Each bad request gets its 4xx in OpenAI's shape naming the field; the server keeps serving.
// A wrong method or path gets an error in OpenAI's shape, not an empty body: an SDK or curl
// user learns what the server takes (405 with Allow for a known path, 404 naming the API).
TEST(ServeApiTest, UnknownPathsAndWrongMethodsAreExplained) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  auto get = c.Get("/v1/completions");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  auto body = ParseJson(get->body);
  ASSERT_TRUE(body.has_value()) << get->body;
  EXPECT_EQ((*body)["error"]["message"], "method not allowed: GET /v1/completions takes POST") << get->body;
  EXPECT_EQ((*body)["error"]["type"], "invalid_request_error") << get->body;

  auto post = c.Post("/v1/models", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET");

  int status = 0;
  json missing = Post(c, "/v1/embeddings", R"({"model":"tiny","input":"x"})", &status);
  EXPECT_EQ(status, 404);
  EXPECT_EQ(missing["error"]["type"], "not_found_error") << missing;
  EXPECT_NE(missing["error"]["message"].get<std::string>().find("no such endpoint: POST /v1/embeddings"),
            std::string::npos)
      << missing;
  auto root = c.Get("/completions");  // a base URL without /v1
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 404);
  EXPECT_NE(root->body.find("POST /v1/completions"), std::string::npos) << root->body;
}

TEST(ServeApiTest, BadRequestsGetTheirErrorsAndTheServerKeepsServing) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  struct Case {
    std::string path, body;
    int status;
    json param;
  };
  const std::string long_prompt(200, 'x');
  const Case cases[] = {
      {"/v1/completions", R"({"model":"nope","prompt":"x"})", 404, "model"},
      {"/v1/completions", R"({"model":"tiny","prompt":")" + long_prompt + R"("})", 400, "prompt"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":0})", 400, "max_tokens"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":500})", 400, "max_tokens"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":-3})", 400, "max_tokens"},
      // Past the context, named as the client sent it.
      {"/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"max_completion_tokens":500})",
       400, "max_completion_tokens"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x",)", 400, nullptr},
      {"/v1/completions", R"(["not an object"])", 400, "body"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","temperature":"hot"})", 400, "temperature"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","temperature":3})", 400, "temperature"},
      {"/v1/completions", R"({"model":"tiny","prompt":7})", 400, "prompt"},
      {"/v1/completions", R"({"model":"tiny","prompt":[1,2,999]})", 400, "prompt[2]"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","stop":[1]})", 400, "stop[0]"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","presence_penalty":2.5})", 400, "presence_penalty"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","frequency_penalty":"high"})", 400, "frequency_penalty"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","n":0})", 400, "n"},
      {"/v1/completions", R"({"model":"tiny","prompt":["x","y"],"n":100})", 400, "n"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","n":2,"best_of":3})", 400, "best_of"},
      {"/v1/completions", R"({"model":"tiny","prompt":["x",""]})", 400, "prompt[1]"},
      {"/v1/completions", R"({"model":"tiny","prompt":[[1,2],[3,999]]})", 400, "prompt[1][1]"},
      {"/v1/completions", R"({"model":"tiny","prompt":["x",5]})", 400, "prompt[1]"},
      {"/v1/completions", R"({"model":"tiny","prompt":["x",")" + long_prompt + R"("]})", 400, "prompt[1]"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","logprobs":9})", 400, "logprobs"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","temprature":1})", 400, "temprature"},
      {"/v1/completions", R"({"prompt":"x"})", 400, "model"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"robot","content":"x"}]})", 400,
       "messages[0].role"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":"hi"})", 400, "messages"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})", 400,
       "response_format.type"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})", 400, "tools"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"required"})", 400, "tool_choice"},
      // A conversation longer than the context names messages, not a prompt the client never sent.
      {"/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":")" + long_prompt + R"("}]})",
       400, "messages"},
  };
  for (const Case& k : cases) {
    int status = 0;
    json e = Post(c, k.path, k.body, &status);
    EXPECT_EQ(status, k.status) << k.body << " -> " << e.dump();
    ASSERT_TRUE(e.contains("error")) << e.dump();
    EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
    EXPECT_EQ(e["error"]["type"], k.status == 404 ? "not_found_error" : "invalid_request_error");
    if (!k.param.is_null()) {
      EXPECT_EQ(e["error"]["param"], k.param) << e.dump();
    }
  }
  int status = 0;
  json ok = Post(c, "/v1/completions", R"({"model":"tiny","prompt":"still here","max_tokens":3})", &status);
  EXPECT_EQ(status, 200) << ok.dump();
  EXPECT_EQ(ok["usage"]["completion_tokens"], 3);
  // OpenAI's chat fields for tools, structured output and stored completions, with the
  // values that ask for none of them (as clients built for OpenAI send): accepted.
  ok = Post(c, "/v1/chat/completions",
            R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":2,
                "response_format":{"type":"text"},"tools":[],"tool_choice":"none","parallel_tool_calls":false,
                "store":false,"metadata":{"who":"test"}})",
            &status);
  EXPECT_EQ(status, 200) << ok.dump();
}

// logit_bias as OpenAI defines it (refused before as "is not supported"): an object of at
// most 300 token ids (integers as strings) to a bias in [-100, 100]; every bad entry is a
// 400 naming it (logit_bias.<key>). A ban of the token greedy decoding takes first changes
// the reply as the engine's own logits plus the bias say, in completions, streams and chat.
TEST(ServeApiTest, LogitBiasIsReadStrictlyAndAppliedToTheLogits) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  std::string many = "{";
  for (int i = 0; i < 301; ++i) many += (i ? "," : "") + fmt::format("\"{}\":1", i % 256 + (i / 256) * 1000);
  many += "}";
  const std::pair<std::string, std::string> bad[] = {
      {R"([1,2])", "logit_bias"},
      {R"("50")", "logit_bias"},
      {R"({"abc":1})", "logit_bias.abc"},
      {R"({"5.0":1})", "logit_bias.5.0"},
      {R"({"":1})", "logit_bias."},
      {R"({"256":1})", "logit_bias.256"},
      {R"({"-1":-100})", "logit_bias.-1"},
      {R"({"99999999999999999999":1})", "logit_bias.99999999999999999999"},
      {R"({"5":"high"})", "logit_bias.5"},
      {R"({"5":true})", "logit_bias.5"},
      {R"({"5":null})", "logit_bias.5"},
      {R"({"5":100.5})", "logit_bias.5"},
      {R"({"5":-101})", "logit_bias.5"},
      {R"({"5":1,"05":2})", "logit_bias"},
      {many, "logit_bias"},
  };
  for (const auto& [value, param] : bad) {
    for (const bool chat : {false, true}) {
      const std::string body = chat ? R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"logit_bias":)" + value + "}"
                                    : R"({"model":"tiny","prompt":"x","logit_bias":)" + value + "}";
      int status = 0;
      json e = Post(c, chat ? "/v1/chat/completions" : "/v1/completions", body, &status);
      EXPECT_EQ(status, 400) << value << " -> " << e.dump();
      EXPECT_EQ(e["error"]["param"], param) << value << " -> " << e.dump();
      EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    }
  }

  // Greedy: the first token with and without a ban on it.
  const std::vector<int32_t> prompt = {'H', 'e', 'l', 'l', 'o'};
  const std::vector<int32_t> plain = testing::BiasedGreedy(ref, prompt, 10, {});
  const std::vector<std::pair<int32_t, float>> ban = {{plain[0], -100.0f}};
  const std::vector<int32_t> banned = testing::BiasedGreedy(ref, prompt, 10, ban);
  ASSERT_NE(banned, plain);
  // The byte tokenizer's text, as the reply's JSON carries it (invalid UTF-8 replaced).
  auto text_of = [](const std::vector<int32_t>& ids) {
    return json::parse(DumpJson(json(std::string(ids.begin(), ids.end())))).get<std::string>();
  };
  json req = {{"model", "tiny"}, {"prompt", "Hello"}, {"max_tokens", 10}, {"temperature", 0},
              {"logit_bias", {{std::to_string(plain[0]), -100}}}};
  int status = 0;
  json got = Post(c, "/v1/completions", req.dump(), &status);
  ASSERT_EQ(status, 200) << got.dump();
  EXPECT_EQ(got["choices"][0]["text"], text_of(banned));
  req["logit_bias"] = json::object();  // an empty bias is no bias
  got = Post(c, "/v1/completions", req.dump(), &status);
  ASSERT_EQ(status, 200) << got.dump();
  EXPECT_EQ(got["choices"][0]["text"], text_of(plain));
  // Streamed: the same tokens.
  req["logit_bias"] = {{std::to_string(plain[0]), -100}};
  req["stream"] = true;
  auto r = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r);
  std::vector<int32_t> streamed;
  for (const json& ev : Events(r->body)) {
    if (ev.is_string()) continue;
    for (const auto& id : ev["choices"][0].value("token_ids", json::array())) streamed.push_back(id.get<int32_t>());
  }
  EXPECT_EQ(streamed, banned);
  // Chat: the template's prompt, with the same ban on its own greedy first token.
  const std::string chat_prompt = ApplyChatTemplate({{"user", "Hello"}});
  const std::vector<int32_t> chat_ids(chat_prompt.begin(), chat_prompt.end());
  const std::vector<int32_t> chat_plain = testing::BiasedGreedy(ref, chat_ids, 1, {});
  const std::vector<int32_t> chat_banned = testing::BiasedGreedy(ref, chat_ids, 1, {{chat_plain[0], -100.0f}});
  ASSERT_NE(chat_banned, chat_plain);
  json chat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 1},
               {"temperature", 0}, {"logit_bias", {{std::to_string(chat_plain[0]), -100}}}};
  got = Post(c, "/v1/chat/completions", chat.dump(), &status);
  ASSERT_EQ(status, 200) << got.dump();
  EXPECT_EQ(got["choices"][0]["message"]["content"], text_of(chat_banned));
}

// A stream the gateway moved (cohort_resume) counts logprobs.text_offset on from the text
// the client already has, rebuilt from the tokens sent and the echoed prompt
// (cohort_resume.echoed): its offsets are those of the stream that never moved. They
// restarted at 0. (The tiny model's bytes are often invalid UTF-8, which the offsets count
// as the unmoved stream's do.)
TEST(ServeApiTest, AResumedStreamsTextOffsetsGoOnFromTheClientsText) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  struct Chunk {
    std::vector<int32_t> ids;
    std::string text;
    std::vector<int64_t> offsets;
  };
  auto stream = [&](const json& body) {
    std::vector<Chunk> out;
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return out;
    EXPECT_EQ(r->status, 200) << r->body;
    for (const json& ev : Events(r->body)) {
      if (ev.is_string()) continue;
      const json& ch = ev["choices"][0];
      Chunk k;
      for (const auto& id : ch.value("token_ids", json::array())) k.ids.push_back(id.get<int32_t>());
      k.text = ch["text"];
      if (ch["logprobs"].is_object()) {
        for (const auto& o : ch["logprobs"]["text_offset"]) k.offsets.push_back(o.get<int64_t>());
      }
      out.push_back(std::move(k));
    }
    return out;
  };
  for (const bool echo : {false, true}) {
    const json body = {{"model", "tiny"}, {"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 0},
                       {"logprobs", 1}, {"stream", true}, {"echo", echo}};
    const std::vector<Chunk> full = stream(body);
    const size_t first = echo ? 1 : 0;  // an echo's prompt comes as one chunk first
    ASSERT_EQ(full.size(), first + 12) << "echo " << echo;
    for (const size_t k : {size_t{1}, size_t{5}, size_t{11}}) {
      // What the client has from the failed replica: the echoed prompt and k tokens.
      json resumed = body;
      resumed.erase("echo");  // the gateway does not ask for the echo again
      std::vector<int32_t> sent;
      for (size_t i = 0; i < first + k; ++i) sent.insert(sent.end(), full[i].ids.begin(), full[i].ids.end());
      resumed["cohort_resume"] = {{"tokens", sent}, {"echoed", echo}};
      const std::vector<Chunk> rest = stream(resumed);
      ASSERT_EQ(rest.size(), 12 - k) << "echo " << echo << " k " << k;
      for (size_t i = 0; i < rest.size(); ++i) {
        EXPECT_EQ(rest[i].ids, full[first + k + i].ids) << "echo " << echo << " k " << k << " token " << i;
        EXPECT_EQ(rest[i].text, full[first + k + i].text);
        EXPECT_EQ(rest[i].offsets, full[first + k + i].offsets) << "echo " << echo << " k " << k << " token " << i;
      }
    }
  }
  // A chat stream moved after its opening role chunk (no token yet) does not open again.
  auto chat = c.Post("/v1/chat/completions",
                     R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"stream":true,
                         "cohort_resume":{"tokens":[]}})",
                     "application/json");
  ASSERT_TRUE(chat);
  for (const json& ev : Events(chat->body)) {
    if (!ev.is_string()) {
      EXPECT_FALSE(ev["choices"][0]["delta"].contains("role")) << ev.dump();
    }
  }
  // A chat has no echo.
  int status = 0;
  json e = Post(c, "/v1/chat/completions",
                R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"stream":true,
                    "cohort_resume":{"tokens":[1],"echoed":true}})",
                &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["param"], "cohort_resume.echoed") << e.dump();
}

// A request without max_tokens gets the default cut to the context its prompt leaves: a
// chat request to a model whose context is under the chat default (256; TinyModel's is 96)
// was refused for a field the client never sent. An explicit max_tokens is never cut.
TEST(ServeApiTest, DefaultMaxTokensFitTheContext) {
  engine::GptModel ref = TinyModel();
  ServerFixture f(CpuModelOf(ref));
  auto c = f.Client();
  const int ctx = ref.config().max_seq_len;
  int status = 0;
  json chat = Post(c, "/v1/chat/completions",
                   R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"temperature":0,"stop":null})",
                   &status);
  ASSERT_EQ(status, 200) << chat.dump();
  EXPECT_LE(chat["usage"]["total_tokens"].get<int>(), ctx);
  if (chat["choices"][0]["finish_reason"] == "length") {
    EXPECT_EQ(chat["usage"]["total_tokens"], ctx);
  }

  // Completions' default 16 after a prompt 4 tokens short of the context: 4 tokens.
  const std::string prompt(static_cast<size_t>(ctx - 4), 'x');
  json done = Post(c, "/v1/completions",
                   R"({"model":"tiny","prompt":")" + prompt + R"(","temperature":0,"max_tokens":null})", &status);
  ASSERT_EQ(status, 200) << done.dump();
  EXPECT_LE(done["usage"]["completion_tokens"].get<int>(), 4);
  if (done["choices"][0]["finish_reason"] == "length") {
    EXPECT_EQ(done["usage"]["completion_tokens"], 4);
  }

  // Asked for explicitly, the same 16 is still refused, naming max_tokens.
  json e = Post(c, "/v1/completions", R"({"model":"tiny","prompt":")" + prompt + R"(","max_tokens":16})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["param"], "max_tokens") << e.dump();
  e = Post(c, "/v1/chat/completions",
           R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":256})", &status);
  EXPECT_EQ(status, 400) << e.dump();
}

// A client that hangs up while its unstreamed request generates (Ctrl-C, or an SDK's
// timeout before it retries): the request is cancelled and its cache blocks freed, as a
// stream's are when its client goes. It generated to the end for nobody, holding its
// blocks and a place in the batch.
TEST(ServeApiTest, AClientThatHangsUpCancelsItsUnstreamedRequest) {
  engine::GptModel ref = TinyModel();
  auto gated = std::make_unique<GatedModel>(CpuModelOf(ref));
  GatedModel* gate = gated.get();
  ServerFixture f(std::move(gated));
  const int max_tokens = 90;
  {
    const int fd = SendCompletionsRequest(
        f.port(), R"({"model":"tiny","prompt":"x","temperature":0,"max_tokens":)" + std::to_string(max_tokens) + "}");
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(gate->WaitBlocked());  // its first step
    close(fd);
  }
  auto running = [&] { return f.server().batcher().Load().running; };
  // One step at a time, each given a while for the hang-up to be seen before the next (the
  // request leaves the batch at the step after it was cancelled: none may come then).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int steps = 0;
  for (; steps < max_tokens + 5 && std::chrono::steady_clock::now() < deadline; ++steps) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (running() > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    bool blocked = false;
    while (!blocked && running() > 0 && std::chrono::steady_clock::now() < deadline) {
      blocked = gate->WaitBlocked(std::chrono::milliseconds(10));
    }
    if (!blocked) break;
    gate->Release();
  }
  EXPECT_LT(steps, max_tokens) << "the request generated to its end";
  const LoadReport load = f.server().batcher().Load();
  EXPECT_EQ(load.running, 0);
  EXPECT_EQ(load.kv_blocks_used, 0);
  gate->Open();
  auto c = f.Client();
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("cohort_serve_requests_total{model=\"tiny\",outcome=\"cancelled\"} 1"),
            std::string::npos)
      << metrics->body;
  int status = 0;
  json ok = Post(c, "/v1/completions", R"({"model":"tiny","prompt":"still here","max_tokens":3})", &status);
  EXPECT_EQ(status, 200) << ok.dump();
}

// A streamed request whose client hangs up while it is still queued leaves the queue then:
// it wrote nothing while queued, so the hang-up was seen only by a keep-alive write (every
// 10 s), and until then (or until admitted and prefilled for nobody) it held a place in
// the queue, where new requests got 429. Keep-alives are an hour apart here: only the
// handler's own look for the hang-up can see it.
TEST(ServeApiTest, AStreamAbandonedInTheQueueLeavesIt) {
  engine::GptModel ref = TinyModel();
  auto gated = std::make_unique<GatedModel>(CpuModelOf(ref));
  GatedModel* gate = gated.get();
  BatcherOptions b;
  b.max_running = 1;
  b.max_waiting = 1;
  ServerFixture f(std::move(gated), b, std::chrono::hours(1));
  const int max_tokens = 80;
  std::thread first([&] {
    auto c = f.Client();
    int status = 0;
    json r = Post(c, "/v1/completions",
                  R"({"model":"tiny","prompt":"q","temperature":0,"max_tokens":)" + std::to_string(max_tokens) + "}",
                  &status);
    EXPECT_EQ(status, 200) << r.dump();
  });
  ASSERT_TRUE(gate->WaitBlocked());  // the first request runs, held at its first step
  const int fd = SendCompletionsRequest(f.port(), R"({"model":"tiny","prompt":"x","stream":true,"max_tokens":4})");
  ASSERT_GE(fd, 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (f.server().batcher().Load().waiting < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(f.server().batcher().Load().waiting, 1);
  close(fd);  // the streaming client hangs up while queued

  // The first request steps on, one step at a time, each step given a while for the
  // hang-up to be seen; the queue empties while it still runs.
  int steps = 0;
  auto waiting = [&] { return f.server().batcher().Load().waiting; };
  for (; steps < max_tokens + 5 && waiting() > 0; ++steps) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (waiting() > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (waiting() == 0 || !gate->WaitBlocked()) break;
    gate->Release();
  }
  EXPECT_EQ(waiting(), 0);
  EXPECT_LT(steps, max_tokens / 2) << "the queued stream stayed queued until the request before it ended";
  gate->Open();
  first.join();
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((waiting() > 0 || f.server().batcher().Load().running > 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Only the first request was ever prefilled (a step of a sequence from position 0).
  int prefills = 0;
  for (const auto& step : gate->shapes()) {
    for (const auto& [start, n] : step) prefills += start == 0 ? 1 : 0;
  }
  EXPECT_EQ(prefills, 1) << "the abandoned stream was admitted and prefilled";
  auto c = f.Client();
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("cohort_serve_requests_total{model=\"tiny\",outcome=\"cancelled\"} 1"),
            std::string::npos)
      << metrics->body;
}

TEST(ServeApiTest, AFullQueueIsTooManyRequestsWithRetryAfter) {
  engine::GptModel ref = TinyModel();
  auto gated = std::make_unique<GatedModel>(CpuModelOf(ref));
  GatedModel* gate = gated.get();
  BatcherOptions b;
  b.max_running = 1;
  b.max_waiting = 1;
  ServerFixture f(std::move(gated), b);
  const std::string body = R"({"model":"tiny","prompt":"q","max_tokens":4})";
  std::thread first([&] {
    auto c = f.Client();
    int status = 0;
    Post(c, "/v1/completions", body, &status);
    EXPECT_EQ(status, 200);
  });
  ASSERT_TRUE(gate->WaitBlocked());
  std::thread second([&] {
    auto c = f.Client();
    int status = 0;
    Post(c, "/v1/completions", body, &status);
    EXPECT_EQ(status, 200);
  });
  // Wait (with a deadline) until the second one is queued.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (f.server().batcher().Load().waiting < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  auto c = f.Client();
  int status = 0;
  httplib::Headers headers;
  json e = Post(c, "/v1/completions", body, &status, &headers);
  EXPECT_EQ(status, 429);
  EXPECT_EQ(e["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(headers.count("Retry-After"));
  auto load = c.Get("/load");
  ASSERT_TRUE(load);
  json l = *ParseJson(load->body);
  EXPECT_EQ(l["waiting"], 1);
  EXPECT_EQ(l["running"], 1);
  gate->Open();
  first.join();
  second.join();
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("cohort_serve_requests_total{model=\"tiny\",outcome=\"rejected\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("cohort_serve_time_to_first_token_seconds_count{model=\"tiny\"} 2"),
            std::string::npos);
}

}  // namespace
}  // namespace cohort::serve
