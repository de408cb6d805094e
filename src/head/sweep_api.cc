// GET /v1/jobs/{id}/sweep: a sweep's (or any array's) elements ranked by the loss each last
// reported (api/sweep.h): {"array", "params", "elements": [{"task", "id", "state", "values",
// "step", "loss"}]}, lowest loss first, then those that reported none, by index.
#include <algorithm>

#include "head/routes.h"

namespace cohort::head {

void RegisterSweepRoutes(Router& router, Cluster& cluster) {
  router.Get(api::routes::kJobSweepPattern, Access::kViewer, [&](const httplib::Request& req, httplib::Response& res) {
    auto id = ParseIdParam(req.matches[1].str(), "job id");
    if (!id) return SendError(res, id.error());
    auto array = cluster.GetJob(*id);
    if (!array) return SendError(res, array.error());
    auto elements = cluster.ArrayElementJobs(*id);
    if (!elements) return SendError(res, elements.error());
    struct Row {
      json j;
      std::optional<double> loss;
      int64_t task = 0;
    };
    std::vector<Row> rows;
    for (const api::Job& e : *elements) {
      json row = {{"task", e.array_task_id}, {"id", e.id}, {"state", api::JobStateName(e.state)}, {"values", e.sweep_values}};
      std::optional<double> loss;
      if (auto p = cluster.progress().Latest(e.id)) {
        row["step"] = p->step;
        loss = p->loss;
        if (loss) row["loss"] = *loss;
      }
      rows.push_back({std::move(row), loss, e.array_task_id});
    }
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      if (a.loss.has_value() != b.loss.has_value()) return a.loss.has_value();
      if (a.loss && *a.loss != *b.loss) return *a.loss < *b.loss;
      return a.task < b.task;
    });
    json params = json::array();
    if (array->spec.sweep.contains("grid")) {
      for (const auto& [name, v] : array->spec.sweep["grid"].items()) params.push_back(name);
    } else if (array->spec.sweep.contains("random")) {
      for (const auto& [name, v] : array->spec.sweep["random"]["params"].items()) params.push_back(name);
    }
    json list = json::array();
    for (auto& r : rows) list.push_back(std::move(r.j));
    SendJson(res, json{{"array", *id}, {"params", std::move(params)}, {"elements", std::move(list)}});
  }, JobScope::kOwnJob);
}

}  // namespace cohort::head
