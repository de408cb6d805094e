// GET /v1/jobs/{id}/sweep: a sweep's (or any array's) elements ranked by the loss each last
// reported (api/sweep.h): {"array", "params", "elements": [{"task", "id", "state", "values",
// "step", "loss"}], "waiting"}, lowest loss first, then those that reported none, by index,
// then the points not started yet (PENDING, no id; the first 1,000 of "waiting").
#include <algorithm>

#include "api/job_array.h"
#include "api/sweep.h"

#include "head/routes.h"

namespace cohort::head {
namespace {

constexpr int64_t kMaxWaitingListed = 1000;

}  // namespace

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
    // The points not started yet (a throttle, a window) with the values they will run with,
    // after the others: the whole sweep, not only what runs. At most kMaxWaitingListed of
    // them; "waiting" counts them all.
    int64_t waiting = 0;
    if (!array->array_left.empty()) {
      if (auto left = api::ArrayIndexSet::Parse(array->array_left, "array_left")) {
        waiting = left->size();
        int64_t listed = 0;
        for (const api::ArrayRange& r : left->ranges()) {
          for (int64_t t = r.first; t <= r.last && listed < kMaxWaitingListed; t += r.step, ++listed) {
            json values = json::object();
            if (!array->spec.sweep.is_null()) {
              for (auto& [name, value] : api::SweepValues(array->spec.sweep, t)) values[name] = std::move(value);
            }
            list.push_back({{"task", t}, {"state", "PENDING"}, {"values", std::move(values)}});
          }
        }
      }
    }
    SendJson(res, json{{"array", *id},
                       {"params", std::move(params)},
                       {"elements", std::move(list)},
                       {"waiting", waiting}});
  }, JobScope::kOwnJob);
}

}  // namespace cohort::head
