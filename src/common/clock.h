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

// Parses "500ms", "3s", "2.5s", "1m", "2h", "90d" (a bare number means seconds) into
// milliseconds, at most 1e12 (about 31 years); kInvalidArgument naming `what` otherwise.
Result<int64_t> ParseDurationMs(std::string_view text, std::string_view what);

}  // namespace cohort
