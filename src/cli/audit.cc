// `cohort audit [--user U] [--since 1h|RFC3339] [--until ...] [--limit N]`: the head's
// audit log (admins), from GET /v1/audit: who changed what, when, and what the head
// answered, refused attempts included. The newest --limit rows that match, oldest first.

#include "api/audit.h"
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/http.h"

namespace cohort::cli {
namespace {

constexpr int64_t kMaxAuditLimit = 10'000;

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
