// Progress reports: POST /v1/report/{token} (COHORT_REPORT, from a job's tasks) and
// GET /v1/jobs/{id}/progress?limit=N (the reported series, oldest first).
#include "head/routes.h"

namespace cohort::head {

void RegisterProgressRoutes(httplib::Server& server, Cluster& cluster) {
  server.Post(R"(/v1/report/([^/]+))", [&](const httplib::Request& req, httplib::Response& res) {
    auto scope = cluster.RendezvousFor(req.matches[1].str());
    if (!scope) return SendError(res, scope.error());
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto point = ProgressPointFromJson(*body);
    if (!point) return SendError(res, point.error());
    point->time_ms = NowUnixMs();
    point->attempt = scope->attempt;
    cluster.progress().Add(scope->job, *point);
    SendJson(res, json{{"ok", true}});
  });

  server.Get(R"(/v1/jobs/([^/]+)/progress)", [&](const httplib::Request& req, httplib::Response& res) {
    auto id = ParseIdParam(req.matches[1].str(), "job id");
    if (!id) return SendError(res, id.error());
    if (auto job = cluster.GetJob(*id); !job) return SendError(res, job.error());
    auto limit = QueryIntParam(req, "limit", 1000, 1, ProgressLog::kMaxPoints);
    if (!limit) return SendError(res, limit.error());
    json points = json::array();
    for (const auto& p : cluster.progress().Get(*id, static_cast<size_t>(*limit))) points.push_back(ToJson(p));
    SendJson(res, json{{"points", std::move(points)}});
  });
}

}  // namespace cohort::head
