#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/http.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/prometheus.h"
#include "common/tls.h"
#include "common/tls_seal.h"

namespace cohort {

namespace {

int64_t MonoMs() {
  return std::chrono::duration_cast<Millis>(SteadyClock::now().time_since_epoch()).count();
}

// One client connection. Owned by the event loop while it waits for a request, by one
// worker while that worker runs a request on it.
struct Conn {
  int fd = -1;
  std::string peer_ip;
  int peer_port = 0;
  std::string buf;          // bytes read and not yet consumed by a request
  bool reading = false;     // a request has begun (bytes are in buf)
  int64_t deadline_ms = 0;  // the request's deadline while reading, else the idle deadline
  int served = 0;           // requests run on this connection
  bool close_after = false; // the response said "Connection: close"
  bool peer_closed = false; // the client shut down its side after sending
  SSL* ssl = nullptr;       // a TLS connection (HttpServerOptions::tls), else plain
  bool handshaking = false; // its TLS handshake has not completed
  bool draining = false;    // answered and shut for writing: input is read and dropped until it ends
  size_t drain_budget = 0;  // bytes a draining connection may still drop before it is closed
  bool watched = false;     // handed back already watched by epoll (HandBack's quiet path)
  std::optional<std::pair<std::string, int>> local;  // this end's address, once asked for
  // Over a cap (Admit): what it is answered, over TLS once its handshake lets it be read
  // (the same bytes in clear only made the client's handshake fail, "wrong version
  // number", which said nothing of the cause).
  struct Refusal {
    int status = 0;
    ErrorCode code = ErrorCode::kUnavailable;
    std::string message;
  };
  std::optional<Refusal> refusal;
};

// What the event loop needs of a request whose headers have arrived.
struct RequestHead {
  size_t header_bytes = 0;  // through the blank line
  std::string method;
  std::string path;
  uint64_t content_length = 0;
  bool chunked = false;
  bool expect_continue = false;
};

bool HeaderIs(std::string_view name, std::string_view want) {
  return name.size() == want.size() &&
         std::equal(name.begin(), name.end(), want.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool ContainsToken(std::string_view value, std::string_view token) {
  std::string lower(value);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find(token) != std::string::npos;
}

// Reads one header line into the head; false for a Content-Length that is not a number.
bool ReadHeaderLine(std::string_view line, RequestHead& head) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return true;  // httplib skips it as it does
  std::string_view name = Trim(line.substr(0, colon));
  std::string_view value = Trim(line.substr(colon + 1));
  if (HeaderIs(name, "content-length")) {
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), head.content_length);
    return ec == std::errc() && ptr == value.data() + value.size();
  }
  if (HeaderIs(name, "transfer-encoding")) head.chunked = ContainsToken(value, "chunked");
  if (HeaderIs(name, "expect")) head.expect_continue = ContainsToken(value, "100-continue");
  return true;
}

// The head at the start of `buf`: std::nullopt until its blank line has arrived; an error
// message for a request line or Content-Length that cannot be read.
std::optional<Result<RequestHead>> ParseHead(std::string_view buf) {
  size_t end = buf.find("\r\n\r\n");
  if (end == std::string_view::npos) return std::nullopt;
  RequestHead head;
  head.header_bytes = end + 4;
  std::string_view text = buf.substr(0, end + 2);
  size_t eol = text.find("\r\n");
  std::string_view line = text.substr(0, eol);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) {
    return Result<RequestHead>(MakeError(ErrorCode::kInvalidArgument, "malformed request line"));
  }
  head.method = std::string(line.substr(0, sp1));
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  head.path = std::string(target.substr(0, target.find('?')));
  for (size_t pos = eol + 2; pos < text.size();) {
    size_t next = text.find("\r\n", pos);
    if (!ReadHeaderLine(text.substr(pos, next - pos), head)) {
      return Result<RequestHead>(MakeError(ErrorCode::kInvalidArgument, "Content-Length is not a number"));
    }
    pos = next + 2;
  }
  return Result<RequestHead>(std::move(head));
}

// Waits up to `ms` for `events` on `fd`; true when ready.
bool PollFor(int fd, short events, int64_t ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000)));
    if (n > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Writes all of `data` before `deadline_ms` (monotonic); false on error or timeout.
bool WriteAll(int fd, const char* data, size_t size, int64_t deadline_ms) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!PollFor(fd, POLLOUT, deadline_ms - MonoMs())) return false;
      continue;
    }
    return false;
  }
  return true;
}

// The payload of one TLS record: what fits in one record goes out through the SSL.
constexpr size_t kTlsRecordBytes = 16 << 10;
// Plaintext sealed per write(2) when a write spans several records (16 records).
constexpr size_t kTlsBatchBytes = 256 << 10;

// The same over a TLS connection whose handshake is done: `head` then `body`. A write of
// one record goes through the SSL to the socket; a longer one is sealed into memory and
// sent in batches of kTlsBatchBytes (tls_seal.h: one write(2) per batch where OpenSSL
// makes one per record).
bool WriteAllTls(SSL* ssl, int fd, std::string_view head, std::string_view body, int64_t deadline_ms) {
  if (head.size() + body.size() > kTlsRecordBytes) {
    tls::RecordSealer sealer(ssl);
    if (sealer.ok()) {
      std::string sealed;
      sealed.reserve(kTlsBatchBytes + (16 << 10));  // a batch and its records' overhead
      std::string_view rest = body;
      for (bool first = true; first || !rest.empty(); first = false) {
        sealed.clear();
        size_t take = std::min(rest.size(), kTlsBatchBytes - std::min(kTlsBatchBytes, first ? head.size() : 0));
        if (first && !sealer.Seal(head, sealed)) return false;
        if (!sealer.Seal(rest.substr(0, take), sealed)) return false;
        rest.remove_prefix(take);
        if (!WriteAll(fd, sealed.data(), sealed.size(), deadline_ms)) return false;
      }
      return true;
    }
  }
  for (std::string_view part : {head, body}) {
    size_t done = 0;
    while (done < part.size()) {
      tls::ClearErrors();
      int n = SSL_write(ssl, part.data() + done, static_cast<int>(std::min<size_t>(part.size() - done, 1 << 30)));
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      const int err = SSL_get_error(ssl, n);
      if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
        if (!PollFor(fd, err == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN, deadline_ms - MonoMs())) return false;
        continue;
      }
      return false;
    }
  }
  return true;
}

// Writes `head`, then `body`, before `deadline_ms`; false on error or timeout.
bool ConnWrite(const Conn& conn, std::string_view head, std::string_view body, int64_t deadline_ms) {
  if (!conn.ssl) {
    return WriteAll(conn.fd, head.data(), head.size(), deadline_ms) &&
           WriteAll(conn.fd, body.data(), body.size(), deadline_ms);
  }
  if (conn.handshaking) return false;  // nothing can be said before the handshake
  return WriteAllTls(conn.ssl, conn.fd, head, body, deadline_ms);
}

bool ConnWrite(const Conn& conn, const char* data, size_t size, int64_t deadline_ms) {
  return ConnWrite(conn, std::string_view(data, size), std::string_view(), deadline_ms);
}

// One read from a TLS connection: > 0 bytes, 0 when nothing can be read now (`want`
// says what to wait for), -1 when it is closed (cleanly: `eof`) or broken.
ssize_t ReadTls(SSL* ssl, char* ptr, size_t size, short& want, bool& eof) {
  tls::ClearErrors();
  int n = SSL_read(ssl, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
  if (n > 0) return n;
  const int err = SSL_get_error(ssl, n);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    want = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    return 0;
  }
  eof = err == SSL_ERROR_ZERO_RETURN;
  ERR_clear_error();
  return -1;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Bad Request";
  }
}

// A complete error response in the API's error format, closing the connection.
// With `keep_alive`, the connection stays open for the client's next request.
std::string ErrorResponse(int status, ErrorCode code, std::string_view message, bool keep_alive = false) {
  std::string body = ErrorToJson(Error{code, std::string(message)}).dump();
  std::string retry = status == 429 || status == 503 ? "Retry-After: 1\r\n" : "";
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}{}\r\n{}",
      status, ReasonPhrase(status), body.size(), retry, keep_alive ? "" : "Connection: close\r\n", body);
}

// httplib's view of a connection for one request: the bytes the event loop read first,
// then the socket, every read before the request's deadline and within its byte budget.
// Writes up to kCoalesceBytes wait in a buffer, so that a response's head and a small
// body leave together: one send, and under TLS one record (one seal, one syscall),
// instead of two. The buffer goes out before any read (a "100 Continue" must reach the
// client before its body can come) and at Flush, which the caller calls when the request
// is done.
class ConnStream final : public httplib::Stream {
 public:
  static constexpr size_t kCoalesceBytes = kTlsRecordBytes;

  ConnStream(Conn& conn, int64_t deadline_ms, size_t budget, Millis write_timeout)
      : conn_(conn), deadline_ms_(deadline_ms), budget_(budget), write_timeout_(write_timeout) {}

  // The bytes a request did not consume stay in the connection's buffer.
  ~ConnStream() override { conn_.buf.erase(0, consumed_); }

  // Sends what the buffer holds; false if the connection failed.
  bool Flush() const {
    if (out_.empty()) return !write_failed_;
    const bool ok = ConnWrite(conn_, out_.data(), out_.size(), MonoMs() + write_timeout_.count());
    out_.clear();
    write_failed_ |= !ok;
    return ok;
  }

  bool is_readable() const override {
    if (!Flush()) return false;
    return consumed_ < conn_.buf.size() || (conn_.ssl && SSL_has_pending(conn_.ssl) == 1) ||
           PollFor(conn_.fd, POLLIN, deadline_ms_ - MonoMs());
  }
  bool is_writable() const override { return PollFor(conn_.fd, POLLOUT, write_timeout_.count()); }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (!Flush()) return -1;
    if (consumed_ < conn_.buf.size()) {
      size_t n = std::min(size, conn_.buf.size() - consumed_);
      std::memcpy(ptr, conn_.buf.data() + consumed_, n);
      consumed_ += n;
      return static_cast<ssize_t>(n);
    }
    if (from_socket_ >= budget_) return -1;  // the request is larger than any allowed
    size = std::min(size, budget_ - from_socket_);
    if (conn_.ssl) {
      for (;;) {
        short want = POLLIN;
        bool eof = false;
        ssize_t n = ReadTls(conn_.ssl, ptr, size, want, eof);
        if (n > 0) {
          from_socket_ += static_cast<size_t>(n);
          return n;
        }
        if (n < 0 || !PollFor(conn_.fd, want, deadline_ms_ - MonoMs())) return -1;
      }
    }
    for (;;) {
      if (!PollFor(conn_.fd, POLLIN, deadline_ms_ - MonoMs())) return -1;
      ssize_t n = ::recv(conn_.fd, ptr, size, MSG_DONTWAIT);
      if (n > 0) {
        from_socket_ += static_cast<size_t>(n);
        return n;
      }
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      return -1;
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (write_failed_) return -1;
    if (write_through_) {
      out_.append(ptr, size);
      return Flush() ? static_cast<ssize_t>(size) : -1;
    }
    if (size <= kCoalesceBytes) {
      if (out_.size() + size > kCoalesceBytes && !Flush()) return -1;
      out_.append(ptr, size);
      return static_cast<ssize_t>(size);
    }
    // A large write takes what waits in the buffer (a reply's head) along: under TLS they
    // are sealed into the same batches.
    const bool ok = ConnWrite(conn_, out_, std::string_view(ptr, size), MonoMs() + write_timeout_.count());
    out_.clear();
    write_failed_ |= !ok;
    return ok ? static_cast<ssize_t>(size) : -1;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = conn_.peer_ip;
    port = conn_.peer_port;
  }

  // httplib asks on every request: the connection's first answer is kept.
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    if (!conn_.local) {
      conn_.local.emplace("", 0);
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      char host[NI_MAXHOST], serv[NI_MAXSERV];
      if (getsockname(conn_.fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
          getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
        conn_.local.emplace(host, std::atoi(serv));
      }
    }
    ip = conn_.local->first;
    port = conn_.local->second;
  }

  socket_t socket() const override { return conn_.fd; }

  // From now on every write goes out at once (HttpServer::StreamResponse).
  void WriteThrough() { write_through_ = true; }

 private:
  Conn& conn_;
  int64_t deadline_ms_;
  size_t budget_;
  Millis write_timeout_;
  size_t consumed_ = 0;
  size_t from_socket_ = 0;
  // Written, not yet sent; mutable since httplib's const is_readable must send it first.
  mutable std::string out_;
  mutable bool write_failed_ = false;  // a send failed: the response cannot be completed
  bool write_through_ = false;
};

thread_local Conn* current_conn = nullptr;
thread_local ConnStream* current_stream = nullptr;

}  // namespace

// ---- Worker pools --------------------------------------------------------------------

struct HttpServer::Impl {
  // A worker waiting for a request, woken on its own.
  struct Idle {
    CondVar cv;
    bool woken = false;  // guarded by its pool's mu
  };

  struct PoolState {
    size_t index = 0;
    HttpServerOptions::Pool options;
    Mutex mu;
    std::deque<std::unique_ptr<Conn>> queue GUARDED_BY(mu);
    bool stopping GUARDED_BY(mu) = false;
    std::vector<std::thread> threads;
    std::vector<std::unique_ptr<Idle>> workers;  // one per thread, as long as the pool
    // The workers waiting, the most recently idle last: a request wakes that one. Its
    // caches are warm (its stack, the handler's data, OpenSSL's per-thread state), where
    // a condition variable would wake the longest idle. Measured (bench_head_scale 1000,
    // 2-core VM, 4 rounds): the mTLS head's CPU per heartbeat 441 -> 399 us at the median,
    // the insecure one's unchanged (bench/README, "The worker a request wakes").
    std::vector<Idle*> idle GUARDED_BY(mu);
    std::atomic<int64_t> busy{0}, handled{0}, rejected{0}, queued{0};
  };

  HttpServer& server;
  HttpServerOptions options;
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;
  // Descriptors kept free for the process (header: Limits): an accepted descriptor at or
  // above fd_high_water is turned away. spare_fd is closed to accept, and close, a
  // connection when accept fails for want of a descriptor. Event loop only.
  int fd_high_water = INT32_MAX;
  int fd_limit = 0;  // RLIMIT_NOFILE when Listen ran
  int spare_fd = -1;
  int64_t shed_logged_ms = 0;
  int64_t shed_unlogged = 0;
  std::vector<std::unique_ptr<PoolState>> pools;

  // Event loop state (the loop thread only).
  std::unordered_map<int, std::unique_ptr<Conn>> waiting;

  Mutex mu;  // the hand-back queue and per-client counts, shared with the workers
  std::vector<std::unique_ptr<Conn>> handed_back GUARDED_BY(mu);
  std::unordered_map<std::string, int> per_client GUARDED_BY(mu);
  // (pool, client) → requests queued or running, for pools with max_per_client.
  std::map<std::pair<size_t, std::string>, int> in_flight GUARDED_BY(mu);
  std::atomic<bool> stopping{false};

  std::atomic<int64_t> connections{0}, rejected_connections{0}, timed_out{0}, oversized{0}, tls_failures{0};
  std::atomic<int64_t> accepted{0}, tls_handshakes{0};  // totals

  Impl(HttpServer& s, HttpServerOptions o) : server(s), options(std::move(o)) {
    if (options.pools.empty()) options.pools.push_back(HttpServerOptions::Pool{});
    for (const auto& p : options.pools) {
      pools.push_back(std::make_unique<PoolState>());
      pools.back()->index = pools.size() - 1;
      pools.back()->options = p;
    }
  }

  ~Impl() {
    for (int fd : {listen_fd, epoll_fd, wake_fd, spare_fd}) {
      if (fd >= 0) ::close(fd);
    }
  }

  // ---- Connections.

  void Close(std::unique_ptr<Conn> conn) {
    if (conn->ssl) {
      if (!conn->handshaking) SSL_shutdown(conn->ssl);  // best effort: the socket does not block
      SSL_free(conn->ssl);
      ERR_clear_error();
    }
    ::close(conn->fd);
    connections -= 1;
    MutexLock lock(mu);
    auto it = per_client.find(conn->peer_ip);
    if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
  }

  // How long, and how many bytes, a rejected connection is drained before it is closed.
  static constexpr int64_t kDrainMs = 2000;
  static constexpr size_t kDrainFactor = 4;  // x max_body_bytes

  // Answers `status` with `message` (best effort, the client may not read) and closes the
  // connection for writing. Closing a socket with unread input sends a reset, and a client
  // still sending (a body the answer refuses) would lose the answer with it; so the loop
  // reads and drops what arrives until the client closes too, or kDrainMs, or
  // kDrainFactor bodies' worth of bytes, and only then closes (nginx's lingering close).
  // Without `drain` (a connection over the caps, a client too slow to finish its request)
  // it closes at once. Event loop only.
  void Reject(std::unique_ptr<Conn> conn, int status, ErrorCode code, std::string_view message, bool drain = true) {
    std::string text = ErrorResponse(status, code, message);
    const bool written = ConnWrite(*conn, text.data(), text.size(), MonoMs() + 100);
    if (!drain || !written || conn->peer_closed || stopping) {
      ::shutdown(conn->fd, SHUT_WR);
      return Close(std::move(conn));
    }
    ::shutdown(conn->fd, SHUT_WR);
    conn->draining = true;
    conn->drain_budget = options.max_body_bytes * kDrainFactor;
    conn->deadline_ms = MonoMs() + kDrainMs;
    conn->buf.clear();
    const int fd = conn->fd;
    Watch(*conn);
    waiting[fd] = std::move(conn);
  }

  // Answers a connection over a cap with its refusal and closes it (header: Limits).
  void RejectOverCap(std::unique_ptr<Conn> conn) {
    const Conn::Refusal r = std::move(*conn->refusal);
    Reject(std::move(conn), r.status, r.code, r.message, /*drain=*/false);
  }

  // Drops what a draining connection's client sent; closes it once the client is done or
  // the budget is spent.
  void Drain(int fd) {
    Conn& conn = *waiting.at(fd);
    char chunk[64 << 10];
    for (;;) {
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n > 0) {
        if (static_cast<size_t>(n) >= conn.drain_budget) return Close(Take(fd));
        conn.drain_budget -= static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      return Close(Take(fd));  // the client closed (or the connection broke)
    }
  }

  void Wake() {
    uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof one);
  }

  // A worker is done with a request; the connection waits for the next one in the loop.
  // Usually nothing of the next request is here yet: the worker then watches the
  // connection itself and leaves it for the loop to adopt at its next turn, without waking
  // the loop (that wake-up was a context switch of the loop thread per request, a large
  // part of a heartbeat's cost on a small VM: bench_http_server). Bytes already here (a
  // pipelined request, TLS bytes read ahead, a client that shut down its side) wake it to
  // serve them. The watch and the hand-back happen under `mu`, which the loop takes to
  // adopt: an event for the connection comes only after its watch, so by the time the loop
  // looks for it (after taking `mu`) it is adopted, and the loop never sees an fd it does
  // not hold yet.
  void HandBack(std::unique_ptr<Conn> conn) {
    if (stopping) return Close(std::move(conn));
    conn->reading = false;
    conn->close_after = false;
    conn->deadline_ms = MonoMs() + options.idle_timeout.count();
    const bool quiet = conn->buf.empty() && !conn->peer_closed && !(conn->ssl && SSL_has_pending(conn->ssl) == 1);
    conn->watched = quiet;
    {
      MutexLock lock(mu);
      if (quiet) Watch(*conn);
      handed_back.push_back(std::move(conn));
    }
    if (!quiet) Wake();
  }

  // ---- Per-client limits of a pool.

  // Counts one more request of `client` in `pool`; false if it already has its maximum.
  bool BeginInFlight(const PoolState& pool, const std::string& client) {
    if (pool.options.max_per_client <= 0) return true;
    MutexLock lock(mu);
    int& n = in_flight[{pool.index, client}];
    if (n >= pool.options.max_per_client) return false;
    n += 1;
    return true;
  }

  void EndInFlight(const PoolState& pool, const std::string& client) {
    if (pool.options.max_per_client <= 0) return;
    MutexLock lock(mu);
    auto it = in_flight.find({pool.index, client});
    if (it != in_flight.end() && --it->second <= 0) in_flight.erase(it);
  }

  // ---- Workers.

  void RunRequest(std::unique_ptr<Conn> conn) {
    const bool last = conn->served + 1 >= options.keep_alive_max_count || stopping.load();
    bool closed = false;
    bool ok = false;
    {
      const size_t budget = options.max_header_bytes + options.max_body_bytes + (64 << 10);
      ConnStream stream(*conn, conn->deadline_ms, budget, options.write_timeout);
      current_conn = conn.get();
      current_stream = &stream;
      ok = server.ProcessOne(stream, last, closed);
      ok = stream.Flush() && ok;
      current_stream = nullptr;
      current_conn = nullptr;
    }
    conn->served += 1;
    // A client that shut down its side may still have whole requests in the buffer: the
    // loop serves them, then closes.
    if (!ok || closed || last || conn->close_after) return Close(std::move(conn));
    HandBack(std::move(conn));
  }

  // The most recently idle worker, marked woken and off the idle stack (its cv to be
  // notified once pool.mu is released, so that the woken thread need not wait for it), or
  // null when none is idle: one that is busy takes the request when it finishes.
  static Idle* TakeIdle(PoolState& pool) REQUIRES(pool.mu) {
    if (pool.idle.empty()) return nullptr;
    Idle* worker = pool.idle.back();
    pool.idle.pop_back();
    worker->woken = true;
    return worker;
  }

  void WorkerLoop(PoolState& pool, Idle& me) {
    if (pool.options.nice != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), pool.options.nice);
    for (;;) {
      std::unique_ptr<Conn> conn;
      {
        MutexLock lock(pool.mu);
        while (!pool.stopping && pool.queue.empty()) {
          me.woken = false;
          pool.idle.push_back(&me);
          while (!me.woken) me.cv.Wait(pool.mu);
        }
        if (pool.queue.empty()) return;
        conn = std::move(pool.queue.front());
        pool.queue.pop_front();
        pool.queued -= 1;
      }
      pool.busy += 1;
      pool.handled += 1;
      const std::string client = conn->peer_ip;
      RunRequest(std::move(conn));
      pool.busy -= 1;
      EndInFlight(pool, client);
    }
  }

  void StartPools() {
    for (auto& p : pools) {
      for (int i = 0; i < std::max(1, p->options.threads); ++i) {
        p->workers.push_back(std::make_unique<Idle>());
        p->threads.emplace_back([this, pool = p.get(), me = p->workers.back().get()] { WorkerLoop(*pool, *me); });
      }
    }
  }

  void StopPools() {
    for (auto& p : pools) {
      std::deque<std::unique_ptr<Conn>> left;
      {
        MutexLock lock(p->mu);
        p->stopping = true;
        left.swap(p->queue);
        for (Idle* worker : p->idle) worker->woken = true;
        p->idle.clear();
      }
      for (auto& worker : p->workers) worker->cv.NotifyOne();
      for (auto& c : left) Close(std::move(c));
    }
    for (auto& p : pools) {
      for (auto& t : p->threads) t.join();
    }
  }

  // ---- The event loop.

  void Watch(Conn& conn) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = conn.fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, conn.fd, &ev);
  }

  // What the loop waits for on a connection: input, and also room to write while a TLS
  // handshake waits to send.
  void WatchFor(Conn& conn, bool writable) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (writable ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    ev.data.fd = conn.fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, conn.fd, &ev);
  }

  // Advances a TLS handshake; false when the connection is done for (closed here).
  bool Handshake(int fd) {
    Conn& conn = *waiting.at(fd);
    tls::ClearErrors();
    const int rc = SSL_do_handshake(conn.ssl);
    if (rc == 1) {
      tls_handshakes += 1;
      conn.handshaking = false;
      WatchFor(conn, false);
      return true;
    }
    const int err = SSL_get_error(conn.ssl, rc);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      // A handshake under way is a request under way: it must finish in time.
      if (!conn.reading) {
        conn.reading = true;
        conn.deadline_ms = MonoMs() + options.request_timeout.count();
      }
      WatchFor(conn, err == SSL_ERROR_WANT_WRITE);
      return true;
    }
    tls_failures += 1;
    if (tls_failures.load() % 100 == 1) {
      LOG_DEBUG("http: TLS handshake with {} failed: {}", conn.peer_ip,
                ERR_reason_error_string(ERR_peek_error()) ? ERR_reason_error_string(ERR_peek_error()) : "closed");
    }
    ERR_clear_error();
    Close(Take(fd));
    return false;
  }

  // Starts the connection's request clock when its first byte has arrived.
  void NoteRequestStart(Conn& conn) {
    if (!conn.reading && !conn.buf.empty()) {
      conn.reading = true;
      conn.deadline_ms = MonoMs() + options.request_timeout.count();
    }
  }

  // Admits a new connection, or turns it away over the caps.
  void Admit(int fd, const sockaddr_storage& addr, socklen_t len) {
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "0";
    getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                NI_NUMERICHOST | NI_NUMERICSERV);
    conn->peer_ip = host;
    conn->peer_port = std::atoi(serv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    connections += 1;
    accepted += 1;
    int from_client = 0;
    {
      MutexLock lock(mu);
      from_client = ++per_client[conn->peer_ip];
    }
    if (fd >= fd_high_water) {
      // Descriptors are lowest first: every one below this is taken.
      conn->refusal = Conn::Refusal{
          503, ErrorCode::kUnavailable,
          fmt::format("server busy: {} of its {} file descriptors are in use ({} connections open)", fd + 1, fd_limit,
                      connections.load())};
    } else if (connections > options.max_connections) {
      conn->refusal = Conn::Refusal{503, ErrorCode::kUnavailable,
                                    fmt::format("server busy: {} connections open (at most {})", connections.load(),
                                                options.max_connections)};
    } else if (from_client > options.max_connections_per_client) {
      conn->refusal = Conn::Refusal{429, ErrorCode::kResourceExhausted,
                                    fmt::format("too many connections from {} (at most {} at once)", conn->peer_ip,
                                                options.max_connections_per_client)};
    }
    if (conn->refusal) {
      rejected_connections += 1;
      if (!options.tls) return RejectOverCap(std::move(conn));
    }
    if (options.tls) {
      conn->ssl = options.tls->NewConnection(fd);
      if (!conn->ssl) {
        ERR_clear_error();
        return Close(std::move(conn));
      }
      conn->handshaking = true;
    }
    conn->deadline_ms = MonoMs() + options.idle_timeout.count();
    Watch(*conn);
    waiting[fd] = std::move(conn);
  }

  void AcceptAll() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && ShedOne(errno)) continue;
        return;
      }
      Admit(fd, addr, len);
    }
  }

  // No descriptor to accept with: the waiting connection is accepted with the spare one
  // and closed, so the listening socket empties (the loop would otherwise wake for it
  // without end). False when there is no spare, or nothing was waiting.
  bool ShedOne(int error) {
    const int64_t now = MonoMs();
    if (now - shed_logged_ms >= 10'000) {
      LOG_WARN("http: cannot accept: {}; closing new connections until descriptors are free ({} since the last "
               "report)",
               strerror(error), shed_unlogged);
      shed_logged_ms = now;
      shed_unlogged = 0;
    }
    if (spare_fd < 0) return false;
    ::close(spare_fd);
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
      rejected_connections += 1;
      shed_unlogged += 1;
    }
    spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0;
  }

  // The descriptors kept free under a limit of `limit` (header: Limits).
  static int FdReserve(int limit) { return std::max(32, limit / 16); }

  // Takes `conn` out of the loop and gives it to the pool its request belongs to.
  // Answers a whole request that was read (a busy refusal) and keeps the connection for
  // the next one: a refused client need not connect again (under TLS, a handshake each).
  void Refuse(std::unique_ptr<Conn> conn, const RequestHead& head, int status, ErrorCode code,
              std::string_view message) {
    if (head.chunked || head.expect_continue) return Reject(std::move(conn), status, code, message);
    std::string text = ErrorResponse(status, code, message, /*keep_alive=*/true);
    if (!ConnWrite(*conn, text.data(), text.size(), MonoMs() + 100)) return Close(std::move(conn));
    conn->buf.erase(0, std::min<size_t>(conn->buf.size(), head.header_bytes + head.content_length));
    conn->served += 1;
    HandBack(std::move(conn));
  }

  void Dispatch(std::unique_ptr<Conn> conn, const RequestHead& head) {
    size_t index = options.classify ? options.classify(head.method, head.path) : 0;
    PoolState& pool = *pools[std::min(index, pools.size() - 1)];
    if (!BeginInFlight(pool, conn->peer_ip)) {
      pool.rejected += 1;
      const std::string client = conn->peer_ip;
      return Refuse(std::move(conn), head, 429, ErrorCode::kResourceExhausted,
                    fmt::format("too many requests from {} at once (at most {} queued or running)", client,
                                pool.options.max_per_client));
    }
    const std::string client = conn->peer_ip;
    Idle* worker = nullptr;
    {
      MutexLock lock(pool.mu);
      if (pool.queue.size() < pool.options.max_queued) {
        pool.queue.push_back(std::move(conn));
        pool.queued += 1;
        worker = TakeIdle(pool);
      }
    }
    if (!conn) {
      if (worker) worker->cv.NotifyOne();
      return;
    }
    EndInFlight(pool, client);
    pool.rejected += 1;
    Refuse(std::move(conn), head, 503, ErrorCode::kUnavailable,
           fmt::format("server busy: {} requests already queued for the {} threads", pool.options.max_queued,
                       pool.options.name));
  }

  // Dispatches the connection's request if enough of it has arrived, rejects it if it
  // can never be served, or leaves it waiting.
  void TryDispatch(int fd) {
    Conn& conn = *waiting.at(fd);
    auto head = ParseHead(conn.buf);
    if (!head) {
      if (conn.buf.size() <= options.max_header_bytes) return;
      oversized += 1;
      return Reject(Take(fd), 431, ErrorCode::kInvalidArgument,
                    fmt::format("request headers are too large (at most {} KiB)", options.max_header_bytes >> 10));
    }
    if (!*head) return Reject(Take(fd), 400, ErrorCode::kInvalidArgument, (*head).error().message);
    const RequestHead& h = **head;
    if (h.content_length > options.max_body_bytes) {
      oversized += 1;
      return Reject(Take(fd), 413, ErrorCode::kInvalidArgument,
                    fmt::format("request body is too large: {} bytes (at most {} MiB)", h.content_length,
                                options.max_body_bytes >> 20));
    }
    const bool whole = h.chunked || h.expect_continue || conn.buf.size() >= h.header_bytes + h.content_length;
    if (!whole) return;
    Dispatch(Take(fd), h);
  }

  std::unique_ptr<Conn> Take(int fd) {
    auto it = waiting.find(fd);
    auto conn = std::move(it->second);
    waiting.erase(it);
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    return conn;
  }

  void OnReadable(int fd) {
    Conn& conn = *waiting.at(fd);
    if (conn.draining) return Drain(fd);
    if (conn.handshaking) {
      if (!Handshake(fd)) return;
      if (conn.handshaking) return;
      if (conn.refusal) return RejectOverCap(Take(fd));
      conn.reading = false;  // the request's clock starts with its first byte
      conn.deadline_ms = MonoMs() + options.idle_timeout.count();
    }
    const size_t cap = options.max_header_bytes + options.max_body_bytes + (64 << 10);
    char chunk[64 << 10];
    for (;;) {
      ssize_t n = 0;
      bool eof = false;
      if (conn.ssl) {
        short want = POLLIN;
        n = ReadTls(conn.ssl, chunk, sizeof chunk, want, eof);
        if (n == 0) break;  // nothing more now
        if (n < 0 && !eof) return Close(Take(fd));
        if (n < 0) n = 0;
      } else {
        n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
      }
      if (n > 0) {
        conn.buf.append(chunk, static_cast<size_t>(n));
        if (conn.buf.size() >= cap) break;
        // Drained for now (TLS holds nothing decrypted or read ahead; a plain read came
        // back short): epoll is level-triggered and says when more arrives, so a request
        // costs no read that finds nothing (under TLS an SSL_read and a read(2) each).
        if (conn.ssl ? SSL_has_pending(conn.ssl) == 0 : static_cast<size_t>(n) < sizeof chunk) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) return Close(Take(fd));  // the connection broke
      conn.peer_closed = true;             // a request may still be whole in the buffer
      break;
    }
    NoteRequestStart(conn);
    TryDispatch(fd);
    if (waiting.count(fd) && conn.peer_closed) Close(Take(fd));
  }

  // Adopts the connections workers handed back (at every turn of the loop: quiet
  // hand-backs wake no one).
  void TakeHandBacks() {
    std::vector<std::unique_ptr<Conn>> back;
    {
      MutexLock lock(mu);
      if (handed_back.empty()) return;
      back.swap(handed_back);
    }
    for (auto& conn : back) {
      int fd = conn->fd;
      if (conn->watched) {
        conn->watched = false;
        waiting[fd] = std::move(conn);
        continue;
      }
      NoteRequestStart(*conn);
      const bool peer_closed = conn->peer_closed;
      SSL* ssl = conn->ssl;
      Watch(*conn);
      waiting[fd] = std::move(conn);
      // Bytes TLS already decrypted wake no epoll: read them now.
      if (ssl && SSL_has_pending(ssl) == 1) {
        OnReadable(fd);
        continue;
      }
      TryDispatch(fd);
      if (peer_closed && waiting.count(fd)) Close(Take(fd));
    }
  }

  // Closes the connections past their deadline: 408 for a request that did not arrive in
  // time, silently for an idle one.
  void Sweep() {
    const int64_t now = MonoMs();
    std::vector<int> expired;
    for (const auto& [fd, conn] : waiting) {
      if (now >= conn->deadline_ms) expired.push_back(fd);
    }
    for (int fd : expired) {
      auto conn = Take(fd);
      if (!conn->reading || conn->handshaking || conn->draining) {
        Close(std::move(conn));
        continue;
      }
      timed_out += 1;
      Reject(std::move(conn), 408, ErrorCode::kDeadlineExceeded,
             fmt::format("the request did not arrive within {}", FormatDuration(options.request_timeout.count())),
             /*drain=*/false);
    }
  }

  static constexpr int kHandshakesPerTurn = 16;

  void Loop() {
    epoll_event events[256];
    int64_t next_sweep = MonoMs() + 100;
    while (!stopping) {
      int n = epoll_wait(epoll_fd, events, 256, 100);
      TakeHandBacks();
      // TLS handshakes are the loop's costly work (a key exchange and a signature each,
      // ~0.3 ms): requests on connections already open go first, and a turn does at most
      // kHandshakesPerTurn of them, so a flood of new connections (clients refused with
      // "Connection: close" and coming back, or an attack) cannot hold back heartbeats.
      // Epoll is level-triggered: the ones left wait for the next turn.
      int handshakes = 0;
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == listen_fd) {
          AcceptAll();
        } else if (fd == wake_fd) {
          uint64_t count = 0;
          (void)!::read(wake_fd, &count, sizeof count);
          TakeHandBacks();  // one handed back since the turn began, whose signal was just read
        } else if (auto it = waiting.find(fd); it != waiting.end() && !it->second->handshaking) {
          OnReadable(fd);
        }
      }
      for (int i = 0; i < n && handshakes < kHandshakesPerTurn; ++i) {
        int fd = events[i].data.fd;
        if (auto it = waiting.find(fd); it != waiting.end() && it->second->handshaking) {
          ++handshakes;
          OnReadable(fd);
        }
      }
      if (MonoMs() >= next_sweep) {
        Sweep();
        next_sweep = MonoMs() + 100;
      }
    }
  }

  void Shutdown() {
    ::close(listen_fd);
    listen_fd = -1;
    std::vector<int> fds;
    for (const auto& [fd, conn] : waiting) fds.push_back(fd);
    for (int fd : fds) Close(Take(fd));
    StopPools();
    std::vector<std::unique_ptr<Conn>> back;
    {
      MutexLock lock(mu);
      back.swap(handed_back);
    }
    for (auto& conn : back) Close(std::move(conn));
  }

  // Binds the address without listening: connections are refused until Listen.
  Result<int> Reserve() {
    if (listen_fd >= 0) return Errorf(ErrorCode::kFailedPrecondition, "the server is already bound");
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string port = std::to_string(options.port);
    if (int rc = getaddrinfo(options.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
      return Errorf(ErrorCode::kInvalidArgument, "cannot resolve listen address {}: {}", options.host, gai_strerror(rc));
    }
    std::string why = "no address";
    for (addrinfo* ai = res; ai && listen_fd < 0; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      int yes = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        listen_fd = fd;
      } else {
        why = strerror(errno);
        ::close(fd);
      }
    }
    freeaddrinfo(res);
    if (listen_fd < 0) {
      return Errorf(ErrorCode::kUnavailable, "cannot listen on {}:{} ({}: in use, or not an address of this machine)", options.host, options.port, why);
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
    return addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }

  Result<void> Listen() {
    if (listen_fd < 0) return Errorf(ErrorCode::kFailedPrecondition, "Listen before Reserve");
    if (epoll_fd >= 0) return {};  // listening already
    if (::listen(listen_fd, 4096) != 0) {
      return Errorf(ErrorCode::kUnavailable, "cannot listen on {}:{}: {}", options.host, options.port, strerror(errno));
    }
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (rlimit r{}; getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < INT32_MAX) {
      fd_limit = static_cast<int>(r.rlim_cur);
      fd_high_water = fd_limit - FdReserve(fd_limit);
    }
    for (int fd : {listen_fd, wake_fd}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    }
    return {};
  }
};

// ---- HttpServer ---------------------------------------------------------------------

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>(*this, std::move(options))) {
  const auto& o = impl_->options;
  set_payload_max_length(o.max_body_bytes);
  set_keep_alive_max_count(static_cast<size_t>(std::max(1, o.keep_alive_max_count)));
  set_keep_alive_timeout(std::max<int64_t>(1, o.idle_timeout.count() / 1000));
  // A response that closes its connection ("Connection: close", e.g. a 413 that stopped
  // reading the body) must not leave the unread rest to be parsed as the next request.
  set_logger([](const httplib::Request&, const httplib::Response& res) {
    if (current_conn && res.get_header_value("Connection") == "close") current_conn->close_after = true;
  });
}

// The owner joins the thread that runs Serve before destroying the server.
HttpServer::~HttpServer() { Stop(); }

Result<int> HttpServer::Bind() {
  const int port = COHORT_TRY(impl_->Reserve());
  COHORT_TRY_VOID(impl_->Listen());
  return port;
}

Result<int> HttpServer::Reserve() { return impl_->Reserve(); }

Result<void> HttpServer::Listen() { return impl_->Listen(); }

void HttpServer::set_tls(std::shared_ptr<tls::ServerContext> ctx) { impl_->options.tls = std::move(ctx); }

void HttpServer::Serve() {
  if (impl_->listen_fd < 0 || impl_->epoll_fd < 0) return;
  // httplib's content providers (streamed replies) run while its own listening socket is
  // valid and stop once it is not ("shutting down"): ours stands for it until Stop.
  svr_sock_ = impl_->listen_fd;
  impl_->StartPools();
  impl_->Loop();
  impl_->Shutdown();
}

void HttpServer::Stop() {
  svr_sock_ = INVALID_SOCKET;  // streamed replies end (httplib's content providers)
  if (impl_->stopping.exchange(true)) return;
  if (impl_->wake_fd >= 0) impl_->Wake();
}

bool HttpServer::ProcessOne(httplib::Stream& stream, bool close_connection, bool& connection_closed) {
  SSL* ssl = current_conn ? current_conn->ssl : nullptr;
  if (!ssl) return process_request(stream, close_connection, connection_closed, nullptr);
  // Handlers see the connection's TLS (tls::PeerName: who presented which certificate).
  return process_request(stream, close_connection, connection_closed, [ssl](httplib::Request& req) { req.ssl = ssl; });
}

void HttpServer::StreamResponse() {
  if (current_stream) current_stream->WriteThrough();
}

bool HttpServer::ClientGone() {
  if (!current_conn || current_conn->peer_closed) return false;
  pollfd p{current_conn->fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

HttpServerStats HttpServer::Stats() const {
  HttpServerStats s;
  s.connections = impl_->connections;
  s.rejected_connections = impl_->rejected_connections;
  s.timed_out_requests = impl_->timed_out;
  s.oversized_requests = impl_->oversized;
  s.tls_handshake_failures = impl_->tls_failures;
  s.accepted_connections = impl_->accepted;
  s.tls_handshakes = impl_->tls_handshakes;
  for (const auto& p : impl_->pools) {
    s.pools.push_back({p->options.name, p->queued.load(), p->busy.load(), p->handled.load(), p->rejected.load()});
  }
  return s;
}

void WriteHttpServerMetrics(prom::TextWriter& w, const HttpServerStats& s) {
  using prom::MetricType;
  w.Family("cohort_http_connections", MetricType::kGauge, "Client connections open now");
  w.Sample({}, static_cast<double>(s.connections));
  w.Family("cohort_http_accepted_connections_total", MetricType::kCounter,
           "Client connections accepted (including those then turned away over a cap)");
  w.Sample({}, static_cast<double>(s.accepted_connections));
  w.Family("cohort_http_tls_handshakes_total", MetricType::kCounter,
           "TLS handshakes completed: what clients that reconnect cost the server most");
  w.Sample({}, static_cast<double>(s.tls_handshakes));
  w.Family("cohort_http_rejected_connections_total", MetricType::kCounter,
           "Connections turned away: over the total or the per-client connection cap");
  w.Sample({}, static_cast<double>(s.rejected_connections));
  w.Family("cohort_http_timed_out_requests_total", MetricType::kCounter,
           "Requests that did not arrive whole within the request timeout (408)");
  w.Sample({}, static_cast<double>(s.timed_out_requests));
  w.Family("cohort_http_oversized_requests_total", MetricType::kCounter,
           "Requests refused for the size of their headers (431) or body (413)");
  w.Sample({}, static_cast<double>(s.oversized_requests));
  w.Family("cohort_http_tls_handshake_failures_total", MetricType::kCounter,
           "TLS connections that failed their handshake (an untrusted certificate, not TLS at all)");
  w.Sample({}, static_cast<double>(s.tls_handshake_failures));
  w.Family("cohort_http_queued_requests", MetricType::kGauge, "Requests waiting for a thread, by pool");
  for (const auto& p : s.pools) w.Sample({{"pool", p.name}}, static_cast<double>(p.queued));
  w.Family("cohort_http_busy_threads", MetricType::kGauge, "Threads running a request now, by pool");
  for (const auto& p : s.pools) w.Sample({{"pool", p.name}}, static_cast<double>(p.busy));
  w.Family("cohort_http_requests_total", MetricType::kCounter, "Requests started, by pool");
  for (const auto& p : s.pools) w.Sample({{"pool", p.name}}, static_cast<double>(p.handled));
  w.Family("cohort_http_busy_rejections_total", MetricType::kCounter,
           "Requests turned away because their pool's queue was full (503), by pool");
  for (const auto& p : s.pools) w.Sample({{"pool", p.name}}, static_cast<double>(p.rejected));
}

}  // namespace cohort
