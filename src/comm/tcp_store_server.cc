#include "comm/tcp_store_server.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "comm/store_util.h"
#include "comm/tcp_store_wire.h"
#include "common/log.h"

namespace cohort::comm {
namespace {

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;

// A listening socket on every interface: IPv6 dual-stack, or IPv4 where IPv6 is absent.
Result<UniqueFd> BindAny(int port) {
  int one = 1, zero = 0;
  UniqueFd fd(socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.valid()) {
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    if (errno == EADDRINUSE || errno == EACCES) {
      return Errorf(ErrorCode::kUnavailable, "cannot host store on port {}: {}", port, std::strerror(errno));
    }
  }
  fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Errorf(ErrorCode::kUnavailable, "cannot create a socket: {}", std::strerror(errno));
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return Errorf(ErrorCode::kUnavailable, "cannot host store on port {}: {}", port, std::strerror(errno));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

std::string OkFrame() { return wire::Writer().U8(static_cast<uint8_t>(wire::Status::kOk)).Finish(); }

std::string ErrorFrame(ErrorCode code, std::string_view message) {
  return wire::Writer()
      .U8(static_cast<uint8_t>(wire::Status::kError))
      .Str(ErrorCodeName(code))
      .Str(message)
      .Finish();
}

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(int port) {
  std::unique_ptr<TcpStoreServer> s(new TcpStoreServer());
  s->listen_fd_ = COHORT_TRY(BindAny(port));
  if (listen(s->listen_fd_.get(), SOMAXCONN) != 0) {
    return Errorf(ErrorCode::kUnavailable, "cannot listen on port {}: {}", port, std::strerror(errno));
  }
  s->port_ = BoundPort(s->listen_fd_.get());
  s->epoll_fd_.reset(epoll_create1(EPOLL_CLOEXEC));
  s->wake_fd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!s->epoll_fd_.valid() || !s->wake_fd_.valid()) {
    return Errorf(ErrorCode::kInternal, "tcp store: epoll/eventfd: {}", std::strerror(errno));
  }
  for (int fd : {s->listen_fd_.get(), s->wake_fd_.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(s->epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return Errorf(ErrorCode::kInternal, "tcp store: epoll_ctl: {}", std::strerror(errno));
    }
  }
  s->thread_ = std::thread([p = s.get()] { p->Run(); });
  return s;
}

TcpStoreServer::~TcpStoreServer() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(wake_fd_.get(), &one, sizeof one);
    thread_.join();
  }
  conns_.clear();  // closes every client socket
}

int TcpStoreServer::EpollTimeoutMs() const {
  if (deadlines_.empty()) return -1;
  auto left = std::chrono::ceil<Millis>(deadlines_.begin()->first - SteadyClock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

void TcpStoreServer::Run() {
  epoll_event events[128];
  for (;;) {
    int n = epoll_wait(epoll_fd_.get(), events, 128, EpollTimeoutMs());
    if (n < 0 && errno != EINTR) {
      LOG_ERROR("tcp store: epoll_wait: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd_.get()) return;
      if (fd == listen_fd_.get()) {
        Accept();
        continue;
      }
      auto it = conns_.find(fd);
      if (it == conns_.end()) continue;
      Conn& c = *it->second;
      uint32_t ev = events[i].events;
      if (ev & EPOLLERR) c.dead = true;
      if (!c.dead && (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP))) ReadFrom(c);
      if (!c.dead && (ev & EPOLLOUT)) Flush(c);
      if (!c.dead) ProcessInput(c);
      if (c.dead) Close(fd);
    }
    ExpireParked();
    // Requests queued behind a parked one, now answered; handling them may unpark more.
    while (!resume_.empty()) {
      int fd = resume_.back();
      resume_.pop_back();
      auto it = conns_.find(fd);
      if (it == conns_.end()) continue;
      ProcessInput(*it->second);
      if (it->second->dead) Close(fd);
    }
  }
}

void TcpStoreServer::Accept() {
  for (;;) {
    int fd = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) LOG_WARN("tcp store: accept: {}", std::strerror(errno));
      return;
    }
    MakeNonBlockingNoDelay(fd);
    auto c = std::make_unique<Conn>();
    c->fd.reset(fd);
    epoll_event ev{};
    ev.events = kReadEvents;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      LOG_WARN("tcp store: epoll_ctl: {}", std::strerror(errno));
      continue;  // c closes fd
    }
    conns_[fd] = std::move(c);
  }
}

void TcpStoreServer::ReadFrom(Conn& c) {
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = recv(c.fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EOF or error: the client is gone; nothing it sent still needs an answer.
    c.dead = true;
    return;
  }
}

void TcpStoreServer::Flush(Conn& c) {
  while (c.out_pos < c.out.size()) {
    ssize_t n = send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c.dead = true;
    return;
  }
  bool pending = c.out_pos < c.out.size();
  if (!pending) {
    c.out.clear();
    c.out_pos = 0;
  }
  if (pending != c.watching_out) {
    epoll_event ev{};
    ev.events = kReadEvents | (pending ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    ev.data.fd = c.fd.get();
    epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
    c.watching_out = pending;
  }
}

void TcpStoreServer::Reply(Conn& c, std::string frame) {
  if (c.out.empty()) {
    c.out = std::move(frame);
    c.out_pos = 0;
  } else {
    c.out += frame;
  }
  Flush(c);
}

void TcpStoreServer::ProcessInput(Conn& c) {
  while (!c.dead && !c.parked) {
    std::string_view rest = std::string_view(c.in).substr(c.in_pos);
    auto len = wire::PeekLength(rest);
    if (!len) break;
    if (*len > wire::kMaxFrameBytes) {
      LOG_WARN("tcp store: dropping a client that sent a {}-byte frame", *len);
      c.dead = true;
      return;
    }
    if (rest.size() < 4 + static_cast<size_t>(*len)) break;
    c.in_pos += 4 + *len;
    Handle(c, rest.substr(4, *len));
  }
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
  } else if (c.in_pos > (1u << 20)) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
}

void TcpStoreServer::Handle(Conn& c, std::string_view payload) {
  wire::Reader r(payload);
  auto op = static_cast<wire::Op>(r.U8());
  auto malformed = [&] { Reply(c, ErrorFrame(ErrorCode::kInvalidArgument, "tcp store: malformed request")); };
  switch (op) {
    case wire::Op::kPing: {
      if (!r.done()) return malformed();
      Reply(c, wire::Writer().U8(static_cast<uint8_t>(wire::Status::kOk)).Str(wire::kBanner).Finish());
      return;
    }
    case wire::Op::kSet: {
      std::string key = r.Str();
      std::string value = r.Str();
      if (!r.done()) return malformed();
      data_[key] = std::move(value);
      Reply(c, OkFrame());
      KeySet(key);
      return;
    }
    case wire::Op::kAdd: {
      std::string key = r.Str();
      int64_t delta = r.I64();
      if (!r.done()) return malformed();
      auto it = data_.find(key);
      int64_t current = 0;
      if (it != data_.end()) {
        auto parsed = ParseInt64(it->second);
        if (!parsed) {
          return Reply(c, ErrorFrame(ErrorCode::kFailedPrecondition,
                                     fmt::format("store: key '{}' holds a value that is not an integer",
                                                 PrintableKey(key))));
        }
        current = *parsed;
      }
      auto sum = CheckedAdd(key, current, delta);
      if (!sum) return Reply(c, ErrorFrame(sum.error().code, sum.error().message));
      data_[key] = std::to_string(*sum);
      Reply(c, wire::Writer().U8(static_cast<uint8_t>(wire::Status::kOk)).I64(*sum).Finish());
      KeySet(key);
      return;
    }
    case wire::Op::kGet: {
      std::string key = r.Str();
      int64_t timeout_ms = r.I64();
      if (!r.done()) return malformed();
      auto it = data_.find(key);
      if (it != data_.end()) {
        Reply(c, wire::Writer().U8(static_cast<uint8_t>(wire::Status::kOk)).Str(it->second).Finish());
        return;
      }
      Park(c, /*is_get=*/true, {std::move(key)}, timeout_ms);
      return;
    }
    case wire::Op::kWait: {
      uint32_t n = r.U32();
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < n && r.ok(); ++i) keys.push_back(r.Str());
      int64_t timeout_ms = r.I64();
      if (!r.done()) return malformed();
      Park(c, /*is_get=*/false, std::move(keys), timeout_ms);
      return;
    }
  }
  malformed();
}

void TcpStoreServer::Park(Conn& c, bool is_get, std::vector<std::string> keys, int64_t timeout_ms) {
  auto p = std::make_unique<Parked>();
  p->is_get = is_get;
  for (const auto& k : keys) {
    if (!data_.contains(k)) p->missing.insert(k);
  }
  if (p->missing.empty()) {  // a WAIT whose keys are all set
    Reply(c, OkFrame());
    return;
  }
  p->keys = std::move(keys);
  p->deadline = SteadyClock::now() + Millis(std::clamp<int64_t>(timeout_ms, 0, wire::kMaxTimeoutMs));
  int fd = c.fd.get();
  for (const auto& k : p->missing) waiters_[k].insert(fd);
  deadlines_.emplace(p->deadline, fd);
  c.parked = std::move(p);
}

void TcpStoreServer::Unpark(Conn& c) {
  int fd = c.fd.get();
  for (const auto& k : c.parked->missing) {
    auto w = waiters_.find(k);
    if (w == waiters_.end()) continue;
    w->second.erase(fd);
    if (w->second.empty()) waiters_.erase(w);
  }
  deadlines_.erase({c.parked->deadline, fd});
  c.parked.reset();
  resume_.push_back(fd);
}

void TcpStoreServer::KeySet(const std::string& key) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  std::unordered_set<int> fds = std::move(w->second);
  waiters_.erase(w);
  for (int fd : fds) {
    auto it = conns_.find(fd);
    if (it == conns_.end() || !it->second->parked) continue;
    Conn& c = *it->second;
    c.parked->missing.erase(key);
    if (!c.parked->missing.empty()) continue;
    bool is_get = c.parked->is_get;
    std::string get_key = is_get ? c.parked->keys[0] : std::string();
    Unpark(c);
    if (is_get) {
      Reply(c, wire::Writer().U8(static_cast<uint8_t>(wire::Status::kOk)).Str(data_[get_key]).Finish());
    } else {
      Reply(c, OkFrame());
    }
  }
}

void TcpStoreServer::ExpireParked() {
  SteadyTime now = SteadyClock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    int fd = deadlines_.begin()->second;
    auto it = conns_.find(fd);
    if (it == conns_.end() || !it->second->parked) {
      deadlines_.erase(deadlines_.begin());
      continue;
    }
    Conn& c = *it->second;
    std::vector<std::string> missing;
    for (const auto& k : c.parked->keys) {
      if (c.parked->missing.contains(k)) missing.push_back(k);
    }
    Unpark(c);
    wire::Writer w;
    w.U8(static_cast<uint8_t>(wire::Status::kTimeout)).U32(static_cast<uint32_t>(missing.size()));
    for (const auto& k : missing) w.Str(k);
    Reply(c, w.Finish());
  }
}

void TcpStoreServer::Close(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (it->second->parked) Unpark(*it->second);
  epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  conns_.erase(it);  // closes fd
}

}  // namespace cohort::comm
