#include "agent/lease_keeper.h"

#include "common/log.h"

namespace cohort::agent {
namespace {

LeaseKeeper::Options Normalize(LeaseKeeper::Options o) {
  if (!o.write) o.write = WriteLeaseFile;
  if (!o.now) o.now = [] { return SteadyClock::now(); };
  if (o.tick <= Millis(0)) o.tick = Millis(100);
  return o;
}

Lease MakeLease(SteadyTime from, Millis valid_for, Millis margin) {
  return Lease{from + valid_for, from + valid_for + std::max(margin, Millis(0)), valid_for};
}

}  // namespace

LeaseKeeper::LeaseKeeper(Options options)
    : options_(Normalize(std::move(options))), lateness_(options_.lateness_window) {}

Result<std::unique_ptr<LeaseKeeper>> LeaseKeeper::Start(Options options, Millis valid_for, Millis margin) {
  std::unique_ptr<LeaseKeeper> k(new LeaseKeeper(std::move(options)));
  Lease first = MakeLease(k->options_.now(), valid_for, margin);
  COHORT_TRY_VOID(k->options_.write(k->options_.path, first));
  {
    MutexLock lock(k->mu_);
    k->wanted_ = first;
  }
  k->thread_ = std::thread([kp = k.get()] { kp->Loop(); });
  return k;
}

LeaseKeeper::~LeaseKeeper() {
  {
    MutexLock lock(mu_);
    quit_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void LeaseKeeper::Renew(SteadyTime from, Millis valid_for, Millis margin) {
  Lease next = MakeLease(from, valid_for, margin);
  {
    MutexLock lock(mu_);
    if (next.expires <= wanted_.expires) return;
    wanted_ = next;
    ++wanted_version_;
  }
  cv_.NotifyAll();
}

Millis LeaseKeeper::Allowance(Millis margin) {
  MutexLock lock(mu_);
  return LapseAllowance(lateness_.Recent(options_.now()), margin);
}

void LeaseKeeper::Loop() {
  uint64_t attempted = 0;  // the version last tried; a failed one waits for the next tick
  SteadyTime due = options_.now() + options_.tick;
  while (true) {
    {
      MutexLock lock(mu_);
      cv_.WaitFor(mu_, due - options_.now(), [&] {
        mu_.AssertHeld();
        return quit_ || wanted_version_ != attempted;
      });
      if (quit_) return;
      attempted = wanted_version_;
    }
    due = TickIfDue(due);
    WriteIfChanged();
  }
}

SteadyTime LeaseKeeper::TickIfDue(SteadyTime due) {
  SteadyTime now = options_.now();
  if (now < due) return due;
  MutexLock lock(mu_);
  lateness_.Record(due, now);
  return now + options_.tick;
}

void LeaseKeeper::WriteIfChanged() {
  Lease lease;
  uint64_t version;
  {
    MutexLock lock(mu_);
    if (wanted_version_ == written_version_) return;
    lease = wanted_;
    version = wanted_version_;
  }
  const SteadyTime begin = SteadyClock::now();
  auto r = options_.write(options_.path, lease);
  const SteadyTime end = SteadyClock::now();
  // A write that ate half the grant leaves the shims little room (the file system is
  // stalled): say so, at most every 5 s.
  if (end - begin > lease.granted / 2 && end - last_slow_log_ > std::chrono::seconds(5)) {
    last_slow_log_ = end;
    LOG_WARN("lease keeper: writing {} took {} (the lease is granted for {})", options_.path,
             FormatDuration(end - begin), FormatDuration(lease.granted));
  }
  if (!r) {
    if (!failing_) LOG_WARN("lease keeper: {}; retrying (the tasks stop when the old lease runs out)", r.error().message);
    failing_ = true;
    return;
  }
  written_version_ = version;
  failing_ = false;
}

}  // namespace cohort::agent
