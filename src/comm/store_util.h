// Helpers shared by the Store backends (internal to src/comm): key checks, the error
// messages every backend uses, percent-encoding, store URL parsing and a poll backoff.
// All functions are pure or touch only their arguments; any thread may call them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm {

// Keys are 1 to kMaxKeyBytes bytes of anything (the head's rendezvous store has the same limit).
inline constexpr size_t kMaxKeyBytes = 4096;

// kInvalidArgument naming the key (printably) unless it is 1..kMaxKeyBytes bytes.
Result<void> CheckKey(std::string_view key);

// "2.0s", "0.5s", "120.0s": how timeouts appear in messages.
std::string FormatSeconds(Millis d);

// A key as it appears in messages: printable ASCII kept, other bytes as \xNN, long keys cut.
std::string PrintableKey(std::string_view key);

// kDeadlineExceeded "store: timed out after 2.0s waiting for keys: a, b" (at most 10 keys
// listed, then "and N more").
Error TimeoutError(Millis timeout, const std::vector<std::string>& keys);

// RFC 3986 percent-encoding: unreserved characters (A-Z a-z 0-9 - . _ ~) are kept, every
// other byte becomes %XX (upper-case hex). Injective, so it is also a safe file name.
std::string PercentEncode(std::string_view bytes);

// Parses a decimal int64 that fills all of `text` (an optional leading '-').
std::optional<int64_t> ParseInt64(std::string_view text);

// `a + b`, or kInvalidArgument naming `key` on int64 overflow.
Result<int64_t> CheckedAdd(std::string_view key, int64_t a, int64_t b);

// host and port from "host:port" or "[v6]:port". `allow_zero_port` admits port 0.
struct HostPort {
  std::string host;
  int port = 0;
};
Result<HostPort> ParseHostPort(std::string_view text, std::string_view url, bool allow_zero_port);

// Exponential backoff for polling: Next() returns the delay to sleep (never past the
// deadline), starting at `first` and doubling up to `max`.
class Backoff {
 public:
  Backoff(Millis first, Millis max) : next_(first), max_(max) {}
  // The delay before the next attempt, clipped so that now + delay <= deadline.
  Millis Next(SteadyTime deadline);

 private:
  Millis next_;
  Millis max_;
};

}  // namespace cohort::comm
