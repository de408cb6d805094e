#include "comm/http_store.h"

#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "comm/store_util.h"
#include "common/http.h"
#include "common/httplib_client.h"
#include "common/json.h"
#include "common/tls.h"

namespace cohort::comm {
namespace {

void SetTimeouts(httplib::ClientImpl& cli, Millis connect, Millis io) {
  auto secs = [](Millis d) { return static_cast<time_t>(std::max<int64_t>(d.count(), 1) / 1000); };
  auto usecs = [](Millis d) { return static_cast<time_t>((std::max<int64_t>(d.count(), 1) % 1000) * 1000); };
  cli.set_connection_timeout(secs(connect), usecs(connect));
  cli.set_read_timeout(secs(io), usecs(io));
  cli.set_write_timeout(secs(io), usecs(io));
  cli.set_url_encode(false);  // paths are percent-encoded here
  cli.set_keep_alive(false);  // one request per connection: no head worker thread is held idle
}

std::string TransportCause(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "cannot connect (refused or unreachable)";
    case httplib::Error::ConnectionTimeout: return "connection timed out";
    case httplib::Error::Read: return "no complete reply (read failed or timed out)";
    case httplib::Error::Write: return "could not send the request";
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLServerVerification:
      return "TLS handshake failed (is $COHORT_CA the head's authority?)";
    default: return httplib::to_string(e);
  }
}

// A refused or timed-out connection never carried the request.
bool NeverSent(httplib::Error e) {
  return e == httplib::Error::Connection || e == httplib::Error::ConnectionTimeout ||
         e == httplib::Error::SSLConnection || e == httplib::Error::SSLServerVerification;
}

bool RetryableStatus(int status) { return status == 502 || status == 503 || status == 504; }

Millis LeftUntil(SteadyTime deadline) {
  return std::max(std::chrono::ceil<Millis>(deadline - SteadyClock::now()), Millis(0));
}

}  // namespace

HttpStore::HttpStore(std::string host, int port, std::string path, Millis timeout,
                     std::optional<tls::ClientOptions> tls)
    : host_(std::move(host)), port_(port), path_(std::move(path)), timeout_(timeout), tls_(std::move(tls)) {}

Result<std::unique_ptr<httplib::ClientImpl>> HttpStore::Connect() const {
  return NewHttplibClient(host_, port_, tls_.has_value(), tls_ ? &*tls_ : nullptr);
}

Result<std::unique_ptr<HttpStore>> HttpStore::Open(const std::string& base_url, Millis timeout) {
  std::string_view url = base_url;
  const bool https = url.starts_with("https://");
  if (!https && !url.starts_with("http://")) {
    return Errorf(ErrorCode::kInvalidArgument, "store URL '{}' must start with http:// or https://", base_url);
  }
  std::string_view rest = url.substr(https ? 8 : 7);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string path = slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash));
  while (path.ends_with('/')) path.pop_back();
  if (path.find_first_of("?#") != std::string::npos) {
    return Errorf(ErrorCode::kInvalidArgument, "store URL '{}' must not have a query or fragment", base_url);
  }
  HostPort hp;
  if (!authority.empty() && authority.find(':') == std::string_view::npos) {
    hp.host = std::string(authority);
    hp.port = https ? 443 : 80;
  } else {
    hp = COHORT_TRY(ParseHostPort(authority, base_url, /*allow_zero_port=*/false));
  }
  std::optional<tls::ClientOptions> tls;
  if (https) {
    // The head gives its tasks its authority as $COHORT_CA.
    tls = COHORT_TRY(tls::ClientOptionsFromEnv());
    if (!tls) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "store URL '{}' is https: set $COHORT_CA or $COHORT_CA_FILE to the head's certificate authority",
                    base_url);
    }
  }
  return std::unique_ptr<HttpStore>(new HttpStore(std::move(hp.host), hp.port, std::move(path), timeout, std::move(tls)));
}

std::string HttpStore::Where() const {
  std::string host = host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_;
  return fmt::format("rendezvous store {}://{}:{}", tls_ ? "https" : "http", host, port_);
}

Result<void> HttpStore::Set(const std::string& key, const std::string& value) {
  COHORT_TRY_VOID(CheckKey(key));
  std::string path = path_ + "/keys/" + PercentEncode(key);
  SteadyTime deadline = SteadyClock::now() + timeout_;
  Backoff backoff(Millis(50), Millis(1000));
  for (;;) {
    auto cli = COHORT_TRY(Connect());
    SetTimeouts(*cli, LeftUntil(deadline), LeftUntil(deadline));
    httplib::Result r = cli->Put(path, value, "application/octet-stream");
    std::string cause;
    if (!r) {
      cause = TransportCause(r.error());
    } else if (r->status >= 200 && r->status < 300) {
      return {};
    } else if (RetryableStatus(r->status)) {
      cause = ErrorFromResponse(r->status, r->body).message;
    } else {
      return std::unexpected(WithContext(ErrorFromResponse(r->status, r->body), Where()));
    }
    if (SteadyClock::now() >= deadline) {
      return Errorf(ErrorCode::kUnavailable, "cannot reach {}: {} (after {})", Where(), cause,
                    FormatSeconds(timeout_));
    }
    std::this_thread::sleep_for(backoff.Next(deadline));
  }
}

Result<std::optional<std::string>> HttpStore::GetOnce(const std::string& key, Millis wait, Millis io_timeout,
                                                      bool& retryable) const {
  retryable = false;
  std::string path = fmt::format("{}/keys/{}?wait_ms={}", path_, PercentEncode(key), wait.count());
  auto cli = COHORT_TRY(Connect());
  SetTimeouts(*cli, timeout_, io_timeout);
  httplib::Result r = cli->Get(path);
  if (!r) {
    retryable = true;
    return Errorf(ErrorCode::kUnavailable, "{}", TransportCause(r.error()));
  }
  if (r->status >= 200 && r->status < 300) return std::optional<std::string>(std::move(r->body));
  Error e = ErrorFromResponse(r->status, r->body);
  if (r->status == 404 && e.field == "key") return std::optional<std::string>();  // not set yet
  if (RetryableStatus(r->status)) {
    retryable = true;
    return std::unexpected(e);
  }
  return std::unexpected(WithContext(std::move(e), Where()));
}

Result<std::string> HttpStore::Get(const std::string& key, Millis timeout) {
  COHORT_TRY_VOID(CheckKey(key));
  timeout = std::max(timeout, Millis(0));
  SteadyTime deadline = SteadyClock::now() + timeout;
  Backoff backoff(Millis(50), Millis(1000));
  for (;;) {
    Millis wait = std::min(LeftUntil(deadline), kMaxServerWait);
    bool retryable = false;
    auto r = GetOnce(key, wait, wait + timeout_, retryable);
    if (r && *r) return std::move(**r);
    if (!r && !retryable) return std::unexpected(r.error());
    if (SteadyClock::now() >= deadline) {
      if (!r) {
        return Errorf(ErrorCode::kUnavailable, "cannot reach {}: {} (after {})", Where(), r.error().message,
                      FormatSeconds(timeout));
      }
      return std::unexpected(TimeoutError(timeout, {key}));
    }
    if (!r) std::this_thread::sleep_for(backoff.Next(deadline));
  }
}

Result<void> HttpStore::Wait(const std::vector<std::string>& keys, Millis timeout) {
  for (const auto& key : keys) COHORT_TRY_VOID(CheckKey(key));
  SteadyTime deadline = SteadyClock::now() + std::max(timeout, Millis(0));
  for (size_t i = 0; i < keys.size(); ++i) {
    auto r = Get(keys[i], LeftUntil(deadline));
    if (!r) {
      if (r.error().code != ErrorCode::kDeadlineExceeded) return std::unexpected(r.error());
      // Name every key not yet seen: this one and those not checked.
      return std::unexpected(TimeoutError(timeout, std::vector<std::string>(keys.begin() + i, keys.end())));
    }
  }
  return {};
}

Result<int64_t> HttpStore::Add(const std::string& key, int64_t delta) {
  COHORT_TRY_VOID(CheckKey(key));
  std::string path = path_ + "/add/" + PercentEncode(key);
  std::string body = json{{"delta", delta}}.dump();
  SteadyTime deadline = SteadyClock::now() + timeout_;
  Backoff backoff(Millis(50), Millis(1000));
  for (;;) {
    auto cli = COHORT_TRY(Connect());
    SetTimeouts(*cli, LeftUntil(deadline), LeftUntil(deadline));
    httplib::Result r = cli->Post(path, body, "application/json");
    std::string cause;
    if (!r) {
      cause = TransportCause(r.error());
      // Past a refused connection the delta may have been applied: never send it twice.
      if (!NeverSent(r.error())) return Errorf(ErrorCode::kUnavailable, "{}: add to key '{}': {}", Where(),
                                               PrintableKey(key), cause);
    } else if (r->status >= 200 && r->status < 300) {
      json reply = json::parse(r->body, nullptr, false);
      if (!reply.is_object() || !reply.contains("value") || !reply["value"].is_number_integer()) {
        return Errorf(ErrorCode::kInternal, "{}: add reply is not {{\"value\": N}}: {}", Where(),
                      r->body.substr(0, 200));
      }
      return reply["value"].get<int64_t>();
    } else {
      return std::unexpected(WithContext(ErrorFromResponse(r->status, r->body), Where()));
    }
    if (SteadyClock::now() >= deadline) {
      return Errorf(ErrorCode::kUnavailable, "cannot reach {}: {} (after {})", Where(), cause,
                    FormatSeconds(timeout_));
    }
    std::this_thread::sleep_for(backoff.Next(deadline));
  }
}

}  // namespace cohort::comm
