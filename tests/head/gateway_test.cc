// The head's gateway (head/gateway.h) against fake replicas: small HTTP servers that answer
// /load, completions and streams as a `cohort serve` replica does, and can be told to be
// overloaded, to fail, or to die mid-stream. The replicas are real service jobs placed by
// a Cluster (in-memory store) on two nodes whose free port is the fake's.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "common/http_server.h"
#include "common/prometheus.h"
#include "head/cluster.h"
#include "head/gateway.h"
#include "head/router.h"
#include "store/state_store.h"

namespace cohort::head {
namespace {

// A replica stand-in. Its tokens: the i-th generated token is (seed + i) % 1000, where
// seed is the prompt's length; a stream honours cohort_resume like a real replica (it
// continues after the tokens it is given).
class FakeReplica {
 public:
  enum class Mode { kOk, kOverloaded, kFailing, kHolding };

  FakeReplica() {
    server_.Get("/load", [this](const httplib::Request&, httplib::Response& res) {
      // Its load as a replica counts it: a set load, and the tokens of the requests it holds.
      res.set_content(json{{"running", 0}, {"waiting", 0}, {"queued_tokens", load_.load() + held_tokens_.load()},
                           {"inflight_tokens", 0},
                           {"kv_blocks_used", 1}, {"kv_blocks_total", 10}, {"tokens_per_second", 5.0}}
                          .dump(),
                      "application/json");
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { Complete(req, res); });
    server_.set_keep_alive_max_count(1000);  // a real replica keeps a connection for many requests
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // Bound means listening; a stop() before the loop runs would be lost, so wait for it.
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~FakeReplica() {
    server_.stop();
    thread_.join();
  }

  int port() const { return port_; }
  void set_mode(Mode m) { mode_ = m; }
  void set_load(int64_t tokens) { load_ = tokens; }
  // Streams break (the connection drops) after this many tokens; -1: never.
  void die_after(int tokens) { die_after_ = tokens; }
  int requests() const { return requests_; }
  int held() {
    std::lock_guard<std::mutex> l(mu_);
    return held_;
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    mode_ = Mode::kOk;
    held_cv_.notify_all();
  }

  json last_body() {
    std::lock_guard<std::mutex> l(mu_);
    return last_body_;
  }
  // The X-Cohort-Canary header of each canary received ("" when absent).
  std::vector<std::string> canary_marks() {
    std::lock_guard<std::mutex> l(mu_);
    return canary_marks_;
  }
  // The connections (by the client's port) that requests other than canaries came on.
  size_t connections() {
    std::lock_guard<std::mutex> l(mu_);
    return client_ports_.size();
  }

 private:
  void Complete(const httplib::Request& req, httplib::Response& res) {
    json body = json::parse(req.body);
    bool canary = body.value("prompt", json()) == "Hi" && body.value("max_tokens", 0) == 1;
    if (canary) {
      std::lock_guard<std::mutex> l(mu_);
      canary_marks_.push_back(req.get_header_value("X-Cohort-Canary"));
    }
    if (!canary) {
      ++requests_;
      std::lock_guard<std::mutex> l(mu_);
      last_body_ = body;
      client_ports_.insert(req.remote_port);
    }
    if (!canary && mode_ == Mode::kOverloaded) {
      res.status = 429;
      res.set_content(R"({"error":{"message":"busy","type":"rate_limit_error"}})", "application/json");
      return;
    }
    if (!canary && mode_ == Mode::kHolding) {
      // An unstreamed reply that takes long: held until Release (at most 30 s).
      // Its tokens as the gateway estimates them: max_tokens, a token per 4 prompt bytes, 1.
      const int64_t tokens = body.value("max_tokens", 16) + body.value("prompt", std::string()).size() / 4 + 1;
      std::unique_lock<std::mutex> l(mu_);
      held_ += 1;
      held_tokens_ += tokens;
      held_cv_.wait_for(l, std::chrono::seconds(30), [&] { return mode_ != Mode::kHolding; });
      held_ -= 1;
      held_tokens_ -= tokens;
    }
    if (mode_ == Mode::kFailing) {
      res.status = 500;
      res.set_content(R"({"error":{"message":"broken","type":"server_error"}})", "application/json");
      return;
    }
    const int64_t seed = body.contains("prompt") && body["prompt"].is_string() ? body["prompt"].get<std::string>().size() : 0;
    const int max_tokens = body.value("max_tokens", 16);
    std::vector<int64_t> resumed;
    if (body.contains("cohort_resume")) resumed = body["cohort_resume"]["tokens"].get<std::vector<int64_t>>();
    if (!(body.contains("stream") && body["stream"] == true)) {
      res.set_content(json{{"object", "text_completion"}, {"choices", json::array({{{"text", "ok"}}})},
                           {"usage", {{"completion_tokens", max_tokens}}}}
                          .dump(),
                      "application/json");
      return;
    }
    const int die = die_after_;
    auto next = std::make_shared<int>(static_cast<int>(resumed.size()));
    auto sent = std::make_shared<int>(0);
    // With logprobs, each token's text is "é<i>" (a two-byte character first) and its
    // text_offset counts characters on from the text of the tokens resumed, as a replica
    // does.
    const bool logprobs = body.contains("logprobs");
    auto chars = std::make_shared<int64_t>(0);
    for (size_t j = 0; j < resumed.size(); ++j) *chars += 1 + static_cast<int64_t>(std::to_string(j).size());
    res.set_chunked_content_provider("text/event-stream", [=](size_t, httplib::DataSink& sink) {
      if (*next >= max_tokens) {
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      }
      if (die >= 0 && *sent >= die) return false;  // the replica "dies": the connection drops
      const int i = (*next)++;
      ++*sent;
      const std::string text = (logprobs ? "\u00e9" : "") + std::to_string(i);
      json chunk = {{"object", "text_completion"},
                    {"choices", json::array({{{"text", text},
                                              {"token_ids", json::array({(seed + i) % 1000})},
                                              {"finish_reason", *next == max_tokens ? json("length") : json()}}})}};
      if (logprobs) {
        chunk["choices"][0]["logprobs"] = {{"tokens", {text}}, {"token_logprobs", {-1.0}},
                                           {"top_logprobs", {json::object()}}, {"text_offset", {*chars}}};
        *chars += static_cast<int64_t>(std::to_string(i).size()) + 1;
      }
      const std::string ev = "data: " + chunk.dump() + "\n\n";
      return sink.write(ev.data(), ev.size());
    });
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<Mode> mode_{Mode::kOk};
  std::atomic<int64_t> load_{0};
  std::atomic<int64_t> held_tokens_{0};
  std::atomic<int> die_after_{-1};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::condition_variable held_cv_;
  int held_ = 0;  // held now
  json last_body_;
  std::set<int> client_ports_;
  std::vector<std::string> canary_marks_;
};

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HeadConfig config;
    config.advertise_url = "http://127.0.0.1:1";
    config.timing.failure_timeout_ms = 600'000;
    auto c = Cluster::Open(config, store::NewMemoryStateStore());
    ASSERT_TRUE(c.has_value()) << c.error().message;
    cluster_ = std::move(*c);
    // Two nodes, sites east and west, each offering its fake replica's port as MASTER_PORT.
    const char* names[] = {"east", "west"};
    for (int i = 0; i < 2; ++i) {
      replicas_[names[i]] = std::make_unique<FakeReplica>();
      api::Registration reg;
      reg.name = names[i];
      reg.address = "127.0.0.1";
      reg.agent_url = "http://127.0.0.1:1";
      reg.incarnation = "inc";
      reg.cpus = 8;
      reg.labels = {{"site", names[i]}};
      ASSERT_TRUE(cluster_->Register(reg).has_value());
      api::Heartbeat hb;
      hb.incarnation = "inc";
      hb.free_ports = {replicas_[names[i]]->port()};
      ASSERT_TRUE(cluster_->Heartbeat(names[i], hb).has_value());
    }
    api::JobSpec spec;
    spec.name = "svc";
    spec.user = "u";
    spec.command = {"cohort", "serve"};
    spec.service = "svc";
    spec.service_model = "m";
    spec.placement = api::Placement::kSpread;
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster_->Submit(spec).has_value());
    ASSERT_EQ(cluster_->Schedule(), 2);
    for (const auto& j : cluster_->ListJobs({})) key_of_[j.allocation.nodes.at(0).node] = fmt::format("{}.{}", j.id, j.attempt);

    GatewayOptions o;
    o.canary_every = 1000;  // one canary when first seen
    o.queue_timeout = Millis(200);
    gateway_ = std::make_unique<Gateway>(*cluster_, o);
    HttpServerOptions ho;
    ho.pools = {HttpServerOptions::Pool{"all", 16, 256}};
    http_ = std::make_unique<HttpServer>(ho);
    router_ = std::make_unique<Router>(*http_, nullptr, /*insecure=*/true);
    gateway_->Register(*router_);
    auto port = http_->Bind();
    ASSERT_TRUE(port.has_value());
    port_ = *port;
    serve_ = std::thread([this] { http_->Serve(); });
    gateway_->Tick();
  }
  void TearDown() override {
    http_->Stop();
    serve_.join();
    gateway_->Stop();
  }

  httplib::Result Post(const json& body, httplib::Headers headers = {}) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c.Post("/v1/completions", headers, body.dump(), "application/json");
  }

  bool Healthy(const std::string& node) {
    for (const auto& r : gateway_->Replicas("svc")) {
      if (r.node == node) return r.healthy;
    }
    return false;
  }

  std::unique_ptr<Cluster> cluster_;
  std::map<std::string, std::unique_ptr<FakeReplica>> replicas_;
  std::map<std::string, std::string> key_of_;  // node -> replica key
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<Router> router_;
  std::thread serve_;
  int port_ = 0;
};

const json kRequest = {{"model", "m"}, {"prompt", "hello"}, {"max_tokens", 4}};

TEST_F(GatewayTest, RoutesBySiteSessionAndLoad) {
  ASSERT_TRUE(Healthy("east") && Healthy("west"));
  for (const std::string site : {"east", "west"}) {
    for (int i = 0; i < 3; ++i) {
      auto r = Post(kRequest, {{"X-Cohort-Site", site}});
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 200);
      EXPECT_EQ(r->get_header_value("X-Cohort-Replica"), key_of_[site]);
    }
  }
  std::set<std::string> sessions;
  for (int i = 0; i < 5; ++i) sessions.insert(Post(kRequest, {{"X-Session-Id", "s-1"}})->get_header_value("X-Cohort-Replica"));
  EXPECT_EQ(sessions.size(), 1u);
  // West reports a long queue: new requests go east.
  replicas_["west"]->set_load(100'000);
  gateway_->Tick();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Post(kRequest)->get_header_value("X-Cohort-Replica"), key_of_["east"]);
}

// Requests arriving together between two load reports spread over the replicas. The
// gateway routed on max(the last report, its own outstanding tokens): a replica whose last
// report was taken during a burst that has since ended kept that load until the next
// report, and the next burst went wholly to the other replica (a failover test once killed
// a replica that carried no stream). The gateway's own in-flight requests per replica are
// in /metrics.
TEST_F(GatewayTest, ABurstBetweenLoadReportsSpreadsOverTheReplicas) {
  ASSERT_TRUE(Healthy("east") && Healthy("west"));
  auto burst = [&](int n, httplib::Headers headers) {
    std::vector<std::thread> clients;
    for (int i = 0; i < n; ++i) {
      clients.emplace_back([this, headers] {
        auto r = Post(kRequest, headers);
        EXPECT_TRUE(r && r->status == 200) << (r ? r->body : httplib::to_string(r.error()));
      });
    }
    return clients;
  };
  auto wait_for = [](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done();
  };
  auto metrics = [&] {
    prom::TextWriter w;
    gateway_->WriteMetrics(w);
    return w.Finish().value_or("");
  };
  auto inflight_series = [&](const std::string& node) {
    const std::string job = key_of_[node].substr(0, key_of_[node].find('.'));
    return fmt::format("cohort_replica_gateway_inflight_requests{{service=\"svc\",job=\"{}\",node=\"{}\"}} ", job,
                       node);
  };

  // A first burst, all on east (its site), reported by east while it is in progress. (A
  // fake serves 8 requests at once: httplib's pool.)
  replicas_["east"]->set_mode(FakeReplica::Mode::kHolding);
  replicas_["west"]->set_mode(FakeReplica::Mode::kHolding);
  auto first = burst(6, {{"X-Cohort-Site", "east"}});
  const bool held = wait_for([&] { return replicas_["east"]->held() == 6; });
  const std::string during = metrics();
  if (held) gateway_->Tick();
  replicas_["east"]->Release();
  for (auto& t : first) t.join();
  ASSERT_TRUE(held) << "east holds " << replicas_["east"]->held();
  EXPECT_NE(during.find(inflight_series("east") + "6\n"), std::string::npos) << during;
  EXPECT_NE(metrics().find(inflight_series("east") + "0\n"), std::string::npos) << metrics();

  // The next burst, before the next report: half each.
  replicas_["east"]->set_mode(FakeReplica::Mode::kHolding);
  auto second = burst(4, {});
  const bool all_held = wait_for([&] { return replicas_["east"]->held() + replicas_["west"]->held() == 4; });
  const int east = replicas_["east"]->held(), west = replicas_["west"]->held();
  const std::string text = metrics();
  replicas_["east"]->Release();
  replicas_["west"]->Release();
  for (auto& t : second) t.join();
  ASSERT_TRUE(all_held) << "east holds " << east << ", west " << west;
  EXPECT_EQ(east, 2) << "west got " << west;
  EXPECT_EQ(west, 2) << "east got " << east;
  EXPECT_NE(text.find(inflight_series("east") + std::to_string(east) + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find(inflight_series("west") + std::to_string(west) + "\n"), std::string::npos) << text;
}

TEST_F(GatewayTest, UnknownModelIs404AndNoHealthyReplicaIs503) {
  auto r = Post(json{{"model", "other"}, {"prompt", "x"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "model");
  replicas_["east"]->set_mode(FakeReplica::Mode::kFailing);
  replicas_["west"]->set_mode(FakeReplica::Mode::kFailing);
  r = Post(kRequest);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "service_unavailable_error");
  // When to try again (a replica may be starting or due a canary): it had none.
  EXPECT_EQ(r->get_header_value("Retry-After"), "1") << r->body;
  auto bad = Post(json("not json"));
  EXPECT_EQ(bad->status, 400);
}

// The head's own refusals on the gateway's routes, before the gateway sees the request, as
// OpenAI's SDKs read them: {"error": {"message", "type", "param", "code"}}. A request with
// no token, or one the head does not accept, was a 401 in Cohort's shape ({"error":
// {"code": "unauthenticated", "message"}}: no type, no param).
TEST_F(GatewayTest, TheHeadsRefusalsAreInOpenAisShape) {
  HttpServerOptions ho;
  ho.pools = {HttpServerOptions::Pool{"all", 4, 64}};
  HttpServer secured(ho);
  Router router(secured, /*tokens=*/nullptr, /*insecure=*/false);
  gateway_->Register(router);
  auto port = secured.Bind();
  ASSERT_TRUE(port.has_value());
  std::thread serve([&] { secured.Serve(); });
  httplib::Client c("127.0.0.1", *port);
  for (const httplib::Headers& h : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer cohort_bad"}}}) {
    for (const std::string path : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/models/m"}) {
      auto r = path.starts_with("/v1/models") ? c.Get(path, h) : c.Post(path, h, kRequest.dump(), "application/json");
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 401) << path << ": " << r->body;
      const json body = json::parse(r->body, nullptr, false);
      ASSERT_TRUE(body.contains("error")) << r->body;
      const json& e = body["error"];
      EXPECT_EQ(e.value("type", ""), "authentication_error") << path << ": " << r->body;
      EXPECT_TRUE(e.contains("param") && e.contains("code") && e["message"].is_string()) << path << ": " << r->body;
    }
  }
  secured.Stop();
  serve.join();
}

// The models as the OpenAI SDKs list and retrieve them.
// The canary says it is one, so that the replica leaves it out of its metrics: an idle
// service showed the canaries' tokens per second and time to first token.
TEST_F(GatewayTest, CanariesAreMarkedAsSuch) {
  for (const auto& [node, replica] : replicas_) {
    const auto marks = replica->canary_marks();
    ASSERT_FALSE(marks.empty()) << node;
    for (const auto& m : marks) EXPECT_EQ(m, "1") << node;
  }
}

TEST_F(GatewayTest, ListsAndRetrievesModels) {
  httplib::Client c("127.0.0.1", port_);
  auto list = c.Get("/v1/models");
  ASSERT_TRUE(list);
  EXPECT_EQ(json::parse(list->body)["data"][0]["id"], "m") << list->body;
  auto one = c.Get("/v1/models/m");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200) << one->body;
  EXPECT_EQ(json::parse(one->body)["id"], "m");
  EXPECT_EQ(json::parse(one->body)["owned_by"], "svc");
  // "created" is when the service was deployed (clients sort and show models by it), not 0.
  int64_t deployed = INT64_MAX;
  for (const auto& j : cluster_->ListJobs({})) deployed = std::min(deployed, j.submit_ms / 1000);
  ASSERT_GT(deployed, 0);
  EXPECT_EQ(json::parse(list->body)["data"][0]["created"], deployed) << list->body;
  EXPECT_EQ(json::parse(one->body)["created"], deployed) << one->body;
  auto other = c.Get("/v1/models/other");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404) << other->body;
  EXPECT_EQ(json::parse(other->body)["error"]["param"], "model") << other->body;
}

TEST_F(GatewayTest, AnOverloadedReplicaIsNotUnhealthyAndTheRequestGoesElsewhere) {
  replicas_["east"]->set_mode(FakeReplica::Mode::kOverloaded);
  for (int i = 0; i < 4; ++i) {
    auto r = Post(kRequest, {{"X-Cohort-Site", "east"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("X-Cohort-Replica"), key_of_["west"]);
  }
  EXPECT_TRUE(Healthy("east")) << "429 must not mark a replica unhealthy";
  // Both overloaded: the request waits (bounded), then 429 with Retry-After.
  replicas_["west"]->set_mode(FakeReplica::Mode::kOverloaded);
  auto r = Post(kRequest);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_TRUE(r->has_header("Retry-After"));
  EXPECT_TRUE(Healthy("east") && Healthy("west"));
}

TEST_F(GatewayTest, AFailingReplicaIsMarkedUnhealthyAndTheRequestRetried) {
  replicas_["east"]->set_mode(FakeReplica::Mode::kFailing);
  auto r = Post(kRequest, {{"X-Cohort-Site", "east"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("X-Cohort-Replica"), key_of_["west"]);
  EXPECT_FALSE(Healthy("east"));
  EXPECT_EQ(gateway_->counters().retries, 1);
  // The canary keeps it out while it fails, and brings it back once it answers.
  gateway_->Tick();
  EXPECT_FALSE(Healthy("east"));
  replicas_["east"]->set_mode(FakeReplica::Mode::kOk);
  gateway_->Tick();
  EXPECT_TRUE(Healthy("east"));
}

// OpenAI clients send null for a field they leave unset ("stream": null, "seed": null), as a
// replica accepts; a stream that is not a boolean is the client's error, named. Both were a
// 500 "internal error: [json.exception.type_error.302] type must be boolean, but is null",
// and a sampled stream with "seed": null went out without the seed that makes its
// failover exact.
TEST_F(GatewayTest, NullFieldsAreUnsetAndAWrongStreamIsNamed) {
  json body = kRequest;
  body["stream"] = nullptr;
  auto r = Post(body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["object"], "text_completion") << r->body;

  body["stream"] = "yes";
  r = Post(body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "stream") << r->body;

  body["stream"] = true;
  body["seed"] = nullptr;
  body["temperature"] = 0.7;
  r = Post(body, {{"X-Cohort-Site", "east"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
  EXPECT_TRUE(replicas_["east"]->last_body()["seed"].is_number_integer()) << replicas_["east"]->last_body().dump();
  EXPECT_TRUE(Healthy("east") && Healthy("west"));
}

// A client that hangs up while its unstreamed request is at a replica: the gateway gives
// the request up (closing its connection to the replica, which then cancels it) instead of
// waiting, up to read_timeout, for a reply nobody will read; the replica stays healthy.
TEST_F(GatewayTest, AClientThatHangsUpIsGivenUp) {
  replicas_["east"]->set_mode(FakeReplica::Mode::kHolding);
  {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    std::thread client([&] { (void)c.Post("/v1/completions", {{"X-Cohort-Site", "east"}}, kRequest.dump(), "application/json"); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (replicas_["east"]->held() == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(replicas_["east"]->held(), 1);
    c.stop();  // the client hangs up
    client.join();
  }
  auto inflight = [&] {
    prom::TextWriter w;
    gateway_->WriteMetrics(w);
    return w.Finish().value_or("").find("cohort_gateway_inflight_requests 0\n") == std::string::npos;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (inflight() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(inflight()) << "the gateway still waits for the replica's reply";
  replicas_["east"]->Release();
  EXPECT_TRUE(Healthy("east")) << "a client's hang-up is not the replica's failure";
  auto r = Post(kRequest, {{"X-Cohort-Site", "east"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

// A stream whose replica dies after 3 tokens continues on the other one from token 3: the
// client gets tokens 0..9 once each, and the second replica was told what was sent.
// One stream after another to the same replica: one kept-alive connection, not one each
// (each closed connection would hold a port in TIME_WAIT for a minute).
TEST_F(GatewayTest, StreamsReuseTheReplicasConnection) {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(30, 0);
  for (int i = 0; i < 6; ++i) {
    auto r = c.Post("/v1/completions", {{"X-Cohort-Site", "east"}},
                    json{{"model", "m"}, {"prompt", "hello"}, {"max_tokens", 3}, {"stream", true}}.dump(),
                    "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
  }
  EXPECT_EQ(replicas_["east"]->requests(), 6);
  EXPECT_EQ(replicas_["east"]->connections(), 1u);
}

TEST_F(GatewayTest, AStreamMovesWhenItsReplicaDiesAndNoTokenRepeats) {
  replicas_["east"]->die_after(3);
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(30, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"X-Cohort-Site", "east"}, {"Content-Type", "application/json"}};
  req.body = json{{"model", "m"}, {"prompt", "hello"}, {"max_tokens", 10}, {"stream", true}, {"temperature", 0.7}}.dump();
  std::string body;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    body.append(d, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  ASSERT_TRUE(c.send(req, res, err)) << httplib::to_string(err);
  std::vector<int64_t> tokens;
  size_t pos = 0;
  bool done = false;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const json chunk = json::parse(data);  // named: a range-for over a temporary's member dangles
    for (const auto& id : chunk["choices"][0]["token_ids"]) tokens.push_back(id.get<int64_t>());
  }
  EXPECT_TRUE(done);
  std::vector<int64_t> expected;
  for (int i = 0; i < 10; ++i) expected.push_back(5 + i);  // seed: the prompt's length
  EXPECT_EQ(tokens, expected) << body;
  const json moved = replicas_["west"]->last_body();
  EXPECT_EQ(moved["cohort_resume"]["tokens"], json::array({5, 6, 7}));
  EXPECT_TRUE(moved.contains("seed")) << "a sampled stream gets a seed, so its continuation is reproducible";
  EXPECT_EQ(moved["seed"], replicas_["east"]->last_body()["seed"]);
  EXPECT_EQ(gateway_->counters().failovers, 1);
  EXPECT_FALSE(Healthy("east"));
  // The service's latency as its client saw it: one first token, nine gaps (the move's too).
  prom::TextWriter w;
  gateway_->WriteMetrics(w);
  auto text = w.Finish();
  ASSERT_TRUE(text.has_value()) << text.error().message;
  EXPECT_NE(text->find("cohort_service_time_to_first_token_seconds_count{service=\"svc\"} 1\n"), std::string::npos)
      << *text;
  EXPECT_NE(text->find("cohort_service_inter_token_latency_seconds_count{service=\"svc\"} 9\n"), std::string::npos)
      << *text;
}

// logprobs.text_offset of a moved stream goes on from the text the client already has:
// the same list as a stream that never moved (the replica rebuilds that text from the
// tokens resumed; api_test has the real replica's side).
TEST_F(GatewayTest, AMovedStreamsTextOffsetsAreThoseOfAnUnmovedOne) {
  auto offsets_of = [&]() {
    auto r = Post(json{{"model", "m"}, {"prompt", "hello"}, {"max_tokens", 12}, {"stream", true}, {"logprobs", 0},
                       {"temperature", 0}},
                  {{"X-Cohort-Site", "east"}});
    std::vector<int64_t> offsets;
    std::string text;
    EXPECT_TRUE(r) << httplib::to_string(r.error());
    if (!r) return std::pair{offsets, text};
    EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
    size_t pos = 0;
    while ((pos = r->body.find("data: ", pos)) != std::string::npos) {
      const size_t end = r->body.find("\n\n", pos);
      const std::string data = r->body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (data == "[DONE]") continue;
      const json chunk = json::parse(data);
      text += chunk["choices"][0]["text"].get<std::string>();
      for (const auto& o : chunk["choices"][0]["logprobs"]["text_offset"]) offsets.push_back(o.get<int64_t>());
    }
    return std::pair{offsets, text};
  };
  const auto [unmoved, unmoved_text] = offsets_of();
  ASSERT_EQ(unmoved.size(), 12u);
  EXPECT_EQ(unmoved.back(), 23) << "é0..é9 are two characters each, é10 three: é11 starts at 23";
  replicas_["east"]->die_after(4);
  const auto [moved, moved_text] = offsets_of();
  EXPECT_EQ(moved, unmoved);
  EXPECT_EQ(moved_text, unmoved_text);
  EXPECT_EQ(gateway_->counters().failovers, 1);
  EXPECT_EQ(replicas_["west"]->last_body()["cohort_resume"], json({{"tokens", {5, 6, 7, 8}}}));
}

// A stream that echoes its prompt (completions' echo) and moves after the echo went out
// does not ask the next replica for it again: the client would get the prompt twice (and a
// replica refuses echo with cohort_resume).
TEST_F(GatewayTest, AMovedStreamDoesNotEchoThePromptAgain) {
  replicas_["east"]->die_after(3);
  auto r = Post(json{{"model", "m"}, {"prompt", "hello"}, {"max_tokens", 10}, {"stream", true}, {"echo", true},
                     {"temperature", 0}},
                {{"X-Cohort-Site", "east"}});
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
  EXPECT_EQ(replicas_["east"]->last_body().value("echo", false), true);
  const json moved = replicas_["west"]->last_body();
  EXPECT_FALSE(moved.contains("echo")) << moved.dump();
  EXPECT_EQ(moved["cohort_resume"]["tokens"].size(), 3u) << moved.dump();
  // ... but says it went out: the next replica's text offsets count the prompt's text.
  EXPECT_EQ(moved["cohort_resume"]["echoed"], true) << moved.dump();
  EXPECT_EQ(gateway_->counters().failovers, 1);
}

// A stream of several choices (n > 1, or several prompts) interleaves their tokens, which
// cannot be resumed as one generation elsewhere: when its replica dies it ends with an
// error event saying so, and nothing is sent to another replica as a continuation.
TEST_F(GatewayTest, AStreamOfSeveralChoicesEndsInAnErrorWhenItsReplicaDies) {
  replicas_["east"]->die_after(3);
  for (const json& body : {json{{"model", "m"}, {"prompt", "hello"}, {"n", 2}, {"max_tokens", 10}, {"stream", true}},
                           json{{"model", "m"}, {"prompt", {"a", "b"}}, {"max_tokens", 10}, {"stream", true}}}) {
    auto r = Post(body, {{"X-Cohort-Site", "east"}});
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("does not move to another replica"), std::string::npos) << r->body;
    EXPECT_EQ(r->body.find("data: [DONE]"), std::string::npos) << r->body;
    EXPECT_EQ(replicas_["west"]->requests(), 0) << replicas_["west"]->last_body().dump();
    EXPECT_EQ(gateway_->counters().failovers, 0);
    gateway_->Tick();  // east's canary passes again
    ASSERT_TRUE(Healthy("east"));
  }
}

}  // namespace
}  // namespace cohort::head
