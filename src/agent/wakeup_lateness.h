// WakeupLateness: how late this process's own timer wake-ups are, as a measure of the
// node's scheduling delay; and LapseAllowance, the extra time a lease may be given for a
// lapse that delay explains.
//
// A process that asks to wake at `due` and runs again at `woke` was late by woke - due:
// the time the kernel did not schedule it (a node whose cores a training job keeps busy,
// a stopped process, a host paused by its hypervisor). The task shim and the agent's lease
// keeper each tick on a timer and record every tick here; Recent() is the largest
// lateness of the last `window`. The agent renews a lease through a chain of its own
// wake-ups (read the heartbeat's reply, write the lease file) and the shim reads it
// through another, so a lapse of about a few times Recent() is what a loaded node, not a
// lost agent, explains.
//
// LapseAllowance turns that into extra time beyond a lease's expiry, bounded by the
// margin the protocol leaves: the head may place a silent node's gang elsewhere no
// earlier than failure_timeout after the last heartbeat it processed, and a lease expires
// fence_timeout after that heartbeat was sent (earlier), so a task killed by expiry +
// margin (margin = failure_timeout - fence_timeout) is gone before the head can place
// its gang again. The killer's own next wake-up may be late too, so the allowance leaves
// it room: allowance + 2 × Recent() <= margin. A node so loaded that 2 × Recent() covers
// the whole margin gets no allowance at all (the lease's own expiry, as without
// measuring).
//
// Pure: times are passed in, so tests drive it with made-up clocks. Not thread-safe; one
// owner (the shim's only thread, the lease keeper's thread).
#pragma once

#include <deque>

#include "common/clock.h"

namespace cohort::agent {

class WakeupLateness {
 public:
  explicit WakeupLateness(Millis window) : window_(window) {}

  // Records a wake-up that was due at `due` and happened at `woke` (early ones count as
  // on time).
  void Record(SteadyTime due, SteadyTime woke);
  // The largest lateness recorded within `window` before `now`; zero if none.
  Millis Recent(SteadyTime now);

 private:
  struct Sample {
    SteadyTime at;
    Millis lateness;
  };
  void DropOlderThan(SteadyTime cutoff);

  const Millis window_;
  // A sliding-window maximum: times increase from front to back and lateness decreases,
  // so the front is the window's maximum and memory stays small.
  std::deque<Sample> samples_;
};

// How many of its own wake-ups a lease renewal takes, in the worst case, on the agent
// and the shim: the allowance forgives this many times the recent lateness.
inline constexpr int kRenewalWakeups = 4;
// How much of the margin stays for the killer's own late wake-up, in units of lateness.
inline constexpr int kOwnWakeupReserve = 2;

// The extra time beyond a lease's expiry that `recent_lateness` explains, within `margin`
// (the time between the expiry and the moment the head may place the gang elsewhere):
// min(kRenewalWakeups × lateness, margin - kOwnWakeupReserve × lateness), never negative.
Millis LapseAllowance(Millis recent_lateness, Millis margin);

}  // namespace cohort::agent
