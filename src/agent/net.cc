#include "agent/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include <fmt/format.h>

namespace cohort::agent {

Result<std::string> LocalAddressToward(const std::string& host, int port) {
  if (host == "localhost" || host.starts_with("127.")) return std::string("127.0.0.1");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    return Errorf(ErrorCode::kUnavailable, "cannot resolve head host '{}': {}", host, gai_strerror(rc));
  }
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::string out;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      if (inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf)) out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (out.empty()) return Errorf(ErrorCode::kUnavailable, "no route to head host '{}'", host);
  return out;
}

namespace {

// The kernel's ephemeral range: the ports it picks by itself for bind(port 0) and for an
// unbound connect().
std::pair<int, int> EphemeralPortRange() {
  int lo = 32768, hi = 60999;  // Linux's default
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    int a = 0, b = 0;
    if (std::fscanf(f, "%d %d", &a, &b) == 2 && a > 0 && a <= b && b <= 65535) lo = a, hi = b;
    std::fclose(f);
  }
  return {lo, hi};
}

// A socket bound to `port` on every local address, IPv6 and IPv4 where the machine has
// IPv6 (a dual-stack wildcard conflicts with any IPv4 or IPv6 binding of the port, as
// PyTorch's store, which binds [::], would); -1 when the port is taken. No SO_REUSEADDR:
// a port with connections lingering in TIME_WAIT is skipped too.
int BindPort(int port) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int off = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0) return fd;
    bool no_ipv6 = errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT;
    close(fd);
    if (!no_ipv6) return -1;
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  a4.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a4), sizeof a4) == 0) return fd;
  close(fd);
  return -1;
}

}  // namespace

std::vector<int> FindFreePorts(int n) {
  // Outside the ephemeral range: the port is closed again here and bound seconds later by
  // the job (PyTorch's store after `import torch`); in that gap, a port of the ephemeral
  // range may be taken by any bind(0) or connect() on the machine (another job's server,
  // an outgoing connection), and the job's bind then fails with EADDRINUSE. Outside it,
  // only a program that names the port takes it. Random, so that two callers (two agents
  // on one machine, `cohort run` beside them) seldom pick the same one.
  constexpr int kLowest = 10000;  // above the ports well-known services are configured on
  auto [lo, hi] = EphemeralPortRange();
  std::vector<std::pair<int, int>> spans;  // inclusive
  if (lo - 1 >= kLowest) spans.push_back({kLowest, lo - 1});
  if (hi + 1 <= 65535) spans.push_back({std::max(hi + 1, kLowest), 65535});
  int total = 0;
  for (auto [a, b] : spans) total += b - a + 1;

  std::vector<int> ports;
  std::vector<int> fds;  // held until all are bound, so the n ports are distinct
  std::mt19937 rng(std::random_device{}());
  for (int tries = 0; total > 0 && static_cast<int>(ports.size()) < n && tries < 64 * n; ++tries) {
    int k = std::uniform_int_distribution<int>(0, total - 1)(rng);
    int port = 0;
    for (auto [a, b] : spans) {
      if (k <= b - a) {
        port = a + k;
        break;
      }
      k -= b - a + 1;
    }
    if (int fd = BindPort(port); fd >= 0) {
      ports.push_back(port);
      fds.push_back(fd);
    }
  }
  // A machine whose ephemeral range leaves nothing outside it: the kernel's pick, as before.
  while (static_cast<int>(ports.size()) < n) {
    int fd = BindPort(0);
    if (fd < 0) break;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      close(fd);
      break;
    }
    ports.push_back(ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                     : reinterpret_cast<sockaddr_in*>(&addr)->sin_port));
    fds.push_back(fd);
  }
  for (int fd : fds) close(fd);
  return ports;
}

bool ConnectionRefused(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return false;
  bool refused = false;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd >= 0) {
    int rc = connect(fd, res->ai_addr, res->ai_addrlen);
    if (rc < 0 && errno == ECONNREFUSED) {
      refused = true;
    } else if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, timeout_ms) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        refused = err == ECONNREFUSED;
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  return refused;
}

}  // namespace cohort::agent
