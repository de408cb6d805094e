#include "comm/tcp_store.h"

#include <thread>

#include <fmt/format.h>

#include "comm/store_util.h"
#include "comm/tcp_store_server.h"
#include "comm/tcp_store_wire.h"
#include "common/log.h"

namespace cohort::comm {
namespace {

constexpr size_t kMaxIdleConnections = 8;

// The error a non-OK reply carries; `timeout`/`keys` name what a TIMEOUT waited for.
Error ReplyError(wire::Reader& r, wire::Status status, Millis timeout) {
  if (status == wire::Status::kTimeout) {
    uint32_t n = r.U32();
    std::vector<std::string> missing;
    for (uint32_t i = 0; i < n && r.ok(); ++i) missing.push_back(r.Str());
    return TimeoutError(timeout, missing);
  }
  if (status == wire::Status::kError) {
    std::string code = r.Str();
    std::string message = r.Str();
    return Error{ErrorCodeFromName(code), message};
  }
  return Error{ErrorCode::kInternal, fmt::format("tcp store: unknown reply status {}", static_cast<int>(status))};
}

}  // namespace

TcpStore::TcpStore(std::string host, int port, TcpStoreOptions options)
    : host_(std::move(host)),
      port_(port),
      options_(std::move(options)),
      url_(fmt::format("tcp://{}:{}", host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_, port_)) {}

TcpStore::~TcpStore() {
  {
    std::lock_guard lock(mu_);
    idle_.clear();
  }
  server_.reset();
}

Result<std::unique_ptr<TcpStore>> TcpStore::Listen(int port, TcpStoreOptions options) {
  auto server = COHORT_TRY(TcpStoreServer::Start(port));
  std::unique_ptr<TcpStore> s(new TcpStore("127.0.0.1", server->port(), std::move(options)));
  s->server_ = std::move(server);
  UniqueFd fd = COHORT_TRY(s->Dial());
  s->idle_.push_back(std::move(fd));
  return s;
}

Result<std::unique_ptr<TcpStore>> TcpStore::Connect(const std::string& host, int port, TcpStoreOptions options) {
  std::unique_ptr<TcpStore> s(new TcpStore(host, port, std::move(options)));
  UniqueFd fd = COHORT_TRY(s->Dial());
  s->idle_.push_back(std::move(fd));
  return s;
}

Result<UniqueFd> TcpStore::Dial() {
  SteadyTime start = SteadyClock::now();
  SteadyTime deadline = start + options_.timeout;
  Backoff backoff(Millis(10), Millis(500));
  std::string ping = wire::Writer().U8(static_cast<uint8_t>(wire::Op::kPing)).Finish();
  for (;;) {
    Error failure;
    auto fd = ConnectOnce(host_, port_, deadline);
    if (fd) {
      // Handshake: a cohort store answers PING with its banner.
      std::string reply;
      auto sent = SendAll(fd->get(), ping, deadline);
      auto got = sent ? RecvExact(fd->get(), 4, reply, deadline) : sent;
      if (got) {
        uint32_t len = *wire::PeekLength(reply);
        got = len <= 1024 ? RecvExact(fd->get(), len, reply, deadline)
                          : Result<void>(MakeError(ErrorCode::kUnavailable, "bad handshake"));
      }
      if (got) {
        wire::Reader r(std::string_view(reply).substr(4));
        auto status = static_cast<wire::Status>(r.U8());
        if (status == wire::Status::kOk && r.Str() == wire::kBanner && r.done()) return std::move(*fd);
        return Errorf(ErrorCode::kUnavailable, "{} is not a cohort store (bad handshake reply)", url_);
      }
      failure = got.error();
    } else {
      failure = fd.error();
    }
    if (SteadyClock::now() >= deadline) {
      return Errorf(ErrorCode::kUnavailable, "cannot reach store {}: {} (after {})", url_, failure.message,
                    FormatSeconds(options_.timeout));
    }
    LOG_DEBUG("store {}: {}; retrying", url_, failure.message);
    if (options_.on_connect_retry) options_.on_connect_retry(failure);
    std::this_thread::sleep_for(backoff.Next(deadline));
  }
}

Result<std::string> TcpStore::Call(const std::string& frame, SteadyTime reply_deadline) {
  UniqueFd fd;
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      fd = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!fd.valid()) fd = COHORT_TRY(Dial());
  std::string reply;
  auto io = SendAll(fd.get(), frame, reply_deadline);
  if (io) io = RecvExact(fd.get(), 4, reply, reply_deadline);
  if (io) {
    uint32_t len = *wire::PeekLength(reply);
    io = len <= wire::kMaxFrameBytes ? RecvExact(fd.get(), len, reply, reply_deadline)
                                     : Result<void>(MakeError(ErrorCode::kUnavailable, "oversized reply"));
  }
  if (!io) return Errorf(ErrorCode::kUnavailable, "store {}: {}", url_, io.error().message);
  {
    std::lock_guard lock(mu_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(fd));
  }
  return reply.substr(4);
}

Result<void> TcpStore::Set(const std::string& key, const std::string& value) {
  COHORT_TRY_VOID(CheckKey(key));
  std::string frame = wire::Writer().U8(static_cast<uint8_t>(wire::Op::kSet)).Str(key).Str(value).Finish();
  std::string reply = COHORT_TRY(Call(frame, SteadyClock::now() + options_.timeout));
  wire::Reader r(reply);
  auto status = static_cast<wire::Status>(r.U8());
  if (status != wire::Status::kOk) return std::unexpected(ReplyError(r, status, options_.timeout));
  return {};
}

Result<std::string> TcpStore::Get(const std::string& key, Millis timeout) {
  COHORT_TRY_VOID(CheckKey(key));
  timeout = std::clamp(timeout, Millis(0), Millis(wire::kMaxTimeoutMs));
  std::string frame =
      wire::Writer().U8(static_cast<uint8_t>(wire::Op::kGet)).Str(key).I64(timeout.count()).Finish();
  // The server answers by the deadline; the extra options_.timeout covers the network.
  std::string reply = COHORT_TRY(Call(frame, SteadyClock::now() + timeout + options_.timeout));
  wire::Reader r(reply);
  auto status = static_cast<wire::Status>(r.U8());
  if (status != wire::Status::kOk) return std::unexpected(ReplyError(r, status, timeout));
  std::string value = r.Str();
  if (!r.done()) return Errorf(ErrorCode::kInternal, "store {}: malformed GET reply", url_);
  return value;
}

Result<void> TcpStore::Wait(const std::vector<std::string>& keys, Millis timeout) {
  for (const auto& key : keys) COHORT_TRY_VOID(CheckKey(key));
  timeout = std::clamp(timeout, Millis(0), Millis(wire::kMaxTimeoutMs));
  wire::Writer w;
  w.U8(static_cast<uint8_t>(wire::Op::kWait)).U32(static_cast<uint32_t>(keys.size()));
  for (const auto& key : keys) w.Str(key);
  w.I64(timeout.count());
  std::string frame = w.Finish();
  std::string reply = COHORT_TRY(Call(frame, SteadyClock::now() + timeout + options_.timeout));
  wire::Reader r(reply);
  auto status = static_cast<wire::Status>(r.U8());
  if (status != wire::Status::kOk) return std::unexpected(ReplyError(r, status, timeout));
  return {};
}

Result<int64_t> TcpStore::Add(const std::string& key, int64_t delta) {
  COHORT_TRY_VOID(CheckKey(key));
  std::string frame = wire::Writer().U8(static_cast<uint8_t>(wire::Op::kAdd)).Str(key).I64(delta).Finish();
  std::string reply = COHORT_TRY(Call(frame, SteadyClock::now() + options_.timeout));
  wire::Reader r(reply);
  auto status = static_cast<wire::Status>(r.U8());
  if (status != wire::Status::kOk) return std::unexpected(ReplyError(r, status, options_.timeout));
  int64_t sum = r.I64();
  if (!r.done()) return Errorf(ErrorCode::kInternal, "store {}: malformed ADD reply", url_);
  return sum;
}

}  // namespace cohort::comm
