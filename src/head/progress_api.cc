// Progress reports: POST /v1/report/{token} (COHORT_REPORT, from a job's tasks; the reply
// {"ok": true, "checkpoint": bool} asks for a checkpoint when the job is being moved) and
// GET /v1/jobs/{id}/progress?limit=N (the reported series, oldest first).
#include "head/routes.h"

namespace cohort::head {

void RegisterProgressRoutes(Router& router, Cluster& cluster) {
  router.Post(api::routes::kReportPattern, Access::kTask, [&](const httplib::Request& req, httplib::Response& res) {
    auto scope = cluster.RendezvousFor(req.matches[1].str());
    if (!scope) return SendError(res, scope.error());
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto point = ProgressReportFromJson(*body);
    if (!point) return SendError(res, point.error());
    point->time_ms = NowUnixMs();
    // "checkpoint": the head asks the job to write a checkpoint now (cohort drain --now).
    bool checkpoint = cluster.ReportProgress(*scope, std::move(*point));
    SendJson(res, json{{"ok", true}, {"checkpoint", checkpoint}});
  });

  router.Get(api::routes::kJobProgressPattern, Access::kViewer, [&](const httplib::Request& req, httplib::Response& res) {
    auto id = ParseIdParam(req.matches[1].str(), "job id");
    if (!id) return SendError(res, id.error());
    if (auto job = cluster.GetJob(*id); !job) return SendError(res, job.error());
    auto limit = QueryIntParam(req, "limit", 1000, 1, ProgressLog::kMaxPoints);
    if (!limit) return SendError(res, limit.error());
    json points = json::array();
    for (const auto& p : cluster.progress().Get(*id, static_cast<size_t>(*limit))) points.push_back(ToJson(p));
    SendJson(res, json{{"points", std::move(points)}});
  }, JobScope::kOwnJob);
}

}  // namespace cohort::head
