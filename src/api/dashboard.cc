// Codecs of the dashboard view (dashboard.h).
#include "api/dashboard.h"

#include <climits>

#include "api/view_reader.h"

namespace cohort::api {

namespace vr = view_reader;

json ToJson(const ProgressPoint& p) {
  json j = {{"time_ms", p.time_ms}, {"attempt", p.attempt}, {"rank", p.rank}, {"step", p.step}};
  if (p.loss) j["loss"] = *p.loss;
  if (p.samples_per_s) j["samples_per_s"] = *p.samples_per_s;
  if (p.tokens_per_s) j["tokens_per_s"] = *p.tokens_per_s;
  if (p.checkpoint_step) j["checkpoint_step"] = *p.checkpoint_step;
  if (p.total_steps) j["total_steps"] = *p.total_steps;
  if (p.val_loss) j["val_loss"] = *p.val_loss;
  return j;
}

Result<ProgressPoint> ProgressPointFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  ProgressPoint p;
  p.time_ms = COHORT_TRY(r.Int("time_ms", std::nullopt, 0, INT64_MAX));
  p.attempt = static_cast<int>(COHORT_TRY(r.Int("attempt", std::nullopt, 0, INT_MAX)));
  p.rank = static_cast<int>(COHORT_TRY(r.Int("rank", std::nullopt, 0, INT_MAX)));
  p.step = COHORT_TRY(r.Int("step", std::nullopt, 0, INT64_MAX));
  p.loss = COHORT_TRY(vr::OptionalDouble(r, "loss", -1e300, 1e300));
  p.samples_per_s = COHORT_TRY(vr::OptionalDouble(r, "samples_per_s", 0, 1e300));
  p.tokens_per_s = COHORT_TRY(vr::OptionalDouble(r, "tokens_per_s", 0, 1e300));
  p.checkpoint_step = COHORT_TRY(vr::OptionalInt(r, "checkpoint_step", 0, INT64_MAX));
  p.total_steps = COHORT_TRY(vr::OptionalInt(r, "total_steps", 1, INT64_MAX));
  p.val_loss = COHORT_TRY(vr::OptionalDouble(r, "val_loss", -1e300, 1e300));
  return p;
}

json ToJson(const LossCurve& c) {
  json pts = json::array();
  for (const auto& p : c.points) pts.push_back(json::array({p.step, p.loss}));
  return json{{"rank", c.rank}, {"total", c.total}, {"points", std::move(pts)}};
}

Result<LossCurve> LossCurveFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  LossCurve c;
  c.rank = static_cast<int>(COHORT_TRY(r.Int("rank", std::nullopt, 0, INT_MAX)));
  c.total = COHORT_TRY(r.Int("total", std::nullopt, 0, INT64_MAX));
  c.points = COHORT_TRY(vr::List<LossPoint>(r, "points", true, [](const json& e, const std::string& name) -> Result<LossPoint> {
    if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number()) {
      return FieldError(name, "must be a pair [step, loss] of an integer and a number");
    }
    return LossPoint{e[0].get<int64_t>(), e[1].get<double>()};
  }));
  return c;
}

json ToJson(const DashboardJob& d) {
  json j = ToJson(d.status);
  j.erase("exits");
  j.erase("history");
  // A sharing job keeps its tasks: their slices are its parts of each GPU (`cohort top`
  // and the page count a job's GPUs and each GPU's holders by them).
  const bool sharing = d.status.job.spec.shares_gpu();
  for (auto& na : j["allocation"]["nodes"]) {
    if (!sharing) na.erase("tasks");
    na.erase("version");
  }
  if (d.progress) j["progress"] = ToJson(*d.progress);
  if (d.loss) j["loss"] = ToJson(*d.loss);
  return j;
}

Result<DashboardJob> DashboardJobFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  DashboardJob d;
  d.status = COHORT_TRY(JobStatusFromJson(j, path));
  if (const json* p = r.Raw("progress")) d.progress = COHORT_TRY(ProgressPointFromJson(*p, r.FieldName("progress")));
  if (const json* l = r.Raw("loss")) d.loss = COHORT_TRY(LossCurveFromJson(*l, r.FieldName("loss")));
  return d;
}

json ToJson(const Dashboard& d) {
  const DashboardSummary& s = d.summary;
  json nodes = json::array();
  for (const auto& n : d.nodes) nodes.push_back(ToJson(n));
  auto jobs = [](const std::vector<DashboardJob>& list) {
    json a = json::array();
    for (const auto& j : list) a.push_back(ToJson(j));
    return a;
  };
  return json{{"time_ms", d.time_ms},
              {"summary",
               {{"nodes", s.nodes},
                {"nodes_up", s.nodes_up},
                {"gpus", s.gpus},
                {"gpus_allocated", s.gpus_allocated},
                {"unhealthy_gpus", s.unhealthy_gpus},
                {"pending", s.pending},
                {"running", s.running}}},
              {"nodes", std::move(nodes)},
              {"queue", jobs(d.queue)},
              {"running", jobs(d.running)},
              {"recent", jobs(d.recent)}};
}

Result<Dashboard> DashboardFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  Dashboard d;
  d.time_ms = COHORT_TRY(r.Int("time_ms", std::nullopt, 0, INT64_MAX));
  const json* summary = r.Raw("summary");
  if (!summary) return FieldError("summary", "is required");
  auto s = COHORT_TRY(ObjectReader::Open(*summary, "summary"));
  for (auto [key, field] : {std::pair{"nodes", &d.summary.nodes}, std::pair{"nodes_up", &d.summary.nodes_up},
                            std::pair{"gpus", &d.summary.gpus}, std::pair{"gpus_allocated", &d.summary.gpus_allocated},
                            std::pair{"unhealthy_gpus", &d.summary.unhealthy_gpus},
                            std::pair{"pending", &d.summary.pending}, std::pair{"running", &d.summary.running}}) {
    *field = COHORT_TRY(s.Int(key, std::nullopt, 0, INT64_MAX));
  }
  d.nodes = COHORT_TRY(vr::List<NodeStatus>(r, "nodes", true, [](const json& e, const std::string& name) {
    return NodeStatusFromJson(e, name);
  }));
  auto jobs = [&](const char* key) {
    return vr::List<DashboardJob>(r, key, true, [](const json& e, const std::string& name) {
      return DashboardJobFromJson(e, name);
    });
  };
  d.queue = COHORT_TRY(jobs("queue"));
  d.running = COHORT_TRY(jobs("running"));
  d.recent = COHORT_TRY(jobs("recent"));
  return d;
}

}  // namespace cohort::api
