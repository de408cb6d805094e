// The per-caller rate limit (head/rate_limit.h, router.h): the token bucket on a fake
// clock (a burst, refusal with the time to wait, the refill, keys apart, the memory it
// keeps); then the Router over HTTP with that clock: 429 with Retry-After and the API's
// error body, recovery once the bucket refills, callers without a token counted by
// address, agents and tasks exempt, refusals kept out of the audit observer; and a head
// started with --rate-limit: its flags checked and the refusals in /metrics.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "api/routes.h"
#include "common/http_server.h"
#include "head/rate_limit.h"
#include "head/router.h"
#include "head_server_fixture.h"

namespace cohort::head {
namespace {

struct FakeClock {
  std::atomic<int64_t> ms{1'000'000};
  std::function<int64_t()> Fn() {
    return [this] { return ms.load(); };
  }
};

RateLimiter::Options Limits(double rate, double burst, FakeClock& clock, size_t max_keys = 100'000) {
  RateLimiter::Options o;
  o.rate = rate;
  o.burst = burst;
  o.max_keys = max_keys;
  o.now_ms = clock.Fn();
  return o;
}

TEST(RateLimiterTest, ABurstThenRefusalsUntilTheBucketRefills) {
  FakeClock clock;
  RateLimiter limiter(Limits(/*rate=*/2, /*burst=*/3, clock));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Admit("a").admitted) << i;
  RateLimiter::Decision d = limiter.Admit("a");
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.retry_after, Millis(500)) << "one request back at 2 a second";
  clock.ms += 499;
  d = limiter.Admit("a");
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.retry_after, Millis(1));
  clock.ms += 1;
  EXPECT_TRUE(limiter.Admit("a").admitted);
  EXPECT_FALSE(limiter.Admit("a").admitted);
  // Sustained: one every 500 ms goes through.
  for (int i = 0; i < 10; ++i) {
    clock.ms += 500;
    EXPECT_TRUE(limiter.Admit("a").admitted) << i;
  }
  // A long idle spell refills to the burst, no more.
  clock.ms += 3'600'000;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Admit("a").admitted) << i;
  EXPECT_FALSE(limiter.Admit("a").admitted);
  EXPECT_EQ(limiter.refused(), 4u);
}

TEST(RateLimiterTest, KeysHaveBucketsOfTheirOwn) {
  FakeClock clock;
  RateLimiter limiter(Limits(1, 1, clock));
  EXPECT_TRUE(limiter.Admit("a").admitted);
  EXPECT_FALSE(limiter.Admit("a").admitted);
  EXPECT_TRUE(limiter.Admit("b").admitted);
  EXPECT_TRUE(limiter.Admit("c").admitted);
}

TEST(RateLimiterTest, RateZeroAdmitsEverythingAndKeepsNothing) {
  FakeClock clock;
  RateLimiter limiter(Limits(0, 0, clock));
  EXPECT_FALSE(limiter.enabled());
  for (int i = 0; i < 10'000; ++i) ASSERT_TRUE(limiter.Admit("a").admitted);
  EXPECT_EQ(limiter.keys(), 0u);
}

TEST(RateLimiterTest, MemoryIsBoundedAndIdleBucketsAreForgotten) {
  FakeClock clock;
  RateLimiter limiter(Limits(10, 20, clock, /*max_keys=*/64));
  for (int i = 0; i < 10'000; ++i) limiter.Admit("address " + std::to_string(i));
  EXPECT_LE(limiter.keys(), 64u) << "a flood of new addresses cannot grow the map";
  // Buckets full again (20 / 10 a second: 2 s) are swept with the next request.
  clock.ms += 2'000;
  limiter.Admit("fresh");
  EXPECT_EQ(limiter.keys(), 1u);
  // A bucket in use is kept, and still limited.
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(limiter.Admit("busy").admitted);
  EXPECT_FALSE(limiter.Admit("busy").admitted);
}

TEST(RateLimiterTest, RatesAndBurstsAreChecked) {
  EXPECT_TRUE(RateLimiter::Validate(0, 0));
  EXPECT_TRUE(RateLimiter::Validate(50, 200));
  EXPECT_TRUE(RateLimiter::Validate(0.5, 1));
  EXPECT_EQ(RateLimiter::Validate(-1, 200).error().field, "rate");
  EXPECT_EQ(RateLimiter::Validate(std::nan(""), 200).error().field, "rate");
  EXPECT_EQ(RateLimiter::Validate(50, 0.5).error().field, "burst");
  EXPECT_EQ(RateLimiter::Validate(50, std::numeric_limits<double>::infinity()).error().field, "burst");
}

// A Router on its own HTTP server with a limiter on a fake clock: 1 request a second,
// bursts of 2.
class RouterRateLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto book = TokenBook::Open(std::nullopt, std::string(32, 'k'),
                                [](const std::string&, const std::string&) -> Result<void> { return {}; });
    ASSERT_TRUE(book);
    tokens_ = std::move(*book);
    alice_ = tokens_->Create("alice", Role::kUser, 0, "test", "", NowUnixMs())->token;
    bob_ = tokens_->Create("bob", Role::kUser, 0, "test", "", NowUnixMs())->token;
    limiter_ = std::make_unique<RateLimiter>(Limits(1, 2, clock_));
    HttpServerOptions options;
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options);
    router_ = std::make_unique<Router>(*server_, tokens_.get(), false);
    router_->set_rate_limiter(limiter_.get());
    router_->set_observer([this](const Router::Route&, const Caller&, const httplib::Request&,
                                 const httplib::Response& res) { observed_.push_back(res.status); });
    auto ok = [](const httplib::Request&, httplib::Response& res) { SendJson(res, json{{"ok", true}}); };
    router_->Get("/v1/thing", Access::kViewer, ok);
    router_->Post("/v1/thing", Access::kUser, ok);
    router_->Get("/v1/health", Access::kPublic, ok);
    router_->Post(api::routes::kAgentHeartbeatPattern, Access::kNode, ok);
    router_->Post(api::routes::kAgentRegister, Access::kAgentJoin, ok);
    router_->Post(api::routes::kReportPattern, Access::kTask, ok);
    auto port = server_->Bind();
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    serving_ = std::thread([this] { server_->Serve(); });
  }
  void TearDown() override {
    server_->Stop();
    if (serving_.joinable()) serving_.join();
  }

  httplib::Result Call(const std::string& method, const std::string& path, const std::string& token) {
    httplib::Client c("127.0.0.1", port_);
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    return method == "GET" ? c.Get(path, h) : c.Post(path, h, "{}", "application/json");
  }
  int Status(const std::string& method, const std::string& path, const std::string& token) {
    auto r = Call(method, path, token);
    EXPECT_TRUE(r) << method << " " << path;
    return r ? r->status : 0;
  }

  FakeClock clock_;
  std::unique_ptr<TokenBook> tokens_;
  std::string alice_, bob_;
  std::unique_ptr<RateLimiter> limiter_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<Router> router_;
  std::vector<int> observed_;  // statuses the observer saw (one server thread at a time here)
  int port_ = 0;
  std::thread serving_;
};

TEST_F(RouterRateLimitTest, PastItsBurstATokenGets429WithRetryAfterUntilItRefills) {
  EXPECT_EQ(Status("GET", "/v1/thing", alice_), 200);
  EXPECT_EQ(Status("POST", "/v1/thing", alice_), 200);
  auto refused = Call("GET", "/v1/thing", alice_);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429);
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
  const Error e = ErrorFromResponse(refused->status, refused->body);
  EXPECT_EQ(e.code, ErrorCode::kResourceExhausted) << refused->body;
  EXPECT_NE(e.message.find("too many requests from alice"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("retry in 1s"), std::string::npos) << e.message;
  EXPECT_EQ(Status("GET", "/v1/thing", bob_), 200) << "another token has a bucket of its own";
  EXPECT_EQ(Status("POST", "/v1/thing", alice_), 429);
  EXPECT_EQ(router_->rate_limited(), 2u);
  clock_.ms += 999;
  EXPECT_EQ(Status("GET", "/v1/thing", alice_), 429);
  clock_.ms += 1;
  EXPECT_EQ(Status("GET", "/v1/thing", alice_), 200) << "refilled after a second";
  EXPECT_EQ(Status("GET", "/v1/thing", alice_), 429);
  EXPECT_EQ(observed_, std::vector<int>{200}) << "refused requests are counted, not observed";
}

TEST_F(RouterRateLimitTest, CallersWithoutAcceptedTokensShareTheirAddresssBucket) {
  EXPECT_EQ(Status("GET", "/v1/health", ""), 200);
  EXPECT_EQ(Status("POST", "/v1/thing", "cohort_bad"), 401);
  auto refused = Call("GET", "/v1/thing", "");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429) << "guessing tokens is slowed too";
  EXPECT_NE(refused->body.find("127.0.0.1 (no accepted token)"), std::string::npos) << refused->body;
  EXPECT_EQ(Status("GET", "/v1/thing", alice_), 200) << "a token is counted apart from its address";
}

TEST_F(RouterRateLimitTest, AgentsAndTasksAreExempt) {
  const std::string node = tokens_->NodeCredential("n1");
  const std::string admin = tokens_->Create("root", Role::kAdmin, 0, "test", "", NowUnixMs())->token;
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(Status("POST", "/v1/agents/n1/heartbeat", node), 200) << i;
    ASSERT_EQ(Status("POST", "/v1/agents/register", admin), 200) << i;
    ASSERT_EQ(Status("POST", "/v1/report/1-0-x", ""), 200) << i;
  }
  EXPECT_EQ(router_->rate_limited(), 0u);
  EXPECT_EQ(Status("GET", "/v1/thing", admin), 200) << "the joins did not use the admin's API bucket";
}

class HeadRateLimitTest : public HeadServerTest {
 protected:
  // So slow a refill that no bucket refills during the test: no clock needed.
  void Configure(HeadConfig& c) override {
    c.rate_limit = 0.001;
    c.rate_burst = 3;
  }
};

TEST_F(HeadRateLimitTest, TheHeadAnswers429PastTheLimitAndCountsIt) {
  const std::string vera = MakeToken("vera", "viewer");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Send("GET", "/v1/jobs", vera)->status, 200) << i;
  auto refused = Send("GET", "/v1/jobs", vera);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429);
  EXPECT_FALSE(refused->get_header_value("Retry-After").empty());
  auto metrics = http_->Get("/metrics");  // the admin's token: a bucket of its own
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_NE(metrics->body.find("cohort_http_rate_limited_total 1"), std::string::npos);
}

TEST(HeadRateLimitConfigTest, ABadRateOrBurstIsRefusedNamingIt) {
  for (const auto& [rate, burst, field] : std::vector<std::tuple<double, double, std::string>>{
           {-1, 200, "rate"}, {50, 0, "burst"}}) {
    HeadConfig config;
    config.port = 0;
    config.state_dir = "/nonexistent/never-created";
    config.rate_limit = rate;
    config.rate_burst = burst;
    auto h = HeadServer::Start(config);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error().field, field) << h.error().message;
  }
}

// The job limits (head/core/job_limits.h) through the API: a submission past a user's limit
// gets 429 with a message naming the user and the flag, and stores nothing; another user
// is not held back; a cancelled job gives its room back.
class HeadJobLimitTest : public HeadServerTest {
 protected:
  void Configure(HeadConfig& c) override { c.max_jobs_per_user = 2; }
};

TEST_F(HeadJobLimitTest, ASubmissionPastTheUsersLimitGets429AndStoresNothing) {
  AddNode("n1", 1);
  const std::string alice = MakeToken("alice", "user");
  const std::string bob = MakeToken("bob", "user");
  const std::string spec = json{{"command", {"sleep", "100"}}, {"gpus_per_node", 1}}.dump();
  std::vector<int64_t> ids;
  for (int i = 0; i < 2; ++i) {
    auto r = Send("POST", "/v1/jobs", alice, spec);
    ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "no reply");
    ids.push_back(json::parse(r->body).value("id", int64_t{0}));
  }
  auto refused = Send("POST", "/v1/jobs", alice, spec);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429);
  const std::string message = json::parse(refused->body)["error"].value("message", "");
  EXPECT_NE(message.find("user alice has 2 jobs pending or running"), std::string::npos) << message;
  EXPECT_NE(message.find("--max-jobs-per-user 2"), std::string::npos) << message;
  EXPECT_EQ(GetJson("/v1/jobs?state=all")["jobs"].size(), 2u) << "the refused job is not stored";
  auto bobs = Send("POST", "/v1/jobs", bob, spec);
  ASSERT_TRUE(bobs);
  EXPECT_EQ(bobs->status, 201) << bobs->body;
  ASSERT_EQ(Send("POST", "/v1/jobs/" + std::to_string(ids[1]) + "/cancel", alice)->status, 200);
  auto again = Send("POST", "/v1/jobs", alice, spec);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 201) << again->body;
}

TEST(HeadJobLimitConfigTest, ANegativeLimitIsRefusedNamingIt) {
  for (const std::string field : {"max_jobs_per_user", "max_jobs"}) {
    HeadConfig config;
    config.port = 0;
    config.state_dir = "/nonexistent/never-created";
    (field == "max_jobs" ? config.max_jobs : config.max_jobs_per_user) = -1;
    auto h = HeadServer::Start(config);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error().field, field) << h.error().message;
  }
}

}  // namespace
}  // namespace cohort::head
