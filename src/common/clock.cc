#include "common/clock.h"

#include <cctype>
#include <ctime>
#include <optional>
#include <utility>
#include <vector>

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

namespace {

// A run of 1-12 decimal digits.
bool ParseClockDigits(std::string_view s, int64_t& out) {
  if (s.empty() || s.size() > 12) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  return true;
}

// Slurm's clock forms, in seconds: MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
std::optional<int64_t> ParseClockForm(std::string_view s) {
  int64_t days = -1;
  if (size_t dash = s.find('-'); dash != std::string_view::npos) {
    if (!ParseClockDigits(s.substr(0, dash), days)) return std::nullopt;
    s = s.substr(dash + 1);
  }
  std::vector<int64_t> parts;
  while (true) {
    size_t colon = s.find(':');
    int64_t p = 0;
    if (!ParseClockDigits(s.substr(0, colon), p)) return std::nullopt;
    parts.push_back(p);
    if (colon == std::string_view::npos) break;
    s = s.substr(colon + 1);
  }
  if (parts.size() > 3) return std::nullopt;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] >= 60) return std::nullopt;
  }
  if (days >= 0) {
    if (parts[0] >= 24) return std::nullopt;
    return days * 86400 + parts[0] * 3600 + (parts.size() > 1 ? parts[1] * 60 : 0) + (parts.size() > 2 ? parts[2] : 0);
  }
  if (parts.size() == 2) return parts[0] * 60 + parts[1];
  if (parts.size() == 3) return parts[0] * 3600 + parts[1] * 60 + parts[2];
  return std::nullopt;  // a bare number is not a clock form
}

}  // namespace

Result<int64_t> ParseDurationMs(std::string_view text, std::string_view what) {
  auto bad = [&] {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: '{}' is not a duration (examples: 3600, 500ms, 90s, 15m, 2h, 7d, 1d12h, "
                                 "HH:MM:SS, D-HH:MM:SS; see cohort help durations)",
                                 what, text),
                     std::string(what));
  };
  if (text.find_first_of(":-") != std::string_view::npos) {
    auto secs = ParseClockForm(text);
    if (!secs || *secs > 1'000'000'000) return bad();
    return *secs * 1000;
  }
  // Components <number><unit>, each unit smaller than the one before; a lone number is seconds.
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"d", 86'400'000}, {"h", 3'600'000}, {"min", 60'000}, {"m", 60'000}, {"s", 1000}, {"ms", 1}};
  double ms = 0;
  double last_scale = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t i = at;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (i == at) return bad();
    double value = 0;
    try {
      size_t used = 0;
      value = std::stod(std::string(text.substr(at, i - at)), &used);
      if (used != i - at) return bad();
    } catch (...) {
      return bad();
    }
    size_t j = i;
    while (j < text.size() && std::isalpha(static_cast<unsigned char>(text[j]))) ++j;
    std::string_view unit = text.substr(i, j - i);
    double scale = 0;
    if (unit.empty()) {
      if (at != 0 || j != text.size()) return bad();  // a bare number only alone
      scale = 1000;
    }
    for (const auto& [name, s] : kUnits) {
      if (unit == name) scale = s;
    }
    if (scale == 0 || (last_scale != 0 && scale >= last_scale)) return bad();
    last_scale = scale;
    ms += value * scale;
    at = j;
  }
  if (text.empty() || !(ms >= 0) || ms > 1e12) return bad();
  return static_cast<int64_t>(ms + 0.5);
}

}  // namespace cohort
