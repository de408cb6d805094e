// The head's calls to agents against agents' servers on loopback. AgentWaker
// (head/agent_waker.h): an agent's wake-ups go over one connection and one TLS handshake,
// however many senders the waker has; after the agent closed an idle connection, the
// waker reconnects presenting the head's certificate as it is then (a renewal in between),
// not the one of its first connection. Router::AgentClient (logs, exec, images): one
// agent's clients share a kept connection, each with its own timeout, and share it with
// the waker (AgentClients).
#include "head/agent_waker.h"
#include "head/router.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "api/routes.h"
#include "common/clock.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/tls.h"
#include "../common/tls_test_util.h"

namespace cohort::head {
namespace {

using tls::test_certs::MakeCa;
using tls::test_certs::MakeLeaf;

bool WaitUntil(const std::function<bool()>& pred, Millis timeout = Millis(10'000)) {
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(Millis(5));
  }
  return pred();
}

// An agent's HTTPS server that counts wake-ups and remembers who sent the last one.
class FakeAgent {
 public:
  FakeAgent(const tls::Authority& ca, Millis idle) {
    ctx_ = tls::ServerContext::Create(ca.cert_pem).value();
    ctx_->SetIdentity(MakeLeaf(ca, "node").identity());
    HttpServerOptions o;
    o.tls = ctx_;
    o.idle_timeout = idle;
    server_ = std::make_unique<HttpServer>(o);
    server_->Post(api::routes::kAgentWake, [this](const httplib::Request& req, httplib::Response& res) {
      {
        MutexLock lock(mu_);
        last_peer_ = tls::PeerName(req.ssl).value_or("");
      }
      ++wakes_;
      res.set_content("{}", "application/json");
    });
    port_ = server_->Bind().value();
    thread_ = std::thread([this] { server_->Serve(); });
  }
  ~FakeAgent() {
    server_->Stop();
    thread_.join();
  }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  int wakes() const { return wakes_; }
  std::string last_peer() const {
    MutexLock lock(mu_);
    return last_peer_;
  }
  HttpServerStats stats() const { return server_->Stats(); }

 private:
  std::shared_ptr<tls::ServerContext> ctx_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> wakes_{0};
  mutable Mutex mu_;
  std::string last_peer_ GUARDED_BY(mu_);
};

// Wakes `agent` and waits until it has heard `expected` wake-ups in all.
void WakeAndWait(AgentWaker& waker, const FakeAgent& agent, int expected) {
  waker.Wake({agent.url()});
  ASSERT_TRUE(WaitUntil([&] { return agent.wakes() >= expected; })) << agent.url() << " heard " << agent.wakes();
}

TEST(AgentWaker, EachAgentIsWokenOverOneConnectionWhateverTheSenders) {
  const tls::Authority ca = MakeCa();
  auto head_id = std::make_shared<tls::IdentitySlot>();
  head_id->Set(MakeLeaf(ca, tls::kHeadName).identity());
  std::vector<std::unique_ptr<FakeAgent>> agents;
  for (int i = 0; i < 3; ++i) agents.push_back(std::make_unique<FakeAgent>(ca, Millis(60'000)));
  AgentClients clients(tls::ClientOptions{ca.cert_pem, head_id});
  AgentWaker waker(clients, 4);
  // One wake-up at a time, so that none is folded into another still queued.
  for (int round = 1; round <= 12; ++round) {
    for (auto& a : agents) WakeAndWait(waker, *a, round);
  }
  for (auto& a : agents) {
    const HttpServerStats st = a->stats();
    EXPECT_EQ(st.accepted_connections, 1) << a->url();
    EXPECT_EQ(st.tls_handshakes, 1) << a->url();
    EXPECT_EQ(a->last_peer(), tls::kHeadName);
  }
}

TEST(AgentWaker, AReconnectionPresentsTheHeadsRenewedCertificate) {
  const tls::Authority ca = MakeCa();
  auto head_id = std::make_shared<tls::IdentitySlot>();
  head_id->Set(MakeLeaf(ca, tls::kHeadName).identity());
  // The agent closes a connection idle for 200 ms.
  FakeAgent agent(ca, Millis(200));
  InitLogging("t", "debug");
  AgentClients clients(tls::ClientOptions{ca.cert_pem, head_id});
  AgentWaker waker(clients, 2);
  WakeAndWait(waker, agent, 1);
  EXPECT_EQ(agent.last_peer(), tls::kHeadName);
  ASSERT_TRUE(WaitUntil([&] { return agent.stats().connections == 0; }));

  // Renewed (under another name here, so that the agent can tell the two certificates
  // apart): the next connection presents the new one.
  const tls::test_certs::Leaf renewed = MakeLeaf(ca, "cohort-head-renewed");
  head_id->Set(renewed.identity());
  WakeAndWait(waker, agent, 2);
  EXPECT_EQ(agent.last_peer(), "cohort-head-renewed");
  EXPECT_EQ(agent.stats().tls_handshakes, 2);
}

TEST(AgentClient, OneAgentsClientsShareAKeptConnection) {
  HttpServerOptions o;
  HttpServer agent(o);
  agent.Get("/v1/logs", [](const httplib::Request&, httplib::Response& res) { res.set_content("line\n", "text/plain"); });
  const int port = agent.Bind().value();
  std::thread serve([&] { agent.Serve(); });
  httplib::Server unused;
  AgentClients clients;
  Router router(unused, nullptr, /*insecure=*/true, nullptr, &clients);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  for (int i = 0; i < 6; ++i) {
    // As `cohort logs -f` polls through the head: a new client for every request.
    HttpClient c = router.AgentClient("n1", url, Millis(1000 + i));
    auto r = c.GetRaw("/v1/logs");
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_EQ(r->body, "line\n");
  }
  EXPECT_EQ(agent.Stats().accepted_connections, 1);
  agent.Stop();
  serve.join();
}

TEST(AgentClient, TheWakerAndTheHeadsOtherCallsShareAnAgentsConnection) {
  HttpServerOptions o;
  HttpServer agent(o);
  std::atomic<int> wakes{0};
  agent.Get("/v1/logs", [](const httplib::Request&, httplib::Response& res) { res.set_content("line\n", "text/plain"); });
  agent.Post(api::routes::kAgentWake, [&](const httplib::Request&, httplib::Response& res) {
    ++wakes;
    res.set_content("{}", "application/json");
  });
  const int port = agent.Bind().value();
  std::thread serve([&] { agent.Serve(); });
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  {
    AgentClients clients;
    httplib::Server unused;
    Router router(unused, nullptr, /*insecure=*/true, nullptr, &clients);
    AgentWaker waker(clients, 4);
    // The logs call is done (its connection kept) before the wake-up goes out.
    auto r = router.AgentClient("n1", url, Millis(1000)).GetRaw("/v1/logs");
    ASSERT_TRUE(r.has_value()) << r.error().message;
    waker.Wake({url});
    ASSERT_TRUE(WaitUntil([&] { return wakes.load() == 1; }));
  }
  EXPECT_EQ(agent.Stats().accepted_connections, 1);
  agent.Stop();
  serve.join();
}

}  // namespace
}  // namespace cohort::head
