// HttpServer (common/http_server.h) on loopback, driven by httplib's client and by raw
// sockets that behave as slow, idle, greedy or oversized clients.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "common/http.h"
#include "common/json.h"
#include "common/prometheus.h"
#include "raw_http.h"

namespace cohort {
namespace {

// A server on a free loopback port, served on its own thread for the test's duration.
class Running {
 public:
  explicit Running(HttpServerOptions o, const std::function<void(HttpServer&)>& routes) : server_(std::move(o)) {
    routes(server_);
    auto port = server_.Bind();
    EXPECT_TRUE(port.has_value()) << (port ? "" : port.error().message);
    port_ = port.value_or(0);
    thread_ = std::thread([this] { server_.Serve(); });
  }
  ~Running() {
    server_.Stop();
    thread_.join();
  }
  int port() const { return port_; }
  HttpServer& server() { return server_; }

 private:
  HttpServer server_;
  int port_ = 0;
  std::thread thread_;
};

// A handler's barrier: requests that reach Pass() wait there until Open(). Declared before
// the server whose handlers use it.
class Gate {
 public:
  void Pass() {
    entered_ += 1;
    opened_.wait();
  }
  // Waits until a request has reached Pass().
  void WaitForOne() const {
    while (entered_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  void Open() { open_.set_value(); }

 private:
  std::promise<void> open_;
  std::shared_future<void> opened_ = open_.get_future().share();
  std::atomic<int> entered_{0};
};

// A raw client connection.
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConn() { close(fd_); }
  bool connected() const { return connected_; }
  bool Send(std::string_view s) { return send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()); }
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }
  // Everything the server sends until it closes the connection or `ms` pass.
  std::string ReadUntilClosed(int ms = 10'000) {
    std::string out;
    char buf[4096];
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, ms) <= 0) return out;
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  // The first response's status line, read until it has arrived.
  std::string ReadStatusLine(int ms = 10'000) {
    std::string out;
    char c;
    while (out.find("\r\n") == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, ms) <= 0) return out;
      if (recv(fd_, &c, 1, 0) != 1) return out;
      out += c;
    }
    return out.substr(0, out.size() - 2);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

void EchoRoutes(HttpServer& s) {
  s.Get("/ping", [](const httplib::Request&, httplib::Response& res) { res.set_content("pong", "text/plain"); });
  s.Post("/echo", [](const httplib::Request& req, httplib::Response& res) { res.set_content(req.body, "text/plain"); });
}

HttpServerOptions SmallOptions() {
  HttpServerOptions o;
  o.pools = {{"default", 2, 64}};
  return o;
}

TEST(HttpServer, ServesRequestsOverKeepAliveConnections) {
  Running r(SmallOptions(), EchoRoutes);
  httplib::Client cli("127.0.0.1", r.port());
  cli.set_keep_alive(true);
  for (int i = 0; i < 5; ++i) {
    auto get = cli.Get("/ping");
    ASSERT_TRUE(get) << httplib::to_string(get.error());
    EXPECT_EQ(get->status, 200);
    EXPECT_EQ(get->body, "pong");
    auto post = cli.Post("/echo", "hello " + std::to_string(i), "text/plain");
    ASSERT_TRUE(post);
    EXPECT_EQ(post->body, "hello " + std::to_string(i));
  }
  auto missing = cli.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_GE(r.server().Stats().pools[0].handled, 11);
}

TEST(HttpServer, PipelinedAndHalfClosedRequestsAreAnswered) {
  Running r(SmallOptions(), EchoRoutes);
  RawConn c(r.port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
                     "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                     "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  c.ShutdownWrite();
  std::string all = c.ReadUntilClosed();
  size_t first = all.find("pong");
  size_t echo = all.find("abc");
  size_t second = all.rfind("pong");
  ASSERT_NE(first, std::string::npos) << all;
  ASSERT_NE(echo, std::string::npos) << all;
  EXPECT_LT(first, echo);
  EXPECT_LT(echo, second);
}

TEST(HttpServer, ChunkedBodiesReachTheHandler) {
  Running r(SmallOptions(), EchoRoutes);
  RawConn c(r.port());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
  std::string all = c.ReadUntilClosed();
  EXPECT_NE(all.find("200"), std::string::npos) << all;
  EXPECT_NE(all.find("hello world"), std::string::npos) << all;
}

// The probe of issue 23: clients sending a byte at a time hold every thread of a plain
// httplib server. Here they hold a buffer each, and a normal request is served.
TEST(HttpServer, SlowClientsDoNotTakeTheThreads) {
  Running r(SmallOptions(), EchoRoutes);
  std::vector<std::unique_ptr<RawConn>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<RawConn>(r.port()));
    ASSERT_TRUE(slow.back()->Send("G"));
  }
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(slow[i]->Send("E"));
  httplib::Client cli("127.0.0.1", r.port());
  auto get = cli.Get("/ping");
  ASSERT_TRUE(get) << httplib::to_string(get.error());
  EXPECT_EQ(get->body, "pong");
  EXPECT_GE(r.server().Stats().connections, 20);  // the slow ones are all still open
}

TEST(HttpServer, ARequestThatDoesNotArriveInTimeGets408) {
  HttpServerOptions o = SmallOptions();
  o.request_timeout = Millis(300);
  Running r(o, EchoRoutes);
  RawConn c(r.port());
  ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\nHost: x\r\n"));  // never finishes its headers
  EXPECT_EQ(c.ReadStatusLine(), "HTTP/1.1 408 Request Timeout");
  std::string rest = c.ReadUntilClosed();
  EXPECT_NE(rest.find("did not arrive within"), std::string::npos) << rest;
  EXPECT_EQ(r.server().Stats().timed_out_requests, 1);
}

TEST(HttpServer, AnIdleConnectionIsClosedWithoutAnAnswer) {
  HttpServerOptions o = SmallOptions();
  o.idle_timeout = Millis(200);
  Running r(o, EchoRoutes);
  RawConn c(r.port());
  EXPECT_EQ(c.ReadUntilClosed(), "");
  EXPECT_EQ(r.server().Stats().timed_out_requests, 0);
}

TEST(HttpServer, OversizedBodiesAndHeadersAreRefusedUnread) {
  HttpServerOptions o = SmallOptions();
  o.max_body_bytes = 1 << 20;
  o.max_header_bytes = 4 << 10;
  Running r(o, EchoRoutes);
  {
    RawConn c(r.port());
    ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 300000000\r\n\r\nxx"));
    EXPECT_EQ(c.ReadStatusLine(), "HTTP/1.1 413 Payload Too Large");
    std::string rest = c.ReadUntilClosed();
    EXPECT_NE(rest.find("request body is too large: 300000000 bytes (at most 1 MiB)"), std::string::npos) << rest;
  }
  {
    RawConn c(r.port());
    ASSERT_TRUE(c.Send("GET /ping HTTP/1.1\r\nX-Big: " + std::string(8 << 10, 'a')));
    EXPECT_EQ(c.ReadStatusLine(), "HTTP/1.1 431 Request Header Fields Too Large");
  }
  EXPECT_EQ(r.server().Stats().oversized_requests, 2);
}

// A client still sending a body the server refused gets the refusal, not a reset: the
// server stops writing, keeps reading (and dropping) what arrives for a while, and closes
// only then, so the answer is not lost to the RST that closing with unread input sends.
TEST(HttpServer, AClientStillSendingARefusedBodyReadsTheRefusal) {
  HttpServerOptions o = SmallOptions();
  o.max_body_bytes = 1 << 20;
  Running r(o, EchoRoutes);
  for (int i = 0; i < 5; ++i) {
    HttpClient client("http://127.0.0.1:" + std::to_string(r.port()));
    json big = {{"data", std::string(3 << 20, 'x')}};
    auto res = client.Post("/echo", big);
    ASSERT_FALSE(res.has_value());
    EXPECT_NE(res.error().message.find("request body is too large"), std::string::npos)
        << "round " << i << ": " << res.error().message;
  }
  EXPECT_EQ(r.server().Stats().oversized_requests, 5);
}

// A chunked body has no length up front: the worker reads it, and no more than the cap.
TEST(HttpServer, AChunkedBodyOverTheCapFailsTheRequest) {
  HttpServerOptions o = SmallOptions();
  o.max_body_bytes = 64 << 10;
  std::atomic<bool> handled{false};
  Running r(o, [&](HttpServer& s) {
    s.Post("/echo", [&](const httplib::Request&, httplib::Response&) { handled = true; });
  });
  RawConn c(r.port());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  std::string chunk = fmt::format("{:x}\r\n{}\r\n", 32 << 10, std::string(32 << 10, 'z'));
  for (int i = 0; i < 16; ++i) {
    if (!c.Send(chunk)) break;  // the server may close before we are done
  }
  c.ShutdownWrite();
  std::string all = c.ReadUntilClosed();
  EXPECT_FALSE(handled);
  EXPECT_EQ(all.find("HTTP/1.1 200"), std::string::npos) << all.substr(0, 200);
}

// A route registered with PostWithBodyCap answers a chunked body past the cap with 413
// naming it; the server then closes the connection, whose unread rest is never parsed.
TEST(HttpServer, ACappedRouteAnswersAnEndlessChunkedBody413) {
  Running r(SmallOptions(), [](HttpServer& s) {
    PostWithBodyCap(s, "/capped", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  });
  testing::MemoryWatch memory;
  auto reply = testing::RawUpload(r.port(), testing::ChunkedPost("/capped"), int64_t(300) << 20, /*chunked=*/true);
  EXPECT_EQ(reply.status, 413) << reply.text.substr(0, 300);
  EXPECT_EQ(testing::ReplyErrorMessage(reply.text), "request body is too large (at most 4 MiB)");
  EXPECT_TRUE(reply.closed);
  EXPECT_LT(reply.sent, int64_t(300) << 20);
  EXPECT_LT(memory.PeakGrowth(), int64_t(64) << 20);
}

TEST(HttpServer, ConnectionsPerClientAreCapped) {
  HttpServerOptions o = SmallOptions();
  o.max_connections_per_client = 3;
  Running r(o, EchoRoutes);
  std::vector<std::unique_ptr<RawConn>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<RawConn>(r.port()));
  RawConn extra(r.port());
  EXPECT_EQ(extra.ReadStatusLine(), "HTTP/1.1 429 Too Many Requests");
  std::string rest = extra.ReadUntilClosed();
  EXPECT_NE(rest.find("too many connections from 127.0.0.1 (at most 3 at once)"), std::string::npos) << rest;
  held.pop_back();  // one closes: a new one is admitted again (once the server has seen the close)
  httplib::Client cli("127.0.0.1", r.port());
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    auto get = cli.Get("/ping");
    served = get && get->status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
  EXPECT_GE(r.server().Stats().rejected_connections, 1);
}

// Connections stop short of the process's descriptor limit: at it, accept failed with
// EMFILE, the event loop woke for the listening socket it could not empty without end
// (a head held by 20,000 idle connections from 21 addresses wrote 787 MB of "cannot
// accept" warnings in 20 s and answered nothing), and the process had no descriptor left
// for its own files and calls. Past the reserve the server answers 503 and closes.
TEST(HttpServer, ConnectionsStopShortOfTheDescriptorLimit) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  int open_now = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) open_now += e.path().empty() ? 0 : 1;
  rlimit lowered = before;
  lowered.rlim_cur = static_cast<rlim_t>(open_now + 160);
  if (before.rlim_cur != RLIM_INFINITY && lowered.rlim_cur > before.rlim_cur) GTEST_SKIP() << "a low limit already";
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  struct Restore {
    rlimit r;
    ~Restore() { setrlimit(RLIMIT_NOFILE, &r); }
  } restore{before};
  std::string refused;
  {
    Running r(SmallOptions(), EchoRoutes);
    std::vector<std::unique_ptr<RawConn>> held;
    // Each connection takes two of the test process's descriptors (both ends): the
    // server's reserve (32 of 160) is reached before the limit.
    for (int i = 0; i < 100 && refused.empty(); ++i) {
      auto c = std::make_unique<RawConn>(r.port());
      ASSERT_TRUE(c->connected()) << "connection " << i << " found no descriptor: the server took them all";
      ASSERT_TRUE(c->Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"));
      const std::string status = c->ReadStatusLine();
      if (status == "HTTP/1.1 503 Service Unavailable") {
        refused = c->ReadUntilClosed();
      } else {
        ASSERT_EQ(status, "HTTP/1.1 200 OK") << "connection " << i;
      }
      held.push_back(std::move(c));
    }
    EXPECT_NE(refused.find("file descriptors are in use"), std::string::npos) << refused;
    held.clear();  // the server sees them close and serves again
    httplib::Client cli("127.0.0.1", r.port());
    bool served = false;
    for (int i = 0; i < 100 && !served; ++i) {
      auto get = cli.Get("/ping");
      served = get && get->status == 200;
      if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(served);
  }
}

// Requests of one pool cannot take another's threads: the agent protocol's heartbeats
// are served while every API thread is busy.
TEST(HttpServer, APoolWhoseThreadsAreBusyDoesNotDelayAnother) {
  HttpServerOptions o;
  o.pools = {{"api", 1, 16}, {"agents", 1, 16}};
  o.classify = [](std::string_view, std::string_view path) -> size_t { return path == "/heartbeat" ? 1 : 0; };
  Gate gate;
  Running r(o, [&](HttpServer& s) {
    s.Get("/slow", [&](const httplib::Request&, httplib::Response& res) {
      gate.Pass();
      res.set_content("done", "text/plain");
    });
    s.Get("/heartbeat", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
  });
  auto slow = std::async(std::launch::async, [&] { return httplib::Client("127.0.0.1", r.port()).Get("/slow"); });
  gate.WaitForOne();
  auto hb = httplib::Client("127.0.0.1", r.port()).Get("/heartbeat");
  ASSERT_TRUE(hb);
  EXPECT_EQ(hb->body, "ok");
  EXPECT_EQ(r.server().Stats().pools[0].busy, 1);
  gate.Open();
  auto s = slow.get();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->body, "done");
}

TEST(HttpServer, AFullQueueAnswers503) {
  HttpServerOptions o;
  o.pools = {{"api", 1, 1}};
  Gate gate;
  Running r(o, [&](HttpServer& s) {
    s.Get("/slow", [&](const httplib::Request&, httplib::Response&) {
      gate.Pass();
    });
  });
  RawConn running(r.port()), queued(r.port()), refused(r.port());
  ASSERT_TRUE(running.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
  gate.WaitForOne();
  ASSERT_TRUE(queued.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
  while (r.server().Stats().pools[0].queued == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(refused.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(refused.ReadStatusLine(), "HTTP/1.1 503 Service Unavailable");
  gate.Open();
  EXPECT_EQ(running.ReadStatusLine(), "HTTP/1.1 200 OK");
  EXPECT_EQ(queued.ReadStatusLine(), "HTTP/1.1 200 OK");
  EXPECT_EQ(r.server().Stats().pools[0].rejected, 1);
}

TEST(HttpServer, OneClientsRequestsInAPoolAreCapped) {
  HttpServerOptions o;
  o.pools = {{"api", 1, 16, 0, /*max_per_client=*/1}};
  Gate gate;
  Running r(o, [&](HttpServer& s) {
    s.Get("/slow", [&](const httplib::Request&, httplib::Response&) {
      gate.Pass();
    });
  });
  RawConn first(r.port()), second(r.port());
  ASSERT_TRUE(first.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
  gate.WaitForOne();
  ASSERT_TRUE(second.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(second.ReadStatusLine(), "HTTP/1.1 429 Too Many Requests");
  // The whole refusal arrives and the connection stays open: the request was read whole,
  // so the client may send its next one on it (under TLS, without a new handshake).
  std::string rest = second.ReadUntilClosed(500);
  EXPECT_NE(rest.find("too many requests from 127.0.0.1 at once (at most 1 queued or running)"), std::string::npos)
      << rest;
  EXPECT_EQ(rest.find("Connection: close"), std::string::npos) << rest;
  gate.Open();
  EXPECT_EQ(first.ReadStatusLine(), "HTTP/1.1 200 OK");
  std::string on_same;
  for (int i = 0; i < 100 && on_same != "HTTP/1.1 200 OK"; ++i) {
    ASSERT_TRUE(second.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
    on_same = second.ReadStatusLine();
    second.ReadUntilClosed(50);  // the rest of that reply
    if (on_same != "HTTP/1.1 200 OK") std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(on_same, "HTTP/1.1 200 OK");
  // Its request done (the count drops just after the response is written), the client
  // may send another.
  std::string status;
  for (int i = 0; i < 100 && status != "HTTP/1.1 200 OK"; ++i) {
    RawConn again(r.port());
    ASSERT_TRUE(again.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
    status = again.ReadStatusLine();
    if (status != "HTTP/1.1 200 OK") std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, "HTTP/1.1 200 OK");
}

TEST(HttpServer, MetricsNameEveryPool) {
  HttpServerOptions o;
  o.pools = {{"api", 1, 4}, {"agents", 1, 4}};
  Running r(o, EchoRoutes);
  prom::TextWriter w;
  WriteHttpServerMetrics(w, r.server().Stats());
  auto text = w.Finish();
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_NE(text->find("cohort_http_busy_threads{pool=\"agents\"} 0"), std::string::npos) << *text;
  EXPECT_NE(text->find("cohort_http_connections 0"), std::string::npos) << *text;
}

TEST(HttpServer, BindingAPortInUseIsAClearError) {
  Running r(SmallOptions(), EchoRoutes);
  HttpServerOptions o = SmallOptions();
  o.port = r.port();
  HttpServer second(o);
  auto port = second.Bind();
  ASSERT_FALSE(port);
  EXPECT_NE(port.error().message.find("cannot listen on 127.0.0.1:" + std::to_string(r.port())), std::string::npos)
      << port.error().message;
}

// A reserved port refuses connections until Listen: a client connecting while the
// owner is still getting ready (the head loading its state) is told at once that nobody
// serves there, rather than accepted into a backlog no one reads until it times out.
TEST(HttpServer, AReservedPortRefusesUntilItListens) {
  HttpServer server(SmallOptions());
  EchoRoutes(server);
  auto port = server.Reserve();
  ASSERT_TRUE(port.has_value()) << port.error().message;
  {
    RawConn early(*port);
    EXPECT_FALSE(early.connected()) << "a reserved port must refuse";
  }
  EXPECT_FALSE(server.Reserve().has_value()) << "reserving twice";
  ASSERT_TRUE(server.Listen().has_value());
  std::thread serving([&] { server.Serve(); });
  RawConn conn(*port);
  ASSERT_TRUE(conn.connected());
  ASSERT_TRUE(conn.Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(conn.ReadStatusLine(), "HTTP/1.1 200 OK");
  server.Stop();
  serving.join();
}

// A client that caps a reply's size stops reading at the cap and says so; under the cap
// it gets the body whole, and the client stays usable.
TEST(HttpClient, ACappedGetRefusesALargerReply) {
  const std::string big(1 << 20, 'z');
  Running r(SmallOptions(), [&](HttpServer& s) {
    s.Get("/big", [&](const httplib::Request&, httplib::Response& res) { res.set_content(big, "text/plain"); });
    EchoRoutes(s);
  });
  HttpClient client("http://127.0.0.1:" + std::to_string(r.port()));
  client.set_max_response_bytes(100 << 10);
  auto refused = client.GetRaw("/big");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.error().message.find("is larger than 102400 bytes"), std::string::npos) << refused.error().message;
  auto small = client.GetRaw("/ping");
  ASSERT_TRUE(small.has_value()) << small.error().message;
  EXPECT_EQ(small->body, "pong");
  client.set_max_response_bytes(big.size());
  auto exact = client.GetRaw("/big");
  ASSERT_TRUE(exact.has_value()) << exact.error().message;
  EXPECT_TRUE(exact->body == big);
}

}  // namespace
}  // namespace cohort
