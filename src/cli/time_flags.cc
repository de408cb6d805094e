// Times typed on the command line: --since/--until of history and audit (a duration back
// or an RFC 3339 time), and --begin of submit and update (Slurm's forms, in local time).
#include <ctime>

#include "api/types.h"
#include "cli/client.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

// `n` decimal digits of `s` at `pos` into `out`; false if they are not digits.
bool Digits(std::string_view s, size_t pos, size_t n, int& out) {
  if (pos + n > s.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

// Seconds since the Unix epoch of a calendar date and time, in UTC or (local) this
// machine's time zone, daylight saving time found by mktime. nullopt for a day the month
// lacks (timegm and mktime normalize the 31st of April into May) or a time mktime cannot
// represent.
std::optional<int64_t> CalendarTime(int year, int month, int day, int hour, int minute, int second, bool local) {
  struct tm tm {};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  tm.tm_isdst = -1;
  const time_t secs = local ? mktime(&tm) : timegm(&tm);
  if (secs == static_cast<time_t>(-1) || tm.tm_mday != day || tm.tm_mon != month - 1) return std::nullopt;
  return static_cast<int64_t>(secs);
}

// "2026-03-01T12:00:00Z", "2026-03-01t12:00:00.250+01:00", "2026-03-01 12:00:00-05:30".
std::optional<int64_t> ParseRfc3339Ms(std::string_view s) {
  int year, month, day, hour, minute, second;
  if (!Digits(s, 0, 4, year) || s.size() < 20 || s[4] != '-' || !Digits(s, 5, 2, month) || s[7] != '-' ||
      !Digits(s, 8, 2, day) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !Digits(s, 11, 2, hour) ||
      s[13] != ':' || !Digits(s, 14, 2, minute) || s[16] != ':' || !Digits(s, 17, 2, second)) {
    return std::nullopt;
  }
  size_t pos = 19;
  int64_t ms = 0;
  if (s[pos] == '.') {
    size_t digits = 0;
    for (++pos; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos, ++digits) {
      if (digits < 3) ms = ms * 10 + (s[pos] - '0');
    }
    if (digits == 0) return std::nullopt;
    for (; digits < 3; ++digits) ms *= 10;
  }
  int64_t offset_min = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!Digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' || !Digits(s, pos + 4, 2, om) ||
        oh > 23 || om > 59) {
      return std::nullopt;
    }
    offset_min = (s[pos] == '-' ? -1 : 1) * (oh * 60 + om);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size() || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  const auto secs = CalendarTime(year, month, day, hour, minute, second, /*local=*/false);
  if (!secs) return std::nullopt;
  const int64_t out = *secs * 1000 + ms - offset_min * 60'000;
  if (out < 0) return std::nullopt;
  return out;
}

// Unix ms of hour:minute:second, local time, `days` after the day of `now_ms` (mktime
// normalizes the day and finds daylight saving time).
int64_t LocalTimeOn(int64_t now_ms, int days, int hour, int minute, int second) {
  const time_t now = static_cast<time_t>(now_ms / 1000);
  struct tm tm {};
  localtime_r(&now, &tm);
  tm.tm_mday += days;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  tm.tm_isdst = -1;
  return static_cast<int64_t>(mktime(&tm)) * 1000;
}

// The next time a clock here shows hour:minute:second: today, or tomorrow once it has passed.
int64_t NextLocalTime(int64_t now_ms, int hour, int minute, int second) {
  const int64_t today = LocalTimeOn(now_ms, 0, hour, minute, second);
  return today > now_ms ? today : LocalTimeOn(now_ms, 1, hour, minute, second);
}

// "HH:MM" or "HH:MM:SS" at `pos` to the end of `s`.
bool ClockTime(std::string_view s, size_t pos, int& hour, int& minute, int& second) {
  second = 0;
  const size_t n = s.size() - pos;
  if (n != 5 && n != 8) return false;
  if (!Digits(s, pos, 2, hour) || s[pos + 2] != ':' || !Digits(s, pos + 3, 2, minute)) return false;
  if (n == 8 && (s[pos + 5] != ':' || !Digits(s, pos + 6, 2, second))) return false;
  return hour <= 23 && minute <= 59 && second <= 59;
}

// "YYYY-MM-DD", "YYYY-MM-DDTHH:MM" or "YYYY-MM-DDTHH:MM:SS", local time; nullopt otherwise.
std::optional<int64_t> LocalDateTime(std::string_view s) {
  int year, month, day, hour = 0, minute = 0, second = 0;
  if (s.size() < 10 || !Digits(s, 0, 4, year) || s[4] != '-' || !Digits(s, 5, 2, month) || s[7] != '-' ||
      !Digits(s, 8, 2, day)) {
    return std::nullopt;
  }
  if (s.size() > 10 && ((s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !ClockTime(s, 11, hour, minute, second))) {
    return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1) return std::nullopt;
  const auto secs = CalendarTime(year, month, day, hour, minute, second, /*local=*/true);
  if (!secs) return std::nullopt;
  return *secs * 1000;
}

// What follows "now+": a count of seconds, a count with one of Slurm's units (seconds,
// minutes, hours, days, weeks), or a duration (1h30m); milliseconds.
std::optional<int64_t> AheadMs(std::string_view s) {
  size_t digits = 0;
  while (digits < s.size() && digits < 12 && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits > 0 && digits < s.size()) {
    static constexpr std::pair<std::string_view, int64_t> kUnits[] = {
        {"seconds", 1000},      {"second", 1000},      {"minutes", 60'000},       {"minute", 60'000},
        {"hours", 3'600'000},   {"hour", 3'600'000},   {"days", 86'400'000},      {"day", 86'400'000},
        {"weeks", 604'800'000}, {"week", 604'800'000}};
    const std::string_view unit = s.substr(digits);
    for (const auto& [name, ms] : kUnits) {
      if (unit == name) return std::stoll(std::string(s.substr(0, digits))) * ms;
    }
  }
  if (auto ms = ParseDurationMs(s, "--begin")) return *ms;
  return std::nullopt;
}

}  // namespace

Result<int64_t> ParseTimeFlag(std::string_view text, std::string_view flag, int64_t now_ms) {
  if (auto t = ParseRfc3339Ms(text)) return *t;
  if (auto ago = ParseDurationMs(text, flag)) return std::max<int64_t>(0, now_ms - *ago);
  return FieldError(std::string(flag), "'{}' is neither a duration back from now (30m, 1h, 7d) nor an RFC 3339 "
                                       "time (2026-03-01T12:00:00Z)",
                    text.substr(0, 64));
}

Result<TimeWindow> ParseUserAndWindow(const std::string& user, const std::string& since, const std::string& until,
                                      int64_t now_ms) {
  if (!user.empty() && !api::ValidUserName(user)) {
    return FieldError("--user", "must be 1-64 characters of letters, digits, '.', '_' or '-', got '{}'",
                      user.substr(0, 80));
  }
  TimeWindow w;
  if (!since.empty()) w.since = COHORT_TRY(ParseTimeFlag(since, "--since", now_ms));
  if (!until.empty()) w.until = COHORT_TRY(ParseTimeFlag(until, "--until", now_ms));
  if (w.since && w.until && *w.since >= *w.until) {
    return FieldError("--until", "must be after --since ({}), got {}", FormatTimestamp(*w.since),
                      FormatTimestamp(*w.until));
  }
  return w;
}

Result<int64_t> ParseBeginTime(std::string_view text, std::string_view flag, int64_t now_ms) {
  std::string lower(text.substr(0, 64));
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::optional<int64_t> at;
  int hour, minute, second;
  if (lower == "now" || lower == "today") {
    at = now_ms;
  } else if (lower.starts_with("now+")) {
    if (auto ahead = AheadMs(std::string_view(lower).substr(4))) at = now_ms + *ahead;
  } else if (lower == "tomorrow") {
    at = LocalTimeOn(now_ms, 1, 0, 0, 0);
  } else if (lower == "midnight") {
    at = NextLocalTime(now_ms, 0, 0, 0);
  } else if (lower == "noon") {
    at = NextLocalTime(now_ms, 12, 0, 0);
  } else if (lower == "fika") {
    at = NextLocalTime(now_ms, 15, 0, 0);
  } else if (lower == "teatime") {
    at = NextLocalTime(now_ms, 16, 0, 0);
  } else if (ClockTime(lower, 0, hour, minute, second)) {
    at = NextLocalTime(now_ms, hour, minute, second);
  } else if (auto zoned = ParseRfc3339Ms(text)) {
    at = *zoned;
  } else {
    at = LocalDateTime(lower);
  }
  if (!at || *at < 0 || *at > api::kMaxBeginMs) {
    return FieldError(std::string(flag),
                      "'{}' is not a time: give now+1h (or now+90, now+2days), 16:00 or 16:00:30 (the next time the "
                      "clock shows it), midnight, noon, teatime, tomorrow, 2026-12-01 or 2026-12-01T09:30 (local "
                      "time) or an RFC 3339 time",
                      text.substr(0, 64));
  }
  return *at;
}

}  // namespace cohort::cli
