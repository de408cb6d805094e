// The agent's socket helpers: the free ports handed out as MASTER_PORT.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "agent/net.h"

namespace cohort::agent {
namespace {

// A port from FindFreePorts is closed again before the job's program (PyTorch's TCPStore,
// seconds later, after `import torch`) binds it. A port inside the kernel's ephemeral range
// may be taken in that gap by any bind(port 0) or connect() on the machine; outside it, only
// by a program that names the port.
TEST(FindFreePortsTest, ComeFromOutsideTheKernelsEphemeralRange) {
  int lo = 32768, hi = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo >> hi;
  ASSERT_LE(lo, hi);
  std::set<int> seen;
  for (int round = 0; round < 50; ++round) {
    std::vector<int> ports = FindFreePorts(4);
    ASSERT_EQ(ports.size(), 4u);
    EXPECT_EQ(std::set<int>(ports.begin(), ports.end()).size(), 4u) << "the ports of one call are distinct";
    for (int p : ports) {
      EXPECT_TRUE(p < lo || p > hi) << p << " is in the ephemeral range " << lo << "-" << hi;
      EXPECT_GE(p, 1024);
      EXPECT_LE(p, 65535);
      seen.insert(p);
    }
  }
  EXPECT_GT(seen.size(), 100u) << "ports are spread, so two callers rarely pick the same one";
}

TEST(FindFreePortsTest, SkipsAPortSomeoneListensOn) {
  std::vector<int> ports = FindFreePorts(1);
  ASSERT_EQ(ports.size(), 1u);
  // Hold that port and ask many times: it never comes back while it is taken.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(ports[0]));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  for (int i = 0; i < 2000; ++i) {
    for (int p : FindFreePorts(4)) ASSERT_NE(p, ports[0]);
  }
  close(fd);
}

}  // namespace
}  // namespace cohort::agent
