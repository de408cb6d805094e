// GET /v1/audit?since=MS&until=MS&user=NAME&limit=N&cursor=ID: the audit log (audit.h),
// for admins. `since` (inclusive) and `until` (exclusive) are Unix milliseconds; `limit`
// rows per page (default 100, at most 10000), newest first across pages and oldest first
// within one (as GET /v1/jobs); `cursor` is a reply's next_cursor. Any other parameter is
// refused, naming it: a mistyped filter must not return the whole log.
#include "head/audit.h"
#include "head/routes.h"

namespace cohort::head {

namespace {

constexpr int64_t kDefaultAuditLimit = 100;
constexpr int64_t kMaxAuditLimit = 10'000;

Result<store::AuditQuery> ParseAuditQuery(const httplib::Request& req) {
  static const std::set<std::string> kKnown = {"since", "until", "user", "limit", "cursor"};
  for (const auto& [name, value] : req.params) {
    if (!kKnown.contains(name)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("unknown query parameter '{}' (known: cursor, limit, since, until, user)",
                                   name.substr(0, 64)),
                       name.substr(0, 64));
    }
  }
  store::AuditQuery q;
  q.since_ms = COHORT_TRY(QueryIntParam(req, "since", 0, 0, INT64_MAX));
  q.until_ms = COHORT_TRY(QueryIntParam(req, "until", INT64_MAX, 1, INT64_MAX));
  if (q.since_ms >= q.until_ms) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("until: must be after since ({}), got {}", q.since_ms, q.until_ms), "until");
  }
  if (req.has_param("user")) {
    q.user = req.get_param_value("user");
    if (!api::ValidUserName(q.user)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("user: must be 1-64 characters of letters, digits, '.', '_' or '-', got '{}'",
                                   q.user.substr(0, 80)),
                       "user");
    }
  }
  q.limit = static_cast<size_t>(COHORT_TRY(QueryIntParam(req, "limit", kDefaultAuditLimit, 1, kMaxAuditLimit)));
  if (req.has_param("cursor")) q.before_id = COHORT_TRY(ParseIdParam(req.get_param_value("cursor"), "cursor"));
  return q;
}

}  // namespace

void RegisterAuditRoutes(Router& router, AuditLog& audit) {
  router.Get(api::routes::kAudit, Access::kAdmin, [&](const httplib::Request& req, httplib::Response& res) {
    auto q = ParseAuditQuery(req);
    if (!q) return SendError(res, q.error());
    const size_t limit = q->limit;
    q->limit = limit + 1;  // one more than the page: whether a next page exists
    auto rows = audit.Query(*q);
    if (!rows) return SendError(res, rows.error());
    api::AuditPage page;
    if (rows->size() > limit) {
      rows->pop_back();
      page.next_cursor = std::to_string(rows->back().id);
    }
    page.entries.assign(std::make_move_iterator(rows->rbegin()), std::make_move_iterator(rows->rend()));
    SendJson(res, api::ToJson(page));
  });
}

}  // namespace cohort::head
