// /v1/jobs: submit, list, show, cancel.
#include "head/routes.h"
#include "head/usage.h"

namespace cohort::head {
namespace {

Result<JobFilter> ParseFilter(const httplib::Request& req) {
  JobFilter f;
  if (req.has_param("state")) {
    std::string states = req.get_param_value("state");
    size_t start = 0;
    while (start <= states.size()) {
      size_t end = states.find(',', start);
      if (end == std::string::npos) end = states.size();
      std::string s = states.substr(start, end - start);
      if (!s.empty()) {
        auto st = api::ParseJobState(s);
        if (!st) return MakeError(ErrorCode::kInvalidArgument, "state: " + st.error().message, "state");
        f.states.insert(*st);
      }
      start = end + 1;
    }
  }
  if (req.has_param("user")) f.user = req.get_param_value("user");
  if (req.has_param("limit")) f.limit = COHORT_TRY(QueryIntParam(req, "limit", std::nullopt, 1, 1'000'000));
  return f;
}

}  // namespace

void RegisterJobRoutes(httplib::Server& server, Cluster& cluster) {
  server.Post("/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto spec = api::JobSpecFromJson(*body);
    if (!spec) return SendError(res, spec.error());
    auto job = cluster.Submit(std::move(*spec));
    if (!job) return SendError(res, job.error());
    SendJson(res, api::ToJson(*job), 201);
  });

  server.Get("/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
    auto filter = ParseFilter(req);
    if (!filter) return SendError(res, filter.error());
    json jobs = json::array();
    auto usage = cluster.RunningTaskUsage();
    int64_t now = NowUnixMs();
    for (const auto& j : cluster.ListJobs(*filter)) {
      json out = api::ToJson(j);
      auto u = usage.find(j.id);
      AddJobUsageJson(out, j, now, u != usage.end() ? &u->second : nullptr);
      jobs.push_back(std::move(out));
    }
    SendJson(res, json{{"jobs", std::move(jobs)}});
  });

  server.Get(R"(/v1/jobs/([^/]+))", [&](const httplib::Request& req, httplib::Response& res) {
    auto id = ParseIdParam(req.matches[1].str(), "job id");
    if (!id) return SendError(res, id.error());
    auto job = cluster.GetJob(*id);
    Reply(res, job, [&](const api::Job& j) {
      json out = api::ToJson(j);
      if (auto p = cluster.progress().Latest(j.id)) out["progress"] = ToJson(*p);
      auto usage = cluster.RunningTaskUsage();
      auto u = usage.find(j.id);
      AddJobUsageJson(out, j, NowUnixMs(), u != usage.end() ? &u->second : nullptr);
      return out;
    });
  });

  server.Post(R"(/v1/jobs/([^/]+)/cancel)", [&](const httplib::Request& req, httplib::Response& res) {
    auto id = ParseIdParam(req.matches[1].str(), "job id");
    if (!id) return SendError(res, id.error());
    auto job = cluster.Cancel(*id);
    Reply(res, job, [](const api::Job& j) { return api::ToJson(j); });
  });
}

}  // namespace cohort::head
