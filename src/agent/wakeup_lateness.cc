#include "agent/wakeup_lateness.h"

#include <algorithm>

namespace cohort::agent {

void WakeupLateness::Record(SteadyTime due, SteadyTime woke) {
  Millis lateness = std::max(Millis(0), std::chrono::duration_cast<Millis>(woke - due));
  DropOlderThan(woke - window_);
  while (!samples_.empty() && samples_.back().lateness <= lateness) samples_.pop_back();
  samples_.push_back({woke, lateness});
}

Millis WakeupLateness::Recent(SteadyTime now) {
  DropOlderThan(now - window_);
  return samples_.empty() ? Millis(0) : samples_.front().lateness;
}

void WakeupLateness::DropOlderThan(SteadyTime cutoff) {
  while (!samples_.empty() && samples_.front().at < cutoff) samples_.pop_front();
}

Millis LapseAllowance(Millis recent_lateness, Millis margin) {
  Millis explained = kRenewalWakeups * recent_lateness;
  Millis bound = margin - kOwnWakeupReserve * recent_lateness;
  return std::max(Millis(0), std::min(explained, bound));
}

}  // namespace cohort::agent
