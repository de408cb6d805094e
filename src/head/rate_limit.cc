#include "head/rate_limit.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace cohort::head {

Result<void> RateLimiter::Validate(double rate, double burst) {
  if (!std::isfinite(rate) || rate < 0 || rate > 1e9) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("rate: requests a second per caller must be from 0 (no limit) to 1e9, got {}", rate),
                     "rate");
  }
  if (rate > 0 && (!std::isfinite(burst) || burst < 1 || burst > 1e9)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("burst: requests at once per caller must be from 1 to 1e9, got {}", burst), "burst");
  }
  return {};
}

RateLimiter::RateLimiter(Options options)
    : options_(std::move(options)),
      refill_ms_(options_.rate > 0 ? static_cast<int64_t>(std::ceil(options_.burst / options_.rate * 1000)) : 0) {}

int64_t RateLimiter::Now() const {
  if (options_.now_ms) return options_.now_ms();
  return std::chrono::duration_cast<Millis>(SteadyClock::now().time_since_epoch()).count();
}

RateLimiter::Decision RateLimiter::Admit(std::string_view key) {
  if (!enabled()) return {};
  const int64_t now = Now();
  MutexLock lock(mu_);
  if (now >= next_sweep_ms_) {
    SweepLocked(now);
    next_sweep_ms_ = now + std::max<int64_t>(refill_ms_, 1000);
  }
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= options_.max_keys) EvictOldestLocked();
    it = buckets_.emplace(std::string(key), Bucket{options_.burst, now}).first;
  }
  Bucket& b = it->second;
  if (now > b.at_ms) {
    b.tokens = std::min(options_.burst, b.tokens + static_cast<double>(now - b.at_ms) * options_.rate / 1000);
    b.at_ms = now;
  }
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return {};
  }
  ++refused_;
  // Less a hair, so that rounding (1 - 0.998 is 0.0020000000000000018) adds no millisecond.
  const double wait_ms = std::ceil((1 - b.tokens) / options_.rate * 1000 - 1e-6);
  return {false, Millis(std::max<int64_t>(1, static_cast<int64_t>(wait_ms)))};
}

void RateLimiter::SweepLocked(int64_t now_ms) {
  std::erase_if(buckets_, [&](const auto& kv) {
    const Bucket& b = kv.second;
    return b.tokens + static_cast<double>(now_ms - b.at_ms) * options_.rate / 1000 >= options_.burst;
  });
}

void RateLimiter::EvictOldestLocked() {
  std::vector<int64_t> ages;
  ages.reserve(buckets_.size());
  for (const auto& [key, b] : buckets_) ages.push_back(b.at_ms);
  const size_t cut = std::max<size_t>(1, ages.size() / 8);
  std::nth_element(ages.begin(), ages.begin() + static_cast<std::ptrdiff_t>(cut - 1), ages.end());
  const int64_t oldest = ages[cut - 1];
  size_t left = cut;
  std::erase_if(buckets_, [&](const auto& kv) { return kv.second.at_ms <= oldest && left > 0 && left-- > 0; });
}

uint64_t RateLimiter::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

size_t RateLimiter::keys() const {
  MutexLock lock(mu_);
  return buckets_.size();
}

}  // namespace cohort::head
