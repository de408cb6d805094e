// HttpServer: cpp-httplib's routing and responses behind a front end that a slow, idle or
// greedy client cannot starve.
//
// httplib::Server gives every connection a thread from the moment it is accepted until it
// closes, so 64 clients sending one byte every two seconds, or 64 idle keep-alive
// connections, hold every thread and nothing else is served (heartbeats included). Here
// one event-loop thread (epoll) accepts the connections and reads them until a whole
// request has arrived (request line, headers and, with a Content-Length, the body); only
// then does the request go to a worker thread, which runs httplib's own request
// processing (routing, handlers, compression, the response) over the bytes already read.
// A connection between requests costs a buffer, not a thread.
//
// Limits, each with the answer a client gets:
//   - a request must arrive whole within request_timeout from its first byte (408);
//   - an idle keep-alive connection is closed after idle_timeout;
//   - headers over max_header_bytes (431), a Content-Length over max_body_bytes (413),
//     and no request reads more than max_body_bytes of body (the request fails);
//   - at most max_connections open connections (503), at most max_connections_per_client
//     from one address (429) (over TLS, answered once the handshake is done, so that the
//     client reads why);
//   - a connection that would leave the process fewer than a sixteenth of its file
//     descriptors (RLIMIT_NOFILE; at least 32) is answered 503 and closed, so that the
//     process keeps descriptors for its own files and calls; and should accept fail for
//     want of one all the same, the loop accepts and closes the waiting connections with a
//     descriptor kept spare (it never spins on a listening socket it cannot empty), and
//     says so in the log at most every 10 s;
//   - each pool queues at most max_queued requests (503 "busy"), and at most
//     Pool::max_per_client of one address's requests (429).
// A client is its address: behind one NAT (or on one machine's loopback, as the tests'
// agents are) many clients are one, so the per-client caps are for pools users' scripts
// reach, not for the agents'.
// Requests are classified into pools by method and path (Options::classify), so that, for
// example, the agent protocol has threads of its own that API traffic cannot take.
// Chunked bodies and "Expect: 100-continue" requests go to a worker after their headers;
// the worker then reads the body under the same deadline and cap.
//
// Threads: Bind, then Serve on a thread of the owner's (it returns after Stop); Stop from
// any thread. Handlers run on the pools' threads. Stats() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>

#include "common/clock.h"
#include "common/error.h"

namespace cohort {

namespace prom {
class TextWriter;
}
namespace tls {
class ServerContext;
}

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port

  struct Pool {
    std::string name;
    int threads = 8;
    size_t max_queued = 1024;
    // The threads' nice value (Linux: per thread; raising it needs no privilege): a pool
    // of CPU-heavy requests at +5 yields the cores to the other pools when they compete.
    int nice = 0;
    // > 0: at most this many of one client's requests queued or running in this pool
    // (429 beyond), so that one greedy client cannot fill the queue ahead of the others.
    int max_per_client = 0;
  };
  // At least one; requests go to pools[classify(method, path)] (pools[0] without classify).
  std::vector<Pool> pools = {Pool{"default", 8, 1024}};
  std::function<size_t(std::string_view method, std::string_view path)> classify;

  Millis request_timeout{10'000};
  // Longer than HttpClient's reuse of an idle connection (60 s, common/http.cc), so that
  // a client never sends on a connection the server is closing; and longer than the
  // agents' heartbeat interval, which grows with the cluster (10 s at 10,000 nodes): a
  // connection closed between two heartbeats costs each a new TLS handshake.
  Millis idle_timeout{75'000};
  Millis write_timeout{10'000};
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 4 << 20;
  int max_connections = 20'000;
  int max_connections_per_client = 1024;
  int keep_alive_max_count = 1000;
  // Set: every connection is TLS (tls.h), its handshake done by the event loop before the
  // first request is read; handlers find the connection's SSL in req.ssl.
  std::shared_ptr<tls::ServerContext> tls;
};

// Counters for /metrics.
struct HttpServerStats {
  struct Pool {
    std::string name;
    int64_t queued = 0;       // requests waiting for a thread now
    int64_t busy = 0;         // threads running a request now
    int64_t handled = 0;      // requests started, in all
    int64_t rejected = 0;     // turned away because the queue was full
  };
  int64_t connections = 0;             // open now
  int64_t rejected_connections = 0;    // over max_connections or max_connections_per_client
  int64_t timed_out_requests = 0;      // 408s: a request that did not arrive in time
  int64_t oversized_requests = 0;      // 413s and 431s
  int64_t tls_handshake_failures = 0;  // TLS connections closed before their handshake completed
  int64_t accepted_connections = 0;    // connections accepted, in all
  int64_t tls_handshakes = 0;          // TLS handshakes completed, in all
  std::vector<Pool> pools;
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer() override;

  // Listens; the port (options.port, or the one chosen). Reserve and then Listen.
  Result<int> Bind();
  // Binds the address (the port, options.port or the one chosen) but does not listen yet:
  // a client that connects meanwhile is refused at once, as by a server that is not
  // running, rather than accepted into a backlog nobody reads (the head binds early for
  // its certificate's address and listens once its state is loaded: agents treat a
  // refused head as restarting, a silent one as a partition). kFailedPrecondition when
  // already bound.
  Result<int> Reserve();
  // Starts listening on the reserved address; Serve then accepts. Idempotent.
  Result<void> Listen();
  // Serves TLS with `ctx` (HttpServerOptions::tls); after Bind, before Serve.
  void set_tls(std::shared_ptr<tls::ServerContext> ctx);
  // Runs the event loop and the pools until Stop. Bind (or Reserve and Listen) first;
  // returns at once otherwise.
  void Serve();
  // Stops accepting, closes every connection, waits for running requests. Idempotent.
  void Stop();

  HttpServerStats Stats() const;

  // Streamed replies: a handler may set httplib's content providers (set_chunked_content_
  // provider); they run until the reply ends or Stop.
  // Called from a handler (or its content provider) on a pool thread: the rest of this
  // response leaves as it is written instead of being coalesced into 16 KiB writes, so a
  // streamed reply (server-sent events) reaches the client token by token. A streaming
  // response holds its pool thread until it ends: give such routes a pool of their own.
  static void StreamResponse();
  // Called from a handler on a pool thread: true once the client of the request being
  // handled has closed (or reset) its connection, so that a long handler may give up on
  // a reply nobody will read. A client that shut down its side before the request was
  // handed to the handler (it sends, then half-closes, and reads) is never gone here; one
  // that half-closes while its request is being handled reads as gone.
  static bool ClientGone();

 private:
  struct Impl;
  friend struct Impl;
  // Runs one request over `conn`'s buffered bytes and socket (httplib's processing).
  bool ProcessOne(httplib::Stream& stream, bool close_connection, bool& connection_closed);

  std::unique_ptr<Impl> impl_;
};

// Writes the cohort_http_* families for `stats` (one server per /metrics body).
void WriteHttpServerMetrics(prom::TextWriter& w, const HttpServerStats& stats);

}  // namespace cohort
