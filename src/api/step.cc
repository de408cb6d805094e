#include "api/step.h"

#include <algorithm>

#include "api/exec.h"
#include "api/view_reader.h"

namespace cohort::api {

json ToJson(const StepRequest& r) {
  return json{{"command", r.command}, {"nodes", r.nodes}, {"tasks", r.tasks}, {"gpus_per_node", r.gpus_per_node}};
}

Result<StepRequest> StepRequestFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  StepRequest out;
  out.command = COHORT_TRY(r.StringList("command", std::nullopt));
  COHORT_TRY_VOID(ValidateExecCommand(out.command));
  out.nodes = static_cast<int>(COHORT_TRY(r.Int("nodes", 0, 0, kMaxNodes)));
  out.tasks = static_cast<int>(COHORT_TRY(r.Int("tasks", 0, 0, kMaxNodes * kMaxTasksPerNode)));
  out.gpus_per_node = static_cast<int>(COHORT_TRY(r.Int("gpus_per_node", 0, 0, kMaxGpusPerNode)));
  COHORT_TRY_VOID(r.Finish());
  return out;
}

Result<std::vector<int>> PlanStep(const Job& job, const StepRequest& req) {
  if (!job.spec.is_allocation()) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "job {} is not an allocation (cohort alloc makes one): steps run only inside an allocation", job.id);
  }
  if (job.state != JobState::kRunning) {
    return Errorf(ErrorCode::kFailedPrecondition, "allocation {} is {}: a step needs it RUNNING", job.id,
                  JobStateName(job.state));
  }
  const int held_nodes = static_cast<int>(job.allocation.nodes.size());
  const int per_node = job.spec.tasks_per_node;
  if (req.nodes > held_nodes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("nodes: the step asks {} nodes; allocation {} holds {}", req.nodes, job.id, held_nodes),
                     "nodes");
  }
  const int nodes = req.nodes > 0 ? req.nodes : held_nodes;
  const int tasks = req.tasks > 0 ? req.tasks : nodes * per_node;
  if (tasks > nodes * per_node) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("tasks: the step asks {} tasks on {} node(s); allocation {} holds {} task(s) per node",
                                 tasks, nodes, job.id, per_node),
                     "tasks");
  }
  if (tasks < nodes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("tasks: the step asks {} task(s) on {} nodes; give at least one task per node", tasks,
                                 nodes),
                     "tasks");
  }
  if (req.gpus_per_node > job.spec.gpus_per_node) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("gpus: the step asks {} GPU(s) per node; allocation {} holds {} per node",
                                 req.gpus_per_node, job.id, job.spec.gpus_per_node),
                     "gpus");
  }
  std::vector<int> ranks;
  for (int i = 0; i < nodes; ++i) {
    std::vector<TaskPlacement> on_node = job.allocation.nodes[static_cast<size_t>(i)].tasks;
    std::sort(on_node.begin(), on_node.end(),
              [](const TaskPlacement& a, const TaskPlacement& b) { return a.local_rank < b.local_rank; });
    const int take = std::min<int>(tasks / nodes + (i < tasks % nodes ? 1 : 0), static_cast<int>(on_node.size()));
    for (int t = 0; t < take; ++t) ranks.push_back(on_node[static_cast<size_t>(t)].rank);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

json ToJson(const StepRecord& s) {
  json tasks = json::array();
  for (const auto& t : s.tasks) {
    json task{{"rank", t.rank}, {"node", t.node}, {"session", t.session}};
    task["exit_code"] = t.exit_code ? json(*t.exit_code) : json(nullptr);
    tasks.push_back(std::move(task));
  }
  return json{{"id", s.id}, {"command", s.command}, {"start_ms", s.start_ms}, {"end_ms", s.end_ms}, {"tasks", tasks}};
}

Result<StepRecord> StepRecordFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  StepRecord s;
  s.id = static_cast<int>(COHORT_TRY(r.Int("id", std::nullopt, 1, INT32_MAX)));
  s.command = COHORT_TRY(r.StringList("command", std::nullopt));
  s.start_ms = COHORT_TRY(r.Int("start_ms", 0, 0, INT64_MAX));
  s.end_ms = COHORT_TRY(r.Int("end_ms", 0, 0, INT64_MAX));
  s.tasks = COHORT_TRY(view_reader::List<StepTask>(r, "tasks", false, [](const json& e, const std::string& path) -> Result<StepTask> {
    auto t = COHORT_TRY(ObjectReader::Open(e, path));
    StepTask out;
    out.rank = static_cast<int>(COHORT_TRY(t.Int("rank", std::nullopt, 0, INT32_MAX)));
    out.node = COHORT_TRY(t.String("node", std::string()));
    out.session = COHORT_TRY(t.String("session", std::string(), 64));
    if (auto code = COHORT_TRY(view_reader::OptionalInt(t, "exit_code", 0, 255))) out.exit_code = static_cast<int>(*code);
    COHORT_TRY_VOID(t.Finish());
    return out;
  }));
  COHORT_TRY_VOID(r.Finish());
  return s;
}

}  // namespace cohort::api
