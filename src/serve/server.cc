#include "serve/server.h"

#include <atomic>
#include <random>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/http.h"
#include "common/http_server.h"
#include "common/prometheus.h"
#include "serve/openai_api.h"

namespace cohort::serve {

namespace {

// How often a request's handler looks whether its client hung up.
constexpr auto kHangUpCheck = std::chrono::milliseconds(250);

void SendApiError(httplib::Response& res, const Error& e, int retry_after_s) {
  res.status = HttpStatusFor(e.code);
  if (e.code == ErrorCode::kResourceExhausted) res.set_header("Retry-After", std::to_string(retry_after_s));
  res.set_content(DumpJson(OpenAiErrorBody(e)), "application/json");
}

std::string NewId(bool chat) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}-{:x}{:08x}", chat ? "chatcmpl" : "cmpl", salt & 0xffffffff, ++counter);
}

int64_t MonoNowMs() {
  return std::chrono::duration_cast<Millis>(SteadyClock::now().time_since_epoch()).count();
}

// One reply's state (a stream's, shared by the content provider's calls): one builder per
// choice, whose generations share the channel.
struct StreamState {
  ApiRequest request;
  std::shared_ptr<RequestChannel> channel;
  std::vector<std::unique_ptr<ResponseBuilder>> builders;  // by choice
  int finished = 0;  // choices whose last event came
  bool opened = false;
  bool done = false;
  // A choice's event: nullptr for one that names no choice of this request.
  ResponseBuilder* BuilderOf(const TokenEvent& e) {
    return e.choice >= 0 && static_cast<size_t>(e.choice) < builders.size() ? builders[e.choice].get() : nullptr;
  }
  bool all_finished() const { return finished >= static_cast<int>(builders.size()); }
  json Usage() const { return ResponseBuilder::CombinedUsage(builders, request.n); }
};

}  // namespace

Result<std::unique_ptr<InferenceServer>> InferenceServer::Create(
    std::unique_ptr<engine::Tokenizer> tokenizer, std::unique_ptr<InferenceModel> model,
    BatcherOptions batcher, ServerOptions options) {
  if (options.model_name.empty()) return FieldError("--name", "is empty");
  if (options.http_threads < 1 || options.http_threads > 4096) {
    return FieldError("--http-threads", "must be between 1 and 4096, got {}", options.http_threads);
  }
  std::unique_ptr<InferenceServer> s(new InferenceServer());
  s->options_ = std::move(options);
  s->tokenizer_ = std::move(tokenizer);
  s->created_ = NowUnixMs() / 1000;
  s->batcher_ = COHORT_TRY(Batcher::Start(std::move(model), s->tokenizer_.get(), batcher, &s->metrics_));
  HttpServerOptions http;
  http.host = s->options_.host;
  http.port = s->options_.port;
  http.pools = {HttpServerOptions::Pool{"generate", s->options_.http_threads, 4096},
                HttpServerOptions::Pool{"status", 4, 1024}};
  http.classify = [](std::string_view method, std::string_view) -> size_t {
    return method == "POST" ? 0 : 1;
  };
  // A request may wait in the batcher's queue for long; the stream itself sets the pace.
  http.write_timeout = Millis(60'000);
  s->http_ = std::make_unique<HttpServer>(std::move(http));
  s->Routes();
  return s;
}

InferenceServer::~InferenceServer() { Stop(); }

Result<int> InferenceServer::Bind() { return http_->Bind(); }
void InferenceServer::Serve() { http_->Serve(); }

void InferenceServer::Stop() {
  if (batcher_) batcher_->Stop();
  if (http_) http_->Stop();
}

json InferenceServer::LoadJson() const {
  const LoadReport l = batcher_->Load();
  const int64_t now = MonoNowMs();
  return {{"model", options_.model_name},
          {"device", std::string(batcher_->model().device())},
          {"running", l.running},
          {"waiting", l.waiting},
          {"queued_tokens", l.queued_tokens},
          {"inflight_tokens", l.inflight_tokens},
          {"kv_blocks_used", l.kv_blocks_used},
          {"kv_blocks_total", l.kv_blocks_total},
          {"steps", l.steps},
          {"tokens_per_second", metrics_.TokensPerSecond(now)},
          {"ttft_p50_seconds", metrics_.TimeToFirstTokenQuantile(0.5)},
          {"ttft_p99_seconds", metrics_.TimeToFirstTokenQuantile(0.99)},
          {"itl_p50_seconds", metrics_.InterTokenLatencyQuantile(0.5)},
          {"itl_p99_seconds", metrics_.InterTokenLatencyQuantile(0.99)}};
}

void InferenceServer::Routes() {
  HttpServer& http = *http_;
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    SendJson(res, {{"status", "ok"}});
  });
  http.Get("/load", [this](const httplib::Request&, httplib::Response& res) { SendJson(res, LoadJson()); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    SendJson(res, {{"object", "list"},
                   {"data", json::array({{{"id", options_.model_name},
                                          {"object", "model"},
                                          {"created", created_},
                                          {"owned_by", "cohort"}}})}});
  });
  // The OpenAI SDKs' models.retrieve.
  http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1].str();
    if (id != options_.model_name) {
      return SendApiError(res,
                          Error(ErrorCode::kNotFound,
                                fmt::format("model '{}' does not exist; this server serves '{}'", id,
                                            options_.model_name),
                                "model"),
                          options_.retry_after_s);
    }
    SendJson(res, {{"id", id}, {"object", "model"}, {"created", created_}, {"owned_by", "cohort"}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    prom::TextWriter w;
    metrics_.Write(w, options_.model_name, batcher_->Load(), MonoNowMs());
    auto body = w.Finish();
    if (!body) return SendError(res, body.error());
    res.set_content(*body, "text/plain; version=0.0.4");
  });

  auto generate = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      auto body = ParseJson(req.body);
      if (!body) {
        metrics_.CountRequest("invalid");
        return SendApiError(res, body.error(), options_.retry_after_s);
      }
      auto parsed = ParseApiRequest(*body, chat, *tokenizer_);
      if (!parsed) {
        metrics_.CountRequest("invalid");
        return SendApiError(res, parsed.error(), options_.retry_after_s);
      }
      if (parsed->model != options_.model_name) {
        metrics_.CountRequest("invalid");
        return SendApiError(res,
                            Error(ErrorCode::kNotFound,
                                  fmt::format("model '{}' does not exist; this server serves '{}'",
                                              parsed->model, options_.model_name),
                                  "model"),
                            options_.retry_after_s);
      }
      // The gateway's health canary is not traffic: it stays out of the metrics.
      const bool observed = req.get_header_value(kCanaryHeader) != "1";
      for (GenerationRequest& g : parsed->choices) g.observed = observed;
      // Each choice waits in the queue as a request of its own: more than it holds could
      // never be admitted together (a 429 to retry forever).
      if (static_cast<int>(parsed->choices.size()) > batcher_->max_waiting()) {
        metrics_.CountRequest("invalid");
        return SendApiError(res,
                            Error(ErrorCode::kInvalidArgument,
                                  fmt::format("{} choices (n x prompts) are more than this replica queues at once "
                                              "(--max-waiting {}): send fewer per request",
                                              parsed->choices.size(), batcher_->max_waiting()),
                                  parsed->n > 1 ? "n" : "prompt"),
                            options_.retry_after_s);
      }
      // Every choice's generation joins the first one's channel; a refusal of any cancels
      // those already queued and is the reply.
      std::shared_ptr<RequestChannel> channel;
      std::vector<int> prompt_tokens;
      for (const GenerationRequest& g : parsed->choices) {
        prompt_tokens.push_back(static_cast<int>(g.tokens.size()) - g.resumed);
        auto submitted = batcher_->Submit(g, channel);
        if (!submitted) {
          if (channel) channel->Cancel();
          metrics_.CountRequest(submitted.error().code == ErrorCode::kResourceExhausted ? "rejected" : "invalid");
          return SendApiError(res, submitted.error(), options_.retry_after_s);
        }
        channel = std::move(*submitted);
      }
      for (size_t k = 0; k < prompt_tokens.size() && observed; k += static_cast<size_t>(parsed->n)) {
        metrics_.CountPromptTokens(prompt_tokens[k]);
      }
      std::string id = req.get_header_value("X-Cohort-Request-Id");
      if (id.empty() || id.size() > 128) id = NewId(chat);
      auto state = std::make_shared<StreamState>();
      state->request = std::move(*parsed);
      state->channel = std::move(channel);
      const int64_t created = NowUnixMs() / 1000;
      for (size_t k = 0; k < prompt_tokens.size(); ++k) {
        state->builders.push_back(std::make_unique<ResponseBuilder>(state->request, *tokenizer_, id, created,
                                                                    options_.model_name, prompt_tokens[k],
                                                                    static_cast<int>(k)));
      }
      if (!state->request.stream) {
        SteadyTime checked = SteadyClock::now();
        while (!state->all_finished()) {
          std::optional<TokenEvent> e = state->channel->Next(kHangUpCheck);
          if (SteadyClock::now() - checked >= kHangUpCheck) {
            // Nobody will read the reply: stop generating it (a stream learns the same
            // when a write fails).
            if (HttpServer::ClientGone()) {
              state->channel->Cancel();
              return;
            }
            checked = SteadyClock::now();
          }
          if (!e) continue;
          ResponseBuilder* b = state->BuilderOf(*e);
          if (!b) continue;
          b->Add(*e);
          if (e->finish_reason.empty()) continue;
          state->finished += 1;
          if (b->finish_reason() == "error") {
            state->channel->Cancel();  // the other choices are not wanted any more
            return SendApiError(res, Error(ErrorCode::kUnavailable, b->error()), options_.retry_after_s);
          }
        }
        if (state->builders.size() == 1) return SendJson(res, state->builders.front()->Body());
        return SendJson(res, ResponseBuilder::CombinedBody(state->builders, state->request.n));
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [state, keep_alive = options_.keep_alive](size_t, httplib::DataSink& sink) {
            HttpServer::StreamResponse();
            auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
            if (!state->opened) {
              state->opened = true;
              for (const auto& b : state->builders) {
                if (!write(b->Opening())) return false;
              }
            }
            if (state->done) {
              sink.done();
              return true;
            }
            // Waits in slices, looking for a hang-up between them: a stream still queued
            // writes nothing, so a client gone then was noticed only by the next keep-alive
            // write, and the request kept its place in the queue (and counted against its
            // cap) until then, or until it was admitted and prefilled for nobody.
            const SteadyTime until = SteadyClock::now() + keep_alive;
            std::optional<TokenEvent> e;
            for (SteadyTime now = SteadyClock::now(); !e && now < until; now = SteadyClock::now()) {
              const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now);
              e = state->channel->Next(std::min<std::chrono::milliseconds>(kHangUpCheck, left));
              if (!e && HttpServer::ClientGone()) return false;  // the release callback cancels it
            }
            if (!e) return write(": keep-alive\n\n");
            ResponseBuilder* b = state->BuilderOf(*e);
            if (!b) return true;
            if (!write(b->Add(*e))) return false;
            if (!e->finish_reason.empty()) {
              state->finished += 1;
              if (e->finish_reason == "error") {
                state->done = true;
                state->channel->Cancel();  // the stream ends here: the other choices are not wanted
                sink.done();
              } else if (state->all_finished()) {
                state->done = true;
                const std::string last = state->builders.size() == 1 ? b->Finish() : b->Finish(state->Usage());
                if (!write(last)) return false;
                sink.done();
              }
            }
            return true;
          },
          [state](bool) {
            if (!state->done) state->channel->Cancel();
          });
    };
  };
  PostWithBodyCap(http, "/v1/completions", generate(false));
  PostWithBodyCap(http, "/v1/chat/completions", generate(true));

  // A path or method no route takes gets an error an OpenAI client can show (httplib's own
  // is an empty body): 405 with Allow for a known path asked with another method, 404 naming
  // what this server serves otherwise (vLLM's /v1/embeddings, a base URL without /v1).
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status != 404 && res.status != 405) {
      const Error e(res.status < 500 ? ErrorCode::kInvalidArgument : ErrorCode::kInternal,
                    fmt::format("HTTP {}: the request could not be read or served", res.status));
      const int status = res.status;
      SendApiError(res, e, options_.retry_after_s);
      res.status = status;
      return;
    }
    const std::string& path = req.path;
    const bool post_path = path == "/v1/completions" || path == "/v1/chat/completions";
    const bool get_path = path == "/v1/models" || path.starts_with("/v1/models/") || path == "/health" ||
                          path == "/load" || path == "/metrics";
    if ((post_path && req.method != "POST") || (get_path && req.method != "GET" && req.method != "HEAD")) {
      const std::string allowed = post_path ? "POST" : "GET";
      SendApiError(res,
                   Error(ErrorCode::kInvalidArgument,
                         fmt::format("method not allowed: {} {} takes {}", req.method, path, allowed)),
                   options_.retry_after_s);
      res.status = 405;
      res.set_header("Allow", allowed);
      return;
    }
    SendApiError(res,
                 Error(ErrorCode::kNotFound,
                       fmt::format("no such endpoint: {} {}; this server serves POST /v1/completions, POST "
                                   "/v1/chat/completions and GET /v1/models",
                                   req.method, path)),
                 options_.retry_after_s);
  });
}

}  // namespace cohort::serve
