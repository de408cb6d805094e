// Codecs of the views in views.h.
#include "api/views.h"

#include <climits>

#include "api/view_reader.h"

namespace cohort::api {

namespace vr = view_reader;

json ToJson(const NodeStatus& s) {
  json j = ToJson(s.node);
  j["display_state"] = s.display_state;
  j["gpus_allocated"] = s.gpus_allocated;
  j["cpus_allocated"] = s.cpus_allocated;
  j["jobs"] = s.jobs;
  j["heartbeat_age_ms"] = s.heartbeat_age_ms;
  j["unhealthy_gpus"] = s.unhealthy_gpus;
  if (!s.gpu_util_history.empty()) {
    json h = json::array();
    for (const auto& u : s.gpu_util_history) h.push_back(json::array({u.time_ms, u.utilization}));
    j["gpu_util_history"] = std::move(h);
  }
  return j;
}

Result<NodeStatus> NodeStatusFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  NodeStatus s;
  s.node = COHORT_TRY(vr::Record(NodeFromJson(j), path));
  s.display_state = COHORT_TRY(r.String("display_state"));
  if (s.display_state != "UP" && s.display_state != "DOWN" && s.display_state != "UNREACHABLE" &&
      s.display_state != "DRAINING" && s.display_state != "DRAINED") {
    return FieldError(r.FieldName("display_state"), "must be UP, DOWN, UNREACHABLE, DRAINING or DRAINED, got '{}'",
                      s.display_state);
  }
  s.gpus_allocated = static_cast<int>(COHORT_TRY(r.Int("gpus_allocated", std::nullopt, 0, kMaxGpusPerNode)));
  s.cpus_allocated = static_cast<int>(COHORT_TRY(r.Int("cpus_allocated", std::nullopt, 0, INT_MAX)));
  s.jobs = COHORT_TRY(vr::List<JobId>(r, "jobs", true, [](const json& e, const std::string& name) -> Result<JobId> {
    if (!e.is_number_integer() || e.get<int64_t>() < 1) return FieldError(name, "must be a job id (a positive integer)");
    return e.get<JobId>();
  }));
  s.heartbeat_age_ms = COHORT_TRY(r.Int("heartbeat_age_ms", std::nullopt, -1, INT64_MAX));
  s.unhealthy_gpus = static_cast<int>(COHORT_TRY(r.Int("unhealthy_gpus", std::nullopt, 0, kMaxGpusPerNode)));
  if (r.Has("gpu_util_history")) {
    s.gpu_util_history = COHORT_TRY(vr::List<UtilSample>(r, "gpu_util_history", true,
                                                         [](const json& e, const std::string& name) -> Result<UtilSample> {
      if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number() || e[1].get<double>() < 0 ||
          e[1].get<double>() > 1) {
        return FieldError(name, "must be [time_ms, utilization 0..1]");
      }
      return UtilSample{e[0].get<int64_t>(), e[1].get<double>()};
    }));
  }
  return s;
}

json NodeListToJson(const std::vector<NodeStatus>& nodes) {
  json list = json::array();
  for (const auto& n : nodes) list.push_back(ToJson(n));
  return json{{"nodes", std::move(list)}};
}

Result<std::vector<NodeStatus>> NodeListFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  return vr::List<NodeStatus>(r, "nodes", true, [](const json& e, const std::string& name) {
    return NodeStatusFromJson(e, name);
  });
}

json ToJson(const TaskUsage& t) {
  json j{{"rank", t.rank},       {"node", t.node},
         {"cpu_seconds", t.cpu_seconds}, {"rss_bytes", t.rss_bytes},
         {"gpus", t.gpus},       {"gpu_memory_bytes", t.gpu_memory_bytes}};
  if (!t.gpu_memory_warning.empty()) j["gpu_memory_warning"] = t.gpu_memory_warning;
  if (!t.cpu_list.empty()) j["cpu_list"] = t.cpu_list;
  return j;
}

Result<TaskUsage> TaskUsageFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  TaskUsage t;
  t.rank = static_cast<int>(COHORT_TRY(r.Int("rank", std::nullopt, 0, INT_MAX)));
  t.node = COHORT_TRY(r.String("node"));
  t.cpu_seconds = COHORT_TRY(r.Double("cpu_seconds", std::nullopt, 0, 1e300));
  t.rss_bytes = COHORT_TRY(r.Int("rss_bytes", std::nullopt, 0, INT64_MAX));
  t.gpus = COHORT_TRY(vr::IntList(r, "gpus", 0, kMaxGpusPerNode - 1, kMaxGpusPerNode));
  t.gpu_memory_bytes = COHORT_TRY(r.Int("gpu_memory_bytes", 0, 0, INT64_MAX));
  t.gpu_memory_warning = COHORT_TRY(r.String("gpu_memory_warning", ""));
  t.cpu_list = COHORT_TRY(r.String("cpu_list", ""));
  return t;
}

json ToJson(const JobStatus& s) {
  json j = ToJson(s.job);
  j["gpu_seconds"] = s.gpu_seconds;
  if (s.tasks_usage) {
    json list = json::array();
    for (const auto& t : *s.tasks_usage) list.push_back(ToJson(t));
    j["tasks_usage"] = std::move(list);
  }
  if (s.progress_eta) j["progress_eta"] = ToJson(*s.progress_eta);
  return j;
}

Result<JobStatus> JobStatusFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  JobStatus s;
  s.job = COHORT_TRY(vr::Record(JobFromJson(j), path));
  s.gpu_seconds = COHORT_TRY(r.Double("gpu_seconds", std::nullopt, 0, 1e300));
  if (r.Has("tasks_usage")) {
    s.tasks_usage = COHORT_TRY(vr::List<TaskUsage>(r, "tasks_usage", true, [](const json& e, const std::string& name) {
      return TaskUsageFromJson(e, name);
    }));
  }
  if (const json* e = r.Raw("progress_eta")) s.progress_eta = COHORT_TRY(ProgressEtaFromJson(*e, r.FieldName("progress_eta")));
  return s;
}

}  // namespace cohort::api
