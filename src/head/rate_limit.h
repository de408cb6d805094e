// RateLimiter: how many API requests each caller may make, a token bucket per key (the
// Router's keys: a token's id, or for a caller without accepted credentials its address).
//
// A bucket holds up to `burst` requests and refills at `rate` a second; a request takes
// one, and a key whose bucket is empty is refused with the time until one is back (the
// Retry-After). A bucket idle long enough to be full again is the same as none, so it is
// forgotten: the memory held is that of the keys active within the last burst / rate
// seconds, swept once per such period, and at most max_keys (past them, the keys idle the
// longest go first: a flood of new addresses cannot grow the map). A rate of 0 admits
// everything and keeps nothing.
//
// Threads: Admit and the counters from any thread (one mutex; an Admit is a hash lookup and
// some arithmetic). The clock is injected (monotonic milliseconds) so tests need no sleeps.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"
#include "common/string_hash.h"

namespace cohort::head {

class RateLimiter {
 public:
  struct Options {
    double rate = 50;      // requests a second, sustained, per key; 0: no limit
    double burst = 200;    // requests at once after an idle spell; at least 1 when rate > 0
    size_t max_keys = 100'000;
    std::function<int64_t()> now_ms;  // monotonic ms; the steady clock when empty
  };

  // kInvalidArgument naming "rate" or "burst" for a negative or non-finite rate, or a
  // burst under 1 with a rate.
  static Result<void> Validate(double rate, double burst);

  explicit RateLimiter(Options options);

  struct Decision {
    bool admitted = true;
    Millis retry_after{0};  // when refused: until the bucket holds a request again (> 0)
  };
  // Takes a request from `key`'s bucket.
  Decision Admit(std::string_view key) EXCLUDES(mu_);

  bool enabled() const { return options_.rate > 0; }
  const Options& options() const { return options_; }
  uint64_t refused() const EXCLUDES(mu_);  // requests refused so far
  size_t keys() const EXCLUDES(mu_);       // buckets held now

 private:
  struct Bucket {
    double tokens = 0;
    int64_t at_ms = 0;  // when `tokens` was last brought up to date
  };
  int64_t Now() const;
  // Forgets the buckets that are full again by `now_ms`.
  void SweepLocked(int64_t now_ms) REQUIRES(mu_);
  // Forgets the eighth of the buckets idle the longest.
  void EvictOldestLocked() REQUIRES(mu_);

  const Options options_;
  const int64_t refill_ms_;  // how long an empty bucket takes to fill: burst / rate
  mutable Mutex mu_;
  // Looked up by string_view, without a copy of the key.
  std::unordered_map<std::string, Bucket, StringHash, std::equal_to<>> buckets_ GUARDED_BY(mu_);
  int64_t next_sweep_ms_ GUARDED_BY(mu_) = 0;
  uint64_t refused_ GUARDED_BY(mu_) = 0;
};

}  // namespace cohort::head
