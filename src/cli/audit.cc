// `cohort audit [--user U] [--since 1h|RFC3339] [--until ...] [--limit N]`: the head's
// audit log (admins), from GET /v1/audit: who changed what, when, and what the head
// answered, refused attempts included. The newest --limit rows that match, oldest first.
#include <ctime>

#include "api/audit.h"
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/http.h"

namespace cohort::cli {
namespace {

constexpr int64_t kMaxAuditLimit = 10'000;

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
  struct tm tm {};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const time_t secs = timegm(&tm);
  // timegm normalizes the 31st of April into May: a day the month lacks is refused.
  if (tm.tm_mday != day || tm.tm_mon != month - 1) return std::nullopt;
  const int64_t out = static_cast<int64_t>(secs) * 1000 + ms - offset_min * 60'000;
  if (out < 0) return std::nullopt;
  return out;
}

int Run(const AuditFlags& f, const GlobalOptions& global) {
  auto query = AuditQueryFor(f, NowUnixMs());
  if (!query) return ReportError(query.error());
  auto reply = HeadClient(global).Get(api::routes::WithQuery(api::routes::kAudit, *query));
  if (!reply) return ReportError(reply.error());
  auto page = FromHead(api::AuditPageFromJson(*reply), "audit log");
  if (!page) return ReportError(page.error());
  if (global.json) {
    PrintJson(*reply);
    return 0;
  }
  std::fputs(RenderAudit(page->entries).c_str(), stdout);
  if (!page->next_cursor.empty()) {
    std::fprintf(stderr, "(older rows match too: raise --limit or narrow --since)\n");
  }
  return 0;
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

Result<std::vector<std::pair<std::string, std::string>>> AuditQueryFor(const AuditFlags& f, int64_t now_ms) {
  std::vector<std::pair<std::string, std::string>> query;
  const auto [since, until] = COHORT_TRY(ParseUserAndWindow(f.user, f.since, f.until, now_ms));
  if (!f.user.empty()) query.emplace_back("user", f.user);
  if (until && *until <= 0) return FieldError("--until", "must be after 1970, got '{}'", f.until.substr(0, 64));
  if (since) query.emplace_back("since", std::to_string(*since));
  if (until) query.emplace_back("until", std::to_string(*until));
  const int64_t limit = COHORT_TRY(ParseIntParam(f.limit, "--limit", 1, kMaxAuditLimit));
  query.emplace_back("limit", std::to_string(limit));
  return query;
}

std::string RenderAudit(const std::vector<api::AuditEntry>& entries) {
  Table t({"TIME", "WHO", "TOKEN", "CLIENT", "REQUEST", "STATUS", "JOB", "ERROR"});
  t.SetMaxWidth(4, 60);
  t.SetMaxWidth(7, 80);
  for (const auto& e : entries) {
    std::string who = !e.user.empty() ? e.user : !e.node.empty() ? "node " + e.node : e.caller;
    if (!e.user.empty() && !e.node.empty()) who += " (node " + e.node + ")";  // a join token registering it
    t.AddRow({FormatTimestamp(e.time_ms), who, e.token_id.empty() ? "-" : e.token_id,
              e.client.empty() ? "-" : e.client, e.method + " " + e.path, std::to_string(e.status),
              e.job_id > 0 ? std::to_string(e.job_id) : "-", e.error});
  }
  return t.Render();
}

void AddAuditCommand(CommandContext& ctx) {
  auto f = std::make_shared<AuditFlags>();
  auto* sub = ctx.app.add_subcommand(
      "audit", "The head's audit log (admins): every change requested, refused ones too; the newest first");
  sub->add_option("-u,--user", f->user, "Only this user's requests");
  sub->add_option("--since", f->since, "Only requests since then: a duration back from now (1h, 7d) or RFC 3339");
  sub->add_option("--until", f->until, "Only requests before then: a duration back from now or RFC 3339");
  sub->add_option("-n,--limit", f->limit, "At most this many rows, the newest (1-10000; default 100)");
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, &global] { return Run(*f, global); });
}

}  // namespace cohort::cli
