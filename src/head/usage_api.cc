// GET /v1/usage?since=MS&until=MS&user=NAME: GPU-hours per user and per job (usage.h).
// `since` and `until` are Unix milliseconds; since < until.
#include "head/routes.h"
#include "head/usage.h"

namespace cohort::head {

void RegisterUsageRoutes(Router& router, Cluster& cluster) {
  router.Get(api::routes::kUsage, Access::kViewer, [&](const httplib::Request& req, httplib::Response& res) {
    UsageWindow w;
    auto since = QueryIntParam(req, "since", 0, 0, INT64_MAX);
    if (!since) return SendError(res, since.error());
    auto until = QueryIntParam(req, "until", INT64_MAX, 1, INT64_MAX);
    if (!until) return SendError(res, until.error());
    w.since_ms = *since;
    w.until_ms = *until;
    if (w.since_ms >= w.until_ms) {
      return SendError(res, Error{ErrorCode::kInvalidArgument,
                                  fmt::format("until: must be after since ({}), got {}", w.since_ms, w.until_ms),
                                  "until"});
    }
    std::string user = req.has_param("user") ? req.get_param_value("user") : "";
    if (req.has_param("user") && !api::ValidUserName(user)) {
      // A name no job can have is a typo, not a user without usage: say so (as /v1/audit does).
      return SendError(res, Error{ErrorCode::kInvalidArgument,
                                  fmt::format("user: must be 1-64 characters of letters, digits, '.', '_' or '-', "
                                              "got '{}'", user.substr(0, 80)),
                                  "user"});
    }
    auto report = ComputeUsage(cluster.ListJobs({}), NowUnixMs(), w, user);
    SendJson(res, api::ToJson(report));
  });
}

}  // namespace cohort::head
