#include "comm/tcp_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace cohort::comm {
namespace {

// Milliseconds left until `deadline` for poll(), rounded up, never negative.
int PollTimeout(SteadyTime deadline) {
  auto left = std::chrono::ceil<Millis>(deadline - SteadyClock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Waits for `events` on `fd` until `deadline`: true if ready, false on timeout.
Result<bool> WaitFor(int fd, short events, SteadyTime deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, PollTimeout(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errorf(ErrorCode::kUnavailable, "poll: {}", std::strerror(errno));
    if (n > 0) return true;
    if (SteadyClock::now() >= deadline) return false;
  }
}

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

void MakeNonBlockingNoDelay(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Result<UniqueFd> ConnectOnce(const std::string& host, int port, SteadyTime deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    return Errorf(ErrorCode::kUnavailable, "{}", rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc));
  }
  std::string last = "no addresses";
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last = std::strerror(errno);
      continue;
    }
    MakeNonBlockingNoDelay(fd.get());
    int err = 0;
    if (connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        auto ready = WaitFor(fd.get(), POLLOUT, deadline);
        if (!ready || !*ready) {
          last = ready ? std::string("connect timed out") : ready.error().message;
          continue;
        }
        socklen_t len = sizeof err;
        if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err != 0) {
      last = std::strerror(err);
      continue;
    }
    freeaddrinfo(list);
    return fd;
  }
  freeaddrinfo(list);
  return Errorf(ErrorCode::kUnavailable, "{}", last);
}

Result<void> SendAll(int fd, std::string_view data, SteadyTime deadline) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Errorf(ErrorCode::kUnavailable, "send: {}", std::strerror(errno));
    }
    bool ready = COHORT_TRY(WaitFor(fd, POLLOUT, deadline));
    if (!ready) return MakeError(ErrorCode::kUnavailable, "send timed out (peer not reading)");
  }
  return {};
}

Result<void> RecvExact(int fd, size_t n, std::string& out, SteadyTime deadline) {
  size_t want = out.size() + n;
  char buf[64 * 1024];
  while (out.size() < want) {
    size_t chunk = std::min(sizeof buf, want - out.size());
    ssize_t got = recv(fd, buf, chunk, 0);
    if (got > 0) {
      out.append(buf, static_cast<size_t>(got));
      continue;
    }
    if (got == 0) return MakeError(ErrorCode::kUnavailable, "connection closed by peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Errorf(ErrorCode::kUnavailable, "recv: {}", std::strerror(errno));
    }
    bool ready = COHORT_TRY(WaitFor(fd, POLLIN, deadline));
    if (!ready) return MakeError(ErrorCode::kUnavailable, "no reply in time");
  }
  return {};
}

}  // namespace cohort::comm
