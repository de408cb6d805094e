// Small socket helpers for the agent.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"

namespace cohort::agent {

// The address this machine uses to reach `host` (the source IP of the route to it);
// "127.0.0.1" for a loopback host.
Result<std::string> LocalAddressToward(const std::string& host, int port);

// Up to `n` distinct TCP ports that were free on this machine a moment ago (bound, then
// closed), chosen at random outside the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), so that no bind(0) or connect() elsewhere on
// the machine takes one before the job binds it (MASTER_PORT, cohort run's store).
std::vector<int> FindFreePorts(int n);

// True when a TCP connect to host:port is actively refused (nothing listens there): the
// head's process is down, as opposed to a silent network where packets are dropped.
bool ConnectionRefused(const std::string& host, int port, int timeout_ms = 300);

}  // namespace cohort::agent
