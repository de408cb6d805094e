#include "common/http.h"

#include <poll.h>
#include <sys/socket.h>

#include <charconv>
#include <mutex>
#include <vector>

#include <httplib.h>

#include "common/http_client_stream.h"
#include "common/httplib_client.h"
#include "common/signals.h"
#include "common/tls.h"

#include <openssl/err.h>

namespace cohort {

namespace {

// httplib's error as a person reads it ("Connection" alone says little).
std::string DescribeTransportError(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "connection refused or host unreachable (nothing listens there?)";
    case httplib::Error::ConnectionTimeout: return "connection timed out (a firewall, or the wrong address?)";
    case httplib::Error::Read: return "the connection broke while reading the reply";
    case httplib::Error::Write: return "the connection broke while sending the request";
    default: return httplib::to_string(e);
  }
}

}  // namespace

Result<UrlParts> ParseHttpUrl(std::string_view url) {
  UrlParts p;
  std::string_view rest;
  if (url.starts_with("http://")) {
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    rest = url.substr(8);
    p.tls = true;
  } else {
    return Errorf(ErrorCode::kInvalidArgument, "URL '{}' must start with http:// or https://", url);
  }
  while (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) {
    return Errorf(ErrorCode::kInvalidArgument, "URL '{}' must be http(s)://host:port with no path", url);
  }
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Errorf(ErrorCode::kInvalidArgument, "URL '{}' must name a host and a port", url);
  }
  p.host = std::string(rest.substr(0, colon));
  // "[::1]:8470": the brackets are the URL's, not the address's.
  if (p.host.size() > 2 && p.host.front() == '[' && p.host.back() == ']') p.host = p.host.substr(1, p.host.size() - 2);
  std::string_view port = rest.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p.port);
  if (ec != std::errc() || ptr != port.data() + port.size() || p.port <= 0 || p.port > 65535) {
    return Errorf(ErrorCode::kInvalidArgument, "URL '{}' has an invalid port", url);
  }
  return p;
}

namespace {

// The connection a client keeps, for a look before it is reused.
struct KeptConnection {
  virtual ~KeptConnection() = default;
  virtual int fd() const = 0;  // -1 when none is open
};

// httplib's clients, plain and TLS, showing their kept connection, and running each
// request over a ClientStream (http_client_stream.h: a request leaves in one send, one
// TLS record; its reply is read through a buffer) instead of httplib's own stream.
template <typename Base>
class KeptClient final : public Base, public KeptConnection {
 public:
  using Base::Base;
  int fd() const override { return this->socket_.is_open() ? static_cast<int>(this->socket_.sock) : -1; }

 private:
  static Millis Timeout(time_t sec, time_t usec) { return Millis(int64_t(sec) * 1000 + int64_t(usec) / 1000); }

  bool process_socket(const typename Base::Socket& socket, std::function<bool(httplib::Stream&)> callback) override {
    ClientStream stream(static_cast<int>(socket.sock), socket.ssl,
                        Timeout(this->read_timeout_sec_, this->read_timeout_usec_),
                        Timeout(this->write_timeout_sec_, this->write_timeout_usec_));
    const bool ok = callback(stream);
    return stream.Flush() && ok;
  }
};

// Whether the server closed `client`'s idle kept connection. An idle HTTP/1.1 connection
// has nothing to read unless the server closed it (a TLS close_notify, a FIN, a reset).
// httplib's own check before reuse peeks for data, takes a close_notify alert for a live
// connection, and sends the request into the closed one: "the connection broke while
// sending the request" (a wake-up the head lost, whenever an agent had closed first).
bool ServerClosed(const httplib::ClientImpl& client) {
  const auto* kept = dynamic_cast<const KeptConnection*>(&client);
  if (kept == nullptr || kept->fd() < 0) return false;
  pollfd p{kept->fd(), POLLIN | POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0;
}

}  // namespace

// Connections a call left open, for the next call. One is reused only while it has been
// idle less than kReuseIdle, well under the idle timeout of our servers (HttpServer and
// httplib's: 5 s), so a request is not sent on a connection the server is closing;
// httplib also checks that the socket is still open before reusing it (a restarted
// server's old connection is replaced, not failed). A client idle longer is closed and
// reconnects, but is kept: under TLS it holds its context (SSL_CTX_new alone takes ~90 us
// in OpenSSL 3 here; bench_head_scale's head made one for most wake-ups of an agent).
struct HttpClient::Pool {
  // Below the idle timeout of Cohort's servers (75 s, HttpServerOptions), so a reused
  // connection is never one the server is closing at that moment (one it closed earlier
  // shows its FIN and is not reused); above the agents' heartbeat interval (1 s, 10 s at
  // 10,000 nodes), so each agent keeps one connection to the head. It was 2 s: every
  // heartbeat past it opened a new connection, under mTLS a full handshake each
  // (bench_head_scale, 1,000 nodes: 4 ms of the head's CPU per heartbeat).
  static constexpr auto kReuseIdle = std::chrono::seconds(60);
  static constexpr size_t kMaxIdle = 8;
  struct Idle {
    std::unique_ptr<httplib::ClientImpl> client;
    SteadyClock::time_point since;
  };
  std::mutex mu;
  std::vector<Idle> idle;  // guarded by mu; newest last

  std::unique_ptr<httplib::ClientImpl> Take() {
    Idle i;
    {
      std::lock_guard lock(mu);
      if (idle.empty()) return nullptr;
      i = std::move(idle.back());
      idle.pop_back();
    }
    if (SteadyClock::now() - i.since >= kReuseIdle || ServerClosed(*i.client)) {
      i.client->stop();  // the next request reconnects
    }
    return std::move(i.client);
  }
  void Give(std::unique_ptr<httplib::ClientImpl> c) {
    std::lock_guard lock(mu);
    if (idle.size() < kMaxIdle) idle.push_back({std::move(c), SteadyClock::now()});
  }
};

HttpClient::HttpClient(std::string base_url, Millis timeout)
    : base_url_(std::move(base_url)), timeout_(timeout), pool_(std::make_shared<Pool>()) {
  while (base_url_.ends_with('/')) base_url_.pop_back();
  auto p = ParseHttpUrl(base_url_);
  if (p) {
    parts_ = *p;
  } else {
    valid_ = std::unexpected(p.error());
  }
  url_valid_ = valid_;
  if (valid_ && parts_.tls) {
    if (auto env = tls::ClientOptionsFromEnv(); !env) {
      valid_ = std::unexpected(env.error());
    } else if (*env) {
      tls_ = std::make_shared<const tls::ClientOptions>(std::move(**env));
    }
  }
}

void HttpClient::set_tls(const tls::ClientOptions& options) {
  tls_ = std::make_shared<const tls::ClientOptions>(options);
  valid_ = url_valid_;  // an unreadable $COHORT_CA_FILE no longer matters
  pool_ = std::make_shared<Pool>();  // connections made before trusted something else
}

Result<std::unique_ptr<httplib::ClientImpl>> NewHttplibClient(const std::string& host, int port, bool https,
                                                              const tls::ClientOptions* trust) {
  if (!https) return std::make_unique<KeptClient<httplib::ClientImpl>>(host, port);
  // OpenSSL writes with write(2), not send(MSG_NOSIGNAL) as httplib does over plain TCP: a
  // server that closed (a head killed or restarting, a 413 that stopped reading) would end
  // a process that runs no server of its own (the CLI, a task's progress reporter) by
  // SIGPIPE instead of failing the request.
  IgnoreSigpipeIfDefault();
  auto cli = std::make_unique<KeptClient<httplib::SSLClient>>(host, port);
  if (trust) {
    cli->enable_server_certificate_verification(false);
    COHORT_TRY_VOID(tls::ConfigureClientContext(cli->ssl_context(), *trust, host));
  }
  return std::unique_ptr<httplib::ClientImpl>(std::move(cli));
}

// A new connection's client: plain, or TLS trusting what tls_ says.
Result<std::unique_ptr<httplib::ClientImpl>> HttpClient::Connect() const {
  return NewHttplibClient(parts_.host, parts_.port, parts_.tls, tls_.get());
}

Result<HttpResponse> HttpClient::Send(const std::string& method, const std::string& path,
                                      const std::string* body) const {
  if (!valid_) return std::unexpected(valid_.error());
  std::unique_ptr<httplib::ClientImpl> cli = pool_->Take();
  if (!cli) {
    cli = COHORT_TRY(Connect());
    cli->set_keep_alive(true);
    // A request larger than ClientStream's buffer still leaves in several writes: with
    // Nagle's algorithm a reused connection would hold the last until the server's delayed
    // ACK (40 ms a request).
    cli->set_tcp_nodelay(true);
  }
  // This copy's timeout: copies share their connections (the pool), not their timeouts.
  const auto secs = timeout_.count() / 1000;
  const auto usecs = (timeout_.count() % 1000) * 1000;
  cli->set_connection_timeout(secs, usecs);
  cli->set_read_timeout(secs, usecs);
  cli->set_write_timeout(secs, usecs);
  httplib::Headers headers;
  if (!bearer_.empty()) headers.emplace("Authorization", "Bearer " + bearer_);
  // A capped GET reads its body through a receiver that stops at the cap.
  std::string capped_body;
  bool over_cap = false;
  const size_t cap = max_response_bytes_;
  httplib::Result r =
      method == "GET" && cap > 0
          ? cli->Get(path, headers,
                     [&](const char* data, size_t n) {
                       if (capped_body.size() + n > cap) {
                         over_cap = true;
                         return false;
                       }
                       capped_body.append(data, n);
                       return true;
                     })
      : method == "GET"  ? cli->Get(path, headers)
      : method == "POST" ? cli->Post(path, headers, body ? *body : std::string(), "application/json")
      : method == "PUT"  ? cli->Put(path, headers, body ? *body : std::string(), "application/json")
                         : cli->Delete(path, headers);
  if (over_cap) {
    return Errorf(ErrorCode::kResourceExhausted, "the reply from {}{} is larger than {} bytes: not read", base_url_,
                  path, cap);
  }
  if (!r) {
    // The connection is dropped with its client: the next call opens a fresh one.
    if (r.error() == httplib::Error::SSLConnection || r.error() == httplib::Error::SSLServerVerification) {
      const char* why = ERR_reason_error_string(ERR_peek_last_error());
      ERR_clear_error();
      return Errorf(ErrorCode::kUnavailable,
                    "cannot reach {}{}: TLS handshake failed ({}): the server's certificate is not from the "
                    "authority this client trusts ($COHORT_CA_FILE, the client config's ca), does not name {}, "
                    "or the server refused this client's certificate",
                    base_url_, path, why ? why : httplib::to_string(r.error()), parts_.host);
    }
    return Errorf(ErrorCode::kUnavailable, "cannot reach {}{}: {}", base_url_, path, DescribeTransportError(r.error()));
  }
  // A reply with "Connection: close" left the client closed; it reconnects if reused.
  pool_->Give(std::move(cli));
  HttpResponse out;
  out.status = r->status;
  out.body = cap > 0 && method == "GET" ? std::move(capped_body) : std::move(r->body);
  for (const auto& [k, v] : r->headers) out.headers[k] = v;
  return out;
}

Result<json> HttpClient::Decode(Result<HttpResponse> r) const {
  if (!r) return std::unexpected(r.error());
  if (r->status < 200 || r->status >= 300) return std::unexpected(ErrorFromResponse(r->status, r->body));
  if (r->body.empty()) return json(nullptr);
  return ParseJson(r->body, "response from " + base_url_);
}

Result<json> HttpClient::Get(const std::string& path) const {
  return Decode(Send("GET", path, nullptr));
}

Result<json> HttpClient::Post(const std::string& path, const json& body) const {
  std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return Decode(Send("POST", path, &text));
}

Result<json> HttpClient::Put(const std::string& path, const json& body) const {
  std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return Decode(Send("PUT", path, &text));
}

Result<json> HttpClient::Delete(const std::string& path) const {
  return Decode(Send("DELETE", path, nullptr));
}

Result<HttpResponse> HttpClient::GetRaw(const std::string& path) const {
  return Send("GET", path, nullptr);
}

json ErrorToJson(const Error& e) {
  json err = {{"code", ErrorCodeName(e.code)}, {"message", e.message}};
  if (!e.field.empty()) err["field"] = e.field;
  return json{{"error", err}};
}

Error ErrorFromResponse(int status, std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const json& e = j["error"];
    Error out;
    out.code = ErrorCodeFromName(e.value("code", std::string("internal")));
    out.message = e.value("message", std::string("(no message)"));
    out.field = e.value("field", std::string());
    return out;
  }
  Error out;
  out.code = status == 404 ? ErrorCode::kNotFound
             : status >= 500 ? ErrorCode::kUnavailable
                             : ErrorCode::kInternal;
  out.message = fmt::format("HTTP {}: {}", status, body.substr(0, 200));
  return out;
}

ListenBacklog::ListenBacklog(httplib::Server& server) : fd_(std::make_shared<int>(-1)) {
  server.set_socket_options([fd = fd_](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    *fd = sock;
  });
}

void ListenBacklog::Raise(int backlog) const {
  if (*fd_ >= 0) ::listen(*fd_, backlog);  // Linux applies a new backlog to a listening socket
}

void SendJson(httplib::Response& res, const json& body, int status) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void SendError(httplib::Response& res, const Error& e) {
  SendJson(res, ErrorToJson(e), HttpStatusFor(e.code));
}

namespace {

std::string ByteSize(size_t bytes) {
  if (bytes % (1 << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes % (1 << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

// Replies with `message` and asks for the connection to close: the rest of the body was
// not read, and would otherwise be parsed as the next request.
void RejectBody(httplib::Response& res, int status, std::string message) {
  SendJson(res, ErrorToJson(Error{ErrorCode::kInvalidArgument, std::move(message)}), status);
  res.set_header("Connection", "close");
}

// The Content-Length a request declares; 0 for none or a chunked body.
size_t DeclaredLength(const httplib::Request& req) {
  if (!req.has_header("Content-Length") || req.get_header_value("Transfer-Encoding") == "chunked") return 0;
  std::string text = req.get_header_value("Content-Length");
  size_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  return ec == std::errc::result_out_of_range ? SIZE_MAX : n;
}

// Reads the body into req.body within the cap; false after replying with the refusal.
bool ReadBodyWithCap(size_t max_bytes, const httplib::Request& req, httplib::Response& res,
                     const httplib::ContentReader& reader) {
  if (req.is_multipart_form_data()) {
    RejectBody(res, 415, "request body must be JSON, not multipart/form-data");
    return false;
  }
  if (DeclaredLength(req) > max_bytes) {
    RejectBody(res, 413, BodyTooLargeMessage(max_bytes));
    return false;
  }
  std::string body;
  bool too_large = false;
  bool ok = reader([&](const char* data, size_t n) {
    too_large = n > max_bytes - body.size();
    if (!too_large) body.append(data, n);
    return !too_large;
  });
  if (too_large || res.status == 413) {
    RejectBody(res, 413, BodyTooLargeMessage(max_bytes));
    return false;
  }
  if (res.status == 415) {
    RejectBody(res, 415, "request body has an unsupported Content-Encoding");
    return false;
  }
  if (!ok) {
    RejectBody(res, 400, fmt::format("request body could not be read whole (a malformed chunk, more than {} "
                                     "on the wire, or the client stopped sending)",
                                     ByteSize(max_bytes)));
    return false;
  }
  // httplib hands content-reader handlers a const Request, but the object is a non-const
  // local of the thread serving the connection (Server::process_request), and body is the
  // field httplib's own reader fills for every other handler.
  const_cast<httplib::Request&>(req).body = std::move(body);
  return true;
}

httplib::Server::HandlerWithContentReader CappedHandler(HttpHandler handler, size_t max_bytes,
                                                        RefusalObserver refused) {
  return [handler = std::move(handler), max_bytes, refused = std::move(refused)](
             const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    if (ReadBodyWithCap(max_bytes, req, res, reader)) {
      handler(req, res);
    } else if (refused) {
      refused(req, res);
    }
  };
}

}  // namespace

std::string BodyTooLargeMessage(size_t max_bytes) {
  return fmt::format("request body is too large (at most {})", ByteSize(max_bytes));
}

void PostWithBodyCap(httplib::Server& server, const std::string& pattern, HttpHandler handler, size_t max_bytes,
                     RefusalObserver refused) {
  server.Post(pattern, CappedHandler(std::move(handler), max_bytes, std::move(refused)));
}

void PutWithBodyCap(httplib::Server& server, const std::string& pattern, HttpHandler handler, size_t max_bytes,
                    RefusalObserver refused) {
  server.Put(pattern, CappedHandler(std::move(handler), max_bytes, std::move(refused)));
}

Result<int64_t> ParseIntParam(std::string_view text, std::string_view field, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v < min || v > max) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: must be an integer from {} to {}, got '{}'", field, min, max, text),
                     std::string(field));
  }
  return v;
}

Result<int64_t> QueryIntParam(const httplib::Request& req, const char* name, std::optional<int64_t> def,
                              int64_t min, int64_t max) {
  if (!req.has_param(name)) {
    if (def) return *def;
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("{}: is required", name), name);
  }
  return ParseIntParam(req.get_param_value(name), name, min, max);
}

Result<int64_t> ParseIdParam(std::string_view text, std::string_view field) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v <= 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: '{}' is not a valid id (a positive integer)", field, text),
                     std::string(field));
  }
  return v;
}

}  // namespace cohort
