// HttpStore: the client of the head's per-job rendezvous store, the one a task finds at
// COHORT_RENDEZVOUS = http://HOST:PORT/v1/rendezvous/TOKEN. The token names the job's
// current attempt, so jobs (and attempts) never see each other's keys.
//
// Protocol (served by src/head/rendezvous_api.cc); {key} is percent-encoded (RFC 3986
// unreserved characters kept):
//   PUT  {base}/keys/{key}            raw body = value                  → any 2xx
//   GET  {base}/keys/{key}?wait_ms=N  → 200 raw value, or after the server's wait (≤ 1 s)
//                                       404 {"error":{"code":"not_found","field":"key",...}};
//                                       the client asks again until its own deadline
//   POST {base}/add/{key}             {"delta": N} → 200 {"value": SUM}
// Any other error body (an unknown token or an ended job: 404 without "field":"key") is
// returned as that Error. Wait(keys) is a Get of each key. Transport failures are retried
// with backoff until the call's deadline (Add only when the connection was refused, so a
// delta is never applied twice); then kUnavailable.
//
// Threads: every method may be called from any thread; each request opens its own
// connection. Error messages never include the token.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/store.h"
#include "common/tls.h"

namespace httplib {
class ClientImpl;
}

namespace cohort::comm {

class HttpStore final : public Store {
 public:
  // `base_url` is http://HOST:PORT/PATH (no query); `timeout` bounds Set and Add.
  // kInvalidArgument for a malformed URL. Does not contact the server.
  static Result<std::unique_ptr<HttpStore>> Open(const std::string& base_url, Millis timeout);

  Result<void> Set(const std::string& key, const std::string& value) override;
  Result<std::string> Get(const std::string& key, Millis timeout) override;
  Result<void> Wait(const std::vector<std::string>& keys, Millis timeout) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;

  // The server-side wait asked for on each GET (the head caps it at 1 s).
  static constexpr Millis kMaxServerWait{1000};

 private:
  HttpStore(std::string host, int port, std::string path, Millis timeout, std::optional<tls::ClientOptions> tls);

  // A client for one request: plain, or (https) trusting tls_'s authority only.
  Result<std::unique_ptr<httplib::ClientImpl>> Connect() const;

  // One GET ?wait_ms: the value; nullopt if still absent; the Error otherwise.
  // `retryable` is set when a transport failure or a 5xx made the request fail.
  Result<std::optional<std::string>> GetOnce(const std::string& key, Millis wait, Millis io_timeout,
                                             bool& retryable) const;
  // Where messages say the store is: "rendezvous store http://host:port" (no token).
  std::string Where() const;

  const std::string host_;
  const int port_;
  const std::string path_;  // "/v1/rendezvous/TOKEN", no trailing '/'
  const Millis timeout_;
  const std::optional<tls::ClientOptions> tls_;  // https: $COHORT_CA from the head
};

}  // namespace cohort::comm
