// LeaseKeeper: keeps the agent's lease file (lease.h) current, on a thread of its own.
//
// The agent grants its tasks time after every successful heartbeat (from its send time,
// for the fence timeout) and, while the head refuses connections, up to its head-down
// grace. Renew only records the grant and wakes the keeper's thread, which writes the one
// file every task shim reads: renewing never waits on the heartbeat loop (its HTTP round
// trips, GPU sampling, port scans, task starts), nor the heartbeat loop on the file
// system, and the cost of a renewal does not grow with the number of tasks. A lease only
// grows: a grant that would end earlier than the current one changes nothing, as in the
// shims.
//
// The thread also ticks every Options::tick and records how late each tick is
// (WakeupLateness): the agent's own scheduling delay, which its fence check allows for
// through Allowance, with the same bound as the shims (wakeup_lateness.h).
//
// Threads: Start, the destructor and path from the owner; Renew and Allowance from any
// thread. State shared with the keeper's thread is under mu_.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "agent/lease.h"
#include "agent/wakeup_lateness.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"

namespace cohort::agent {

class LeaseKeeper {
 public:
  struct Options {
    std::string path;  // the lease file
    Millis tick{100};  // how often the thread measures its own lateness
    // How long a lateness is remembered (WakeupLateness's window).
    Millis lateness_window{10'000};
    // Writes the file (default: WriteLeaseFile); tests substitute a slow or failing one.
    std::function<Result<void>(const std::string&, const Lease&)> write;
    // The clock lateness is measured on (default: SteadyClock::now); tests skew it.
    std::function<SteadyTime()> now;
  };

  // Writes the first lease, valid for `valid_for` from now with `margin` beyond (lease.h),
  // then starts the thread. Fails (and starts nothing) if that first write fails: tasks
  // must then run without a lease rather than be fenced by a file nobody can write.
  static Result<std::unique_ptr<LeaseKeeper>> Start(Options options, Millis valid_for, Millis margin);
  // Joins the thread; the file stays (the shims of a dead agent die of its expiry and of
  // their parent-death signal).
  ~LeaseKeeper() EXCLUDES(mu_);
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Extends the lease to `from + valid_for`, its deadline `margin` beyond, unless the
  // current lease already lasts longer. Returns at once; the thread writes the file. A
  // failed write is logged and retried at the next tick.
  void Renew(SteadyTime from, Millis valid_for, Millis margin) EXCLUDES(mu_);

  // The time past the fence timeout that this process's recent scheduling delay explains,
  // within `margin` (LapseAllowance).
  Millis Allowance(Millis margin) EXCLUDES(mu_);

  const std::string& path() const { return options_.path; }

 private:
  explicit LeaseKeeper(Options options);
  void Loop() EXCLUDES(mu_);  // the keeper's thread
  // Records the tick that was due, if it was; returns when the next one is due.
  SteadyTime TickIfDue(SteadyTime due) EXCLUDES(mu_);
  // Writes the wanted lease if it is newer than the file; the keeper's thread.
  void WriteIfChanged() EXCLUDES(mu_);

  const Options options_;
  // The keeper's thread only:
  uint64_t written_version_ = 0;  // the version of wanted_ in the file
  bool failing_ = false;          // the last write failed (logged once per streak)
  SteadyTime last_slow_log_{};    // the last "writing ... took" warning

  Mutex mu_;
  CondVar cv_;
  Lease wanted_ GUARDED_BY(mu_);
  uint64_t wanted_version_ GUARDED_BY(mu_) = 0;
  WakeupLateness lateness_ GUARDED_BY(mu_);
  bool quit_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // started last
};

}  // namespace cohort::agent
