// InferenceServer: one replica's HTTP front — the OpenAI-compatible API over a Batcher.
//
// Routes (plain HTTP; a replica is reached by the head's gateway and by operators on the
// node's network, the gateway being the authenticated front for users):
//   POST /v1/completions, POST /v1/chat/completions  (openai_api.h; stream: server-sent
//        events, one chunk per generated token)
//   GET  /v1/models        the one model served, as {"object": "list", "data": [...]}
//   GET  /v1/models/{id}   that model (404 in OpenAI's shape for another id)
//   GET  /health           200 {"status": "ok"} while serving
//   GET  /load             the batcher's LoadReport with the replica's latencies (the
//                          gateway's least-loaded routing and the head's /metrics read it)
//   GET  /metrics          Prometheus text (serve_metrics.h)
// A generation request with the header X-Cohort-Canary: 1 (the gateway's health check,
// head/gateway.h) is served like any other but left out of the metrics and the load
// report's rates, so that an idle replica shows no traffic.
// Errors use OpenAI's shape (openai_api.h): 400 naming the field, 404 for another model,
// 429 with Retry-After when the queue is full, 503 while stopping; 405 (with Allow) for a
// route asked with another method, 404 naming the routes for any other path.
//
// Generation requests run on a pool of their own whose threads wait for their tokens (a
// stream holds its thread until it ends), so its size bounds the requests in progress.
// A client that hangs up cancels its request, streamed or not (its cache blocks are freed
// at the next step).
//
// Threads: Create and Bind on one thread, Serve on a thread of the owner's (returns after
// Stop), Stop from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/error.h"
#include "common/json.h"
#include "serve/batcher.h"
#include "serve/model_loader.h"
#include "serve/serve_metrics.h"

namespace cohort {
class HttpServer;
}

namespace cohort::serve {

inline constexpr char kCanaryHeader[] = "X-Cohort-Canary";

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string model_name;     // what requests name in "model"
  int http_threads = 128;     // generation requests served at once (streams included)
  int retry_after_s = 1;      // Retry-After of a 429
  // A stream with nothing to send (queued, or between slow tokens) writes an SSE comment
  // this often. Its client's hang-up is looked for more often than that (every 250 ms).
  std::chrono::milliseconds keep_alive{10000};
};

class InferenceServer {
 public:
  // Takes the tokenizer and the model (already on its device) and starts the batcher.
  static Result<std::unique_ptr<InferenceServer>> Create(std::unique_ptr<engine::Tokenizer> tokenizer,
                                                         std::unique_ptr<InferenceModel> model,
                                                         BatcherOptions batcher, ServerOptions options);
  ~InferenceServer();

  Result<int> Bind();
  void Serve();
  void Stop();

  Batcher& batcher() { return *batcher_; }
  const std::string& model_name() const { return options_.model_name; }
  // The /load document.
  json LoadJson() const;

 private:
  InferenceServer() = default;
  void Routes();

  ServerOptions options_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  ServeMetrics metrics_;
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<HttpServer> http_;
  int64_t created_ = 0;
};

}  // namespace cohort::serve
