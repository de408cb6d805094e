#include "common/clock.h"

#include <cctype>
#include <ctime>

#include <fmt/format.h>

namespace cohort {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatTimestamp(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  time_t secs = static_cast<time_t>(unix_ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string FormatDuration(int64_t ms) {
  if (ms < 0) ms = 0;
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60'000) return fmt::format("{:.1f}s", ms / 1000.0);
  int64_t s = ms / 1000;
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02d}h", s / 86400, (s % 86400) / 3600);
}

Result<int64_t> ParseDurationMs(std::string_view text, std::string_view what) {
  auto bad = [&] {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: '{}' is not a duration (examples: 500ms, 3s, 1m, 2h, 7d)", what, text),
                     std::string(what));
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return bad();
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(std::string(text.substr(0, i)), &used);
    if (used != i) return bad();
  } catch (...) {
    return bad();
  }
  std::string_view unit = text.substr(i);
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60'000;
  } else if (unit == "h") {
    scale = 3'600'000;
  } else if (unit == "d") {
    scale = 86'400'000;
  } else {
    return bad();
  }
  double ms = value * scale;
  if (!(ms >= 0) || ms > 1e12) return bad();
  return static_cast<int64_t>(ms + 0.5);
}

}  // namespace cohort
