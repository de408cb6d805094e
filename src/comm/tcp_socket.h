// Socket helpers for the TCP store (internal to src/comm): an owning file descriptor and
// deadline-bounded connect, send and receive over non-blocking sockets. Errors are
// kUnavailable with a short cause ("Connection refused", "connection closed by peer");
// callers add which store they were talking to. Any thread may call them on its own fds.
#pragma once

#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm {

// Owns a file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// One connection attempt to every address `host` resolves to, each bounded by `deadline`.
// Returns a non-blocking, close-on-exec socket with TCP_NODELAY set.
Result<UniqueFd> ConnectOnce(const std::string& host, int port, SteadyTime deadline);

// Sends all of `data`, waiting for the socket to drain until `deadline`.
Result<void> SendAll(int fd, std::string_view data, SteadyTime deadline);

// Receives exactly `n` bytes into `out` (appended), waiting until `deadline`.
// kUnavailable "connection closed by peer" on EOF, "no reply in time" past the deadline.
Result<void> RecvExact(int fd, size_t n, std::string& out, SteadyTime deadline);

// Sets O_NONBLOCK and TCP_NODELAY (the latter ignored on non-TCP sockets).
void MakeNonBlockingNoDelay(int fd);

}  // namespace cohort::comm
