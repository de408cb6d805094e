#include "api/service.h"

#include "api/view_reader.h"

namespace cohort::api {

namespace vr = view_reader;

Result<ServiceSpec> ServiceSpecFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  ServiceSpec s;
  const std::string kind = COHORT_TRY(r.String("kind"));
  if (kind != "service") return FieldError("kind", "must be 'service' for `cohort serve deploy`, got '{}'", kind);
  s.name = COHORT_TRY(r.String("name"));
  if (!ValidUserName(s.name)) {
    return FieldError("name", "must be 1-64 characters of letters, digits, '.', '_' or '-', got '{}'", s.name);
  }
  s.user = COHORT_TRY(r.String("user", ""));
  s.model = COHORT_TRY(r.String("model", std::nullopt, 4096));
  if (s.model.empty()) return FieldError("model", "is empty: name a checkpoint directory or a .safetensors file");
  s.model_name = COHORT_TRY(r.String("model_name", s.name, 256));
  if (s.model_name.empty()) return FieldError("model_name", "is empty");
  s.replicas = static_cast<int>(COHORT_TRY(r.Int("replicas", 1, 1, kMaxReplicas)));
  s.gpus_per_replica = static_cast<int>(COHORT_TRY(r.Int("gpus_per_replica", 0, 0, kMaxGpusPerNode)));
  s.cpus_per_replica = static_cast<int>(COHORT_TRY(r.Int("cpus_per_replica", 1, 0, kMaxCpusPerTask)));
  s.device = COHORT_TRY(r.String("device", s.gpus_per_replica > 0 ? "cuda" : "cpu"));
  if (s.device != "cpu" && s.device != "cuda") return FieldError("device", "must be cpu or cuda, got '{}'", s.device);
  if (s.device == "cuda" && s.gpus_per_replica == 0) {
    return FieldError("device", "cuda needs gpus_per_replica >= 1");
  }
  s.command = COHORT_TRY(r.StringList("command", std::vector<std::string>{}));
  s.args = COHORT_TRY(r.StringList("args", std::vector<std::string>{}));
  for (size_t i = 0; i < s.args.size(); ++i) {
    for (const char* owned : {"--model", "--name", "--device", "--port", "--host"}) {
      if (s.args[i] == owned || s.args[i].starts_with(std::string(owned) + "=")) {
        return FieldError(fmt::format("args[{}]", i), "{} is set by the service spec", owned);
      }
    }
  }
  s.env = COHORT_TRY(r.StringMap("env"));
  s.workdir = COHORT_TRY(r.String("workdir", ""));
  s.priority = static_cast<int>(COHORT_TRY(r.Int("priority", 0, -kMaxPriority, kMaxPriority)));
  const std::string placement = COHORT_TRY(r.String("placement", "spread"));
  if (placement == "pack") {
    s.placement = Placement::kPack;
  } else if (placement != "spread") {
    return FieldError("placement", "must be 'pack' or 'spread', got '{}'", placement);
  }
  COHORT_TRY_VOID(r.Finish());
  if (s.command.empty()) return FieldError("command", "is empty: the replica's program (`cohort serve`)");
  // The replica's job spec must itself be valid (command, env, workdir).
  if (auto v = ValidateJobSpec(ReplicaJobSpec(s)); !v) return std::unexpected(v.error());
  return s;
}

json ToJson(const ServiceSpec& s) {
  return json{{"kind", "service"},
              {"name", s.name},
              {"user", s.user},
              {"model", s.model},
              {"model_name", s.model_name},
              {"replicas", s.replicas},
              {"gpus_per_replica", s.gpus_per_replica},
              {"cpus_per_replica", s.cpus_per_replica},
              {"device", s.device},
              {"command", s.command},
              {"args", s.args},
              {"env", s.env},
              {"workdir", s.workdir},
              {"priority", s.priority},
              {"placement", PlacementName(s.placement)}};
}

JobSpec ReplicaJobSpec(const ServiceSpec& s) {
  JobSpec j;
  j.name = s.name;
  j.user = s.user.empty() ? "anonymous" : s.user;
  j.command = s.command;
  j.command.push_back("--model");
  j.command.push_back(s.model);
  j.command.push_back("--name");
  j.command.push_back(s.model_name);
  j.command.push_back("--device");
  j.command.push_back(s.device);
  j.command.insert(j.command.end(), s.args.begin(), s.args.end());
  j.env = s.env;
  j.workdir = s.workdir;
  j.gpus_per_node = s.gpus_per_replica;
  j.cpus_per_task = s.cpus_per_replica;
  j.priority = s.priority;
  j.placement = s.placement;
  j.service = s.name;
  j.service_model = s.model_name;
  return j;
}

json ToJson(const ReplicaStatus& r) {
  return json{{"job", r.job},
              {"attempt", r.attempt},
              {"state", r.state},
              {"node", r.node},
              {"site", r.site},
              {"endpoint", r.endpoint},
              {"healthy", r.healthy},
              {"health", r.health},
              {"running", r.running},
              {"waiting", r.waiting},
              {"queued_tokens", r.queued_tokens},
              {"inflight_tokens", r.inflight_tokens},
              {"kv_blocks_used", r.kv_blocks_used},
              {"kv_blocks_total", r.kv_blocks_total},
              {"tokens_per_second", r.tokens_per_second},
              {"ttft_p50_seconds", r.ttft_p50_seconds},
              {"ttft_p99_seconds", r.ttft_p99_seconds},
              {"itl_p50_seconds", r.itl_p50_seconds},
              {"itl_p99_seconds", r.itl_p99_seconds},
              {"requests", r.requests},
              {"failovers", r.failovers}};
}

json ToJson(const ServiceStatus& s) {
  json replicas = json::array();
  for (const auto& r : s.replica_status) replicas.push_back(ToJson(r));
  return json{{"name", s.name},
              {"model_name", s.model_name},
              {"user", s.user},
              {"replicas", s.replicas},
              {"healthy", s.healthy},
              {"replica_status", replicas}};
}

namespace {

Result<ReplicaStatus> ReplicaStatusFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  ReplicaStatus s;
  s.job = COHORT_TRY(r.Int("job", std::nullopt, 1, INT64_MAX));
  s.attempt = static_cast<int>(COHORT_TRY(r.Int("attempt", 0, 0, INT32_MAX)));
  s.state = COHORT_TRY(r.String("state"));
  s.node = COHORT_TRY(r.String("node", ""));
  s.site = COHORT_TRY(r.String("site", ""));
  s.endpoint = COHORT_TRY(r.String("endpoint", ""));
  s.healthy = COHORT_TRY(r.Bool("healthy", false));
  s.health = COHORT_TRY(r.String("health", ""));
  s.running = static_cast<int>(COHORT_TRY(r.Int("running", 0, 0, INT32_MAX)));
  s.waiting = static_cast<int>(COHORT_TRY(r.Int("waiting", 0, 0, INT32_MAX)));
  s.queued_tokens = COHORT_TRY(r.Int("queued_tokens", 0, 0, INT64_MAX));
  s.inflight_tokens = COHORT_TRY(r.Int("inflight_tokens", 0, 0, INT64_MAX));
  s.kv_blocks_used = static_cast<int>(COHORT_TRY(r.Int("kv_blocks_used", 0, 0, INT32_MAX)));
  s.kv_blocks_total = static_cast<int>(COHORT_TRY(r.Int("kv_blocks_total", 0, 0, INT32_MAX)));
  s.tokens_per_second = COHORT_TRY(r.Double("tokens_per_second", 0, 0, 1e12));
  s.ttft_p50_seconds = COHORT_TRY(r.Double("ttft_p50_seconds", 0, 0, 1e12));
  s.ttft_p99_seconds = COHORT_TRY(r.Double("ttft_p99_seconds", 0, 0, 1e12));
  s.itl_p50_seconds = COHORT_TRY(r.Double("itl_p50_seconds", 0, 0, 1e12));
  s.itl_p99_seconds = COHORT_TRY(r.Double("itl_p99_seconds", 0, 0, 1e12));
  s.requests = COHORT_TRY(r.Int("requests", 0, 0, INT64_MAX));
  s.failovers = COHORT_TRY(r.Int("failovers", 0, 0, INT64_MAX));
  return s;
}

}  // namespace

Result<ServiceStatus> ServiceStatusFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  ServiceStatus s;
  s.name = COHORT_TRY(r.String("name"));
  s.model_name = COHORT_TRY(r.String("model_name", ""));
  s.user = COHORT_TRY(r.String("user", ""));
  s.replicas = static_cast<int>(COHORT_TRY(r.Int("replicas", 0, 0, kMaxReplicas)));
  s.healthy = static_cast<int>(COHORT_TRY(r.Int("healthy", 0, 0, kMaxReplicas)));
  s.replica_status = COHORT_TRY(vr::List<ReplicaStatus>(r, "replica_status", false, ReplicaStatusFromJson));
  return s;
}

std::optional<std::string> MissingAttemptRecord(const Job& job, int attempt) {
  const auto& h = job.history;
  for (const auto& r : h) {
    if (r.attempt == attempt) return std::nullopt;
  }
  // The attempts with a record, as runs: "0, 71-119".
  std::string readable;
  for (size_t i = 0; i < h.size();) {
    size_t j = i;
    while (j + 1 < h.size() && h[j + 1].attempt == h[j].attempt + 1) ++j;
    if (!readable.empty()) readable += ", ";
    readable += j == i ? std::to_string(h[i].attempt) : fmt::format("{}-{}", h[i].attempt, h[j].attempt);
    i = j + 1;
  }
  if (readable.empty()) readable = "none yet";
  // The oldest record holds the attempts up to the next record's when they were folded.
  if (job.spec.is_service() && h.size() >= 2 && h[0].attempt < attempt && attempt < h[1].attempt) {
    return fmt::format("job {} attempt {}'s record was folded: a service replica keeps the records of its newest "
                       "{} attempts only, and attempts {}-{} are one record now, read as attempt {} (its logs are "
                       "that attempt's); attempts that can be read: {}",
                       job.id, attempt, h.size(), h[0].attempt, h[1].attempt - 1, h[0].attempt, readable);
  }
  return fmt::format("job {} has no attempt {} that started (it is {}; attempts that can be read: {})", job.id,
                     attempt, JobStateName(job.state), readable);
}

}  // namespace cohort::api
