// Time helpers. Wall-clock timestamps (milliseconds since the Unix epoch) are what is
// stored and sent on the wire; durations and deadlines inside a process use the steady
// clock so that a wall-clock jump never fires a timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace cohort {

using SteadyClock = std::chrono::steady_clock;
using SteadyTime = SteadyClock::time_point;
using Millis = std::chrono::milliseconds;

// Milliseconds since the Unix epoch.
int64_t NowUnixMs();

// "2026-11-21T09:14:57Z" (UTC), or "-" for 0.
std::string FormatTimestamp(int64_t unix_ms);

// "1h02m", "3.2s", "450ms".
std::string FormatDuration(int64_t ms);
// The same for a measured steady-clock interval (whole milliseconds).
inline std::string FormatDuration(SteadyClock::duration d) {
  return FormatDuration(std::chrono::duration_cast<Millis>(d).count());
}

// The one duration syntax of every flag (`cohort help durations`): a bare number of
// seconds ("3600"); a number with a unit, ms, s, m (or min), h or d ("500ms", "2.5s",
// "90d"), or several from the largest unit down ("1d12h", "1h30m", "2m30s"); or Slurm's
// clock forms MM:SS, HH:MM:SS, D-HH, D-HH:MM and D-HH:MM:SS ("1-12:00:00"). Returns
// milliseconds, at most 1e12 (about 31 years); kInvalidArgument naming `what` otherwise.
Result<int64_t> ParseDurationMs(std::string_view text, std::string_view what);

}  // namespace cohort
