// HTTP helpers over cpp-httplib: a JSON client that turns transport failures and error
// bodies into Errors, and the server-side conversions from Result to response.
//
// Wire format of an error body, produced by SendError and read by the client:
//   {"error": {"code": "invalid_argument", "message": "spec.nodes: ...", "field": "spec.nodes"}}
// HttpClient keeps the connections its calls opened alive for the next calls (a small pool
// shared by its copies), so a heartbeat, a wake-up or a submission does not pay for a TCP
// connection each; one client may be used from several threads at once (each call takes
// its own connection from the pool, or opens one).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/error.h"
#include "common/json.h"

namespace httplib {
class ClientImpl;
struct Response;
struct Request;
class Server;
}

namespace cohort {

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
};

struct UrlParts {
  std::string host;
  int port = 0;
  bool tls = false;  // https
};

// Accepts "http://host:port" or "https://host:port" (an optional trailing '/'); anything
// else is kInvalidArgument.
Result<UrlParts> ParseHttpUrl(std::string_view url);

namespace tls {
struct ClientOptions;
}

class HttpClient {
 public:
  explicit HttpClient(std::string base_url, Millis timeout = Millis(10'000));

  const std::string& base_url() const { return base_url_; }
  // The connect, read and write timeout of each later request (copies keep their own).
  void set_timeout(Millis timeout) { timeout_ = timeout; }
  // Sends "Authorization: Bearer <token>" with every request (empty: none).
  void set_bearer_token(std::string token) { bearer_ = std::move(token); }
  // For an https URL: the authority to trust (only it) and the certificate to present.
  // Without it, an https client trusts $COHORT_CA or $COHORT_CA_FILE (tls.h), and
  // without those the system's authorities; with it, the environment is not consulted (a
  // head or agent started where a user's $COHORT_CA_FILE names a file that is gone still
  // reaches its peers). Set before the first call; connections
  // opened later present the identity's certificate of the moment (renewals).
  void set_tls(const tls::ClientOptions& options);
  const std::string& bearer_token() const { return bearer_; }
  // Refuses a GET reply whose body exceeds `bytes` (0: no cap, the default) without
  // reading the rest: kResourceExhausted naming the URL and the cap. For a peer trusted
  // less than the caller (the head reading an agent's log).
  void set_max_response_bytes(size_t bytes) { max_response_bytes_ = bytes; }

  // JSON calls: 2xx → the parsed body (null for an empty one); an error body → its Error;
  // no connection → kUnavailable naming the URL.
  Result<json> Get(const std::string& path) const;
  Result<json> Post(const std::string& path, const json& body) const;
  Result<json> Put(const std::string& path, const json& body) const;
  Result<json> Delete(const std::string& path) const;

  // Raw GET: any status is returned; only transport failures are errors.
  Result<HttpResponse> GetRaw(const std::string& path) const;

 private:
  Result<json> Decode(Result<HttpResponse> r) const;
  Result<std::unique_ptr<httplib::ClientImpl>> Connect() const;
  Result<HttpResponse> Send(const std::string& method, const std::string& path,
                            const std::string* body) const;

  struct Pool;  // idle keep-alive connections; thread-safe, shared by copies

  std::string base_url_;
  UrlParts parts_;
  Result<void> valid_;      // the URL, then the environment's trust; set_tls replaces the latter
  Result<void> url_valid_;  // the URL alone
  Millis timeout_;
  std::string bearer_;
  std::shared_ptr<const tls::ClientOptions> tls_;  // https only; null: the system's authorities
  std::shared_ptr<Pool> pool_;
  size_t max_response_bytes_ = 0;
};

json ErrorToJson(const Error& e);
// Decodes an error body; a body that is not one becomes kInternal/kUnavailable with the status.
Error ErrorFromResponse(int status, std::string_view body);

// Raises a cpp-httplib server's listen backlog. Debian's build listens with a backlog of
// 5, so a burst of connections (every rank of a 64-rank job reaching the rendezvous store
// at once) overflows it: the kernel drops SYNs and clients stall for a 1 s retransmit.
// Construct before binding (it installs the socket-options hook that records the
// listening socket, and sets SO_REUSEADDR as httplib's default hook does), call Raise()
// after binding.
class ListenBacklog {
 public:
  explicit ListenBacklog(httplib::Server& server);
  void Raise(int backlog = 4096) const;

 private:
  std::shared_ptr<int> fd_;
};

// Server side.
void SendJson(httplib::Response& res, const json& body, int status = 200);
void SendError(httplib::Response& res, const Error& e);

// The most a request body may hold, once decoded, on the head's and the agents' APIs.
inline constexpr size_t kMaxRequestBodyBytes = 4 << 20;

using HttpHandler = std::function<void(const httplib::Request&, httplib::Response&)>;

// Registers `handler` for POST (PUT) requests matching `pattern`, with the body read into
// req.body before it runs, chunked or not, up to `max_bytes` once decoded: httplib checks
// only a Content-Length against its payload limit and reads a chunked body whole. A body
// past the cap is answered 413 "request body is too large (at most 4 MiB)" as soon as it
// passes it (a declared Content-Length past it, before any is read), a multipart one 415,
// an unreadable one 400; each of those replies says "Connection: close", since the rest of
// the body was not read (HttpServer then closes the connection). `refused`, when set, is
// called with the request and such a reply, on the same thread (the head's audit log).
using RefusalObserver = std::function<void(const httplib::Request&, const httplib::Response&)>;
void PostWithBodyCap(httplib::Server& server, const std::string& pattern, HttpHandler handler,
                     size_t max_bytes = kMaxRequestBodyBytes, RefusalObserver refused = nullptr);
void PutWithBodyCap(httplib::Server& server, const std::string& pattern, HttpHandler handler,
                    size_t max_bytes = kMaxRequestBodyBytes, RefusalObserver refused = nullptr);

// "request body is too large (at most 4 MiB)".
std::string BodyTooLargeMessage(size_t max_bytes);

// Parses a decimal integer in [min, max] from a path or query parameter; the error names
// `field` ("limit: must be an integer from 1 to 1000000, got 'x'").
Result<int64_t> ParseIntParam(std::string_view text, std::string_view field, int64_t min, int64_t max);
// A query parameter as ParseIntParam reads it, or `def` when the request lacks it.
Result<int64_t> QueryIntParam(const httplib::Request& req, const char* name, std::optional<int64_t> def,
                              int64_t min, int64_t max);
// Parses a job id (a positive integer), naming `field` in the error.
Result<int64_t> ParseIdParam(std::string_view text, std::string_view field);

}  // namespace cohort
