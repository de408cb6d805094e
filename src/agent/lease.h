// The lease file: how long an agent's tasks may run without hearing from it again.
//
// One file per agent (LeaseKeeper writes it, lease_keeper.h); every task shim of that
// agent reads it (task_shim.h) and stops its task once the lease has run out, so a
// stopped, hung or cut-off agent's tasks end by themselves. One JSON object, written
// atomically (FILE.tmp, then rename):
//   {"expires_ms": E, "deadline_ms": D, "timeout_ms": T}
// E and D are times on CLOCK_MONOTONIC (std::chrono::steady_clock, the same in every
// process of the machine) in milliseconds. E is the expiry: the send time of the agent's
// last successful heartbeat plus the fence timeout. D >= E is the latest a task may run
// under this lease, whatever the node's load: E plus (failure timeout - fence timeout),
// so never past the moment the head may declare the node DOWN and place the gang
// elsewhere (wakeup_lateness.h argues the bound). T is the renewal period granted, for
// messages. A file without "deadline_ms" allows nothing past E.
//
// Both functions may be called from any thread; they share no state.
#pragma once

#include <optional>
#include <string>

#include "common/clock.h"
#include "common/error.h"

namespace cohort::agent {

struct Lease {
  SteadyTime expires{};
  SteadyTime deadline{};  // >= expires
  Millis granted{0};

  // When a task under this lease is to be killed, given the recent lateness of the
  // killer's own wake-ups: the expiry plus what that lateness explains, never past the
  // deadline (LapseAllowance).
  SteadyTime KillAt(Millis recent_lateness) const;
};

// Writes `lease` to `path` atomically. kInternal naming the path if it cannot.
Result<void> WriteLeaseFile(const std::string& path, const Lease& lease);

// Reads a lease file; std::nullopt if it is missing or malformed.
std::optional<Lease> ReadLeaseFile(const std::string& path);

}  // namespace cohort::agent
