// JSON codecs for the wire types. Inputs from outside (job specs, registrations,
// heartbeats, the head's heartbeat replies) go through ObjectReader, which checks the type
// and range of every field it reads. Job specs, which people write, also refuse unknown
// fields (a typo). The agent protocol (registration, heartbeat, the head's reply with its
// timing and launches) ignores them:
// another Cohort version sent them during a rolling upgrade (UnknownFields::kIgnore;
// docs/ARCHITECTURE.md, "Wire compatibility"). Records Cohort wrote itself (stored jobs and nodes, replies read
// by the CLI) are decoded with nlohmann's typed getters; a malformed one becomes an Error,
// never an exception.
#include <algorithm>
#include <csignal>
#include <cctype>

#include "api/container_spec.h"
#include "api/job_array.h"
#include "api/job_dependency.h"
#include "api/job_name.h"
#include "api/output_pattern.h"
#include "api/sweep.h"
#include "common/clock.h"
#include "api/spec_limits.h"
#include "api/view_reader.h"
#include "api/gpu_request.h"
#include "api/gpu_spec.h"
#include "api/types.h"
#include "api/step.h"
#include "common/http.h"

namespace cohort::api {
namespace {

using view_reader::IntList;

bool ValidName(std::string_view s, size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

bool ValidEnvName(std::string_view s) {
  if (s.empty() || s.size() > 256 || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Limits on what an agent reports. A GPU's name and UUID are NVML's (under 100 bytes);
// a node runs at most kMaxReportedTasks tasks at once.
constexpr size_t kMaxGpuNameBytes = 256;
constexpr size_t kMaxReportedTasks = 65536;
// A task's error ("cannot execute '...': ...") is kept to its first 4 KiB: a head that
// refused a longer one would refuse the agent's heartbeats, and the node would go DOWN.
constexpr size_t kMaxTaskErrorBytes = 4096;
// A task's CPU list ("0-3,8"): every CPU of an 8192-CPU node, singly, fits.
constexpr size_t kMaxCpuListBytes = 48 * 1024;

// `text` cut to at most `max_bytes` bytes at a UTF-8 character boundary, "..." marking a cut.
std::string CutText(std::string text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes - 3;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text + "...";
}

// The agent protocol's objects (a registration and its GPUs, a heartbeat and its task and
// GPU reports, the head's timing) end with Finish(UnknownFields::kIgnore) where a job
// spec's decoder calls Finish(): their unknown fields are dropped, not refused. Their sender is another
// Cohort version during a rolling upgrade (a newer agent's new report field, as cpu_list
// was; a newer head's timing), and refusing them would cut the node off: its heartbeats
// fail and it goes DOWN with its jobs. Kubernetes' API server likewise drops unknown fields
// unless the client asks for strict validation, which kubectl does for what people write;
// the CLI's views (views.h) read the head's replies the same way. Dropped means never
// stored or echoed: the decoders copy only the fields they read into typed values, and no
// message names an unknown field. Wrong types, out-of-range values and missing required
// fields are still refused by the reads, each naming its field.

template <typename F>
auto Guard(std::string_view what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const json::exception& e) {
    return Errorf(ErrorCode::kInternal, "malformed {} record: {}", what, e.what());
  }
}

Result<std::vector<Gpu>> GpusFromJson(ObjectReader& r, std::string_view key) {
  const json* v = r.Raw(key);
  std::vector<Gpu> out;
  if (!v) return out;
  if (!v->is_array() || v->size() > size_t(kMaxGpusPerNode)) {
    return FieldError(r.FieldName(key), "must be an array of at most {} GPUs", kMaxGpusPerNode);
  }
  for (size_t i = 0; i < v->size(); ++i) {
    auto g = COHORT_TRY(ObjectReader::Open((*v)[i], fmt::format("{}[{}]", r.FieldName(key), i)));
    Gpu gpu;
    gpu.index = static_cast<int>(COHORT_TRY(g.Int("index", std::nullopt, 0, kMaxGpusPerNode - 1)));
    gpu.name = COHORT_TRY(g.String("name", "", kMaxGpuNameBytes));
    gpu.uuid = COHORT_TRY(g.String("uuid", "", kMaxGpuNameBytes));
    gpu.memory_bytes = COHORT_TRY(g.Int("memory_bytes", 0, 0, int64_t(1) << 50));
    gpu.simulated = COHORT_TRY(g.Bool("simulated", false));
    gpu.mig_profile = COHORT_TRY(g.String("mig_profile", "", 32));
    if (!gpu.mig_profile.empty() && !IsMigProfile(gpu.mig_profile)) {
      return FieldError(g.FieldName("mig_profile"), "'{}' is not a MIG profile name (e.g. 1g.10gb)", gpu.mig_profile);
    }
    gpu.mig_parent = static_cast<int>(COHORT_TRY(g.Int("mig_parent", -1, -1, kMaxGpusPerNode - 1)));
    gpu.nvlink_island = static_cast<int>(COHORT_TRY(g.Int("nvlink_island", -1, -1, kMaxGpusPerNode - 1)));
    gpu.pcie_switch = static_cast<int>(COHORT_TRY(g.Int("pcie_switch", -1, -1, kMaxGpusPerNode - 1)));
    COHORT_TRY_VOID(g.Finish(UnknownFields::kIgnore));
    if (gpu.index != static_cast<int>(i)) {
      return FieldError(g.FieldName("index"), "GPUs must be listed in index order 0..n-1");
    }
    out.push_back(std::move(gpu));
  }
  return out;
}

template <typename T>
std::optional<T> OptionalNumber(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<T>();
}

GpuTelemetry TelemetryFromStored(const json& j) {
  GpuTelemetry t;
  t.utilization = OptionalNumber<double>(j, "utilization");
  t.memory_used_bytes = OptionalNumber<int64_t>(j, "memory_used_bytes");
  t.memory_total_bytes = OptionalNumber<int64_t>(j, "memory_total_bytes");
  t.temperature_celsius = OptionalNumber<double>(j, "temperature_celsius");
  t.power_watts = OptionalNumber<double>(j, "power_watts");
  t.sm_clock_hz = OptionalNumber<double>(j, "sm_clock_hz");
  t.updated_ms = j.value("updated_ms", int64_t(0));
  return t;
}

Gpu GpuFromStored(const json& j) {
  Gpu g;
  g.index = j.at("index").get<int>();
  g.name = j.value("name", "");
  g.uuid = j.value("uuid", "");
  g.memory_bytes = j.value("memory_bytes", int64_t(0));
  g.simulated = j.value("simulated", false);
  g.healthy = j.value("healthy", true);
  g.health_reason = j.value("health_reason", "");
  g.mig_profile = j.value("mig_profile", "");
  g.mig_parent = j.value("mig_parent", -1);
  g.nvlink_island = j.value("nvlink_island", -1);
  g.pcie_switch = j.value("pcie_switch", -1);
  if (auto it = j.find("telemetry"); it != j.end() && it->is_object()) g.telemetry = TelemetryFromStored(*it);
  return g;
}

// Each reading is optional (absent or null: unknown) and range-checked.
Result<GpuTelemetry> TelemetryFromReport(ObjectReader& r) {
  GpuTelemetry t;
  auto dbl = [&](const char* key, double max) -> Result<std::optional<double>> {
    if (!r.Has(key)) {
      (void)r.Raw(key);
      return std::optional<double>();
    }
    return std::optional<double>(COHORT_TRY(r.Double(key, std::nullopt, 0, max)));
  };
  auto i64 = [&](const char* key) -> Result<std::optional<int64_t>> {
    if (!r.Has(key)) {
      (void)r.Raw(key);
      return std::optional<int64_t>();
    }
    return std::optional<int64_t>(COHORT_TRY(r.Int(key, std::nullopt, 0, int64_t(1) << 50)));
  };
  t.utilization = COHORT_TRY(dbl("utilization", 1.0));
  t.memory_used_bytes = COHORT_TRY(i64("memory_used_bytes"));
  t.memory_total_bytes = COHORT_TRY(i64("memory_total_bytes"));
  t.temperature_celsius = COHORT_TRY(dbl("temperature_celsius", 1000));
  t.power_watts = COHORT_TRY(dbl("power_watts", 100'000));
  t.sm_clock_hz = COHORT_TRY(dbl("sm_clock_hz", 1e11));
  return t;
}

}  // namespace

bool ValidUserName(std::string_view name) { return ValidName(name, 64); }

std::string_view PlacementName(Placement p) { return p == Placement::kPack ? "pack" : "spread"; }

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending: return "PENDING";
    case JobState::kRunning: return "RUNNING";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
    case JobState::kTimeout: return "TIMEOUT";
  }
  return "UNKNOWN";
}

std::string_view NodeStateName(NodeState s) { return s == NodeState::kUp ? "UP" : "DOWN"; }

Result<JobState> ParseJobState(std::string_view s) {
  std::string up(s);
  for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (JobState st : {JobState::kPending, JobState::kRunning, JobState::kSucceeded,
                      JobState::kFailed, JobState::kCancelled, JobState::kTimeout}) {
    if (JobStateName(st) == up) return st;
  }
  return Errorf(ErrorCode::kInvalidArgument,
                "unknown job state '{}' (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT)", s);
}

bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled ||
         s == JobState::kTimeout;
}

int Job::world_size() const {
  if (allocation.nodes.empty()) return spec.world_size();
  return static_cast<int>(allocation.nodes.size()) * spec.tasks_per_node;
}

bool Job::HasExit(int rank) const {
  return std::any_of(exits.begin(), exits.end(), [&](const TaskExit& e) { return e.rank == rank; });
}

bool IsReservedEnvName(std::string_view name) {
  static constexpr std::string_view kReserved[] = {
      "RANK",        "WORLD_SIZE",           "LOCAL_RANK", "LOCAL_WORLD_SIZE",
      "NODE_RANK",   "GROUP_RANK",           "MASTER_ADDR", "MASTER_PORT",
      "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_RESTART_COUNT"};
  if (name.starts_with("COHORT_")) return true;
  return std::find(std::begin(kReserved), std::end(kReserved), name) != std::end(kReserved);
}

// ---- JobSpec ----

json ToJson(const JobSpec& s) {
  json j{{"name", s.name},
              {"user", s.user},
              {"command", s.command},
              {"env", s.env},
              {"workdir", s.workdir},
              {"nodes", s.nodes},
              {"min_nodes", s.min_nodes},
              {"tasks_per_node", s.tasks_per_node},
              {"gpus_per_node", s.gpus_per_node},
              {"cpus_per_task", s.cpus_per_task},
              {"priority", s.priority},
              {"placement", PlacementName(s.placement)},
              {"max_restarts", s.max_restarts},
              {"time_limit_s", s.time_limit_s},
              {"progress_timeout_s", s.progress_timeout_s},
              {"checkpoint_signal", s.checkpoint_signal},
              {"team", s.team}};
  // Written only when declared, so specs without them read and dump as before.
  if (s.tensor_group_size > 0) j["tensor_group_size"] = s.tensor_group_size;
  if (s.checkpoint_before_limit_s > 0) j["checkpoint_before_limit_s"] = s.checkpoint_before_limit_s;
  if (s.begin_ms > 0) j["begin_ms"] = s.begin_ms;
  if (!s.output.empty()) j["output"] = s.output;
  if (!s.error.empty()) j["error"] = s.error;
  if (!s.open_mode.empty()) j["open_mode"] = s.open_mode;
  if (s.umask >= 0) j["umask"] = fmt::format("{:04o}", s.umask);
  if (!s.nodelist.empty()) j["nodelist"] = s.nodelist;
  if (!s.exclude.empty()) j["exclude"] = s.exclude;
  if (!s.constraint.empty()) j["constraint"] = s.constraint;
  if (s.mem_per_node_mb > 0) j["mem_per_node_mb"] = s.mem_per_node_mb;
  if (s.container.enabled()) j["container"] = ToJson(s.container);
  if (s.is_array()) j["array"] = s.array;
  if (!s.dependency.empty()) j["dependency"] = s.dependency;
  if (s.kill_on_invalid_dep) j["kill_on_invalid_dep"] = true;
  if (!s.sweep.is_null()) j["sweep"] = s.sweep;
  WriteGpuSpecFields(s, j);
  if (s.is_service()) {
    j["kind"] = "service";
    j["service"] = s.service;
    j["service_model"] = s.service_model;
  }
  if (s.is_allocation()) j["kind"] = "allocation";
  if (!s.script.empty()) j["script"] = s.script;
  return j;
}

namespace {
constexpr std::pair<const char*, int> kCheckpointSignals[] = {
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"INT", SIGINT}, {"TERM", SIGTERM}};
}  // namespace

int CheckpointSignalNumber(const std::string& name) {
  for (const auto& [n, num] : kCheckpointSignals) {
    if (name == n) return num;
  }
  return 0;
}

// An allocation (JobSpec::allocation) holds resources and runs nothing of its own: what a
// batch job may ask that makes no sense for one is refused, naming the field.
// JobSpec::umask from its wire text: 1 to 4 octal digits, as umask prints them.
static Result<int> ParseUmask(const json& u) {
  const std::string text = u.is_string() ? u.get<std::string>() : u.dump();
  const bool octal = u.is_string() && !text.empty() && text.size() <= 4 &&
                     text.find_first_not_of("01234567") == std::string::npos;
  if (!octal) {
    return FieldError("umask", "must be octal digits as umask prints them, in quotes (\"0022\", \"0077\"), got {}",
                      u.dump());
  }
  const int v = std::stoi(text, nullptr, 8);
  if (v > 0777) return FieldError("umask", "must be at most 0777, got {}", text);
  return v;
}

// A batch script (JobSpec::script): what its first line and bytes must be, as sbatch checks.
static Result<void> CheckBatchScript(const std::string& script) {
  if (!script.starts_with("#!")) {
    return FieldError("script", "does not look like a batch script: its first line must start with #! and the "
                                "path of an interpreter, e.g. #!/bin/bash");
  }
  if (auto nul = script.find('\0'); nul != std::string::npos) {
    return FieldError("script", "has a NUL byte at offset {}: a batch script is text", nul);
  }
  if (auto crlf = script.find("\r\n"); crlf != std::string::npos) {
    const size_t line = 1 + static_cast<size_t>(std::count(script.begin(), script.begin() + crlf, '\n'));
    return FieldError("script", "has DOS line breaks (CR LF, first on line {}), which the interpreter would take as "
                                "part of each line: convert it with dos2unix",
                      line);
  }
  return {};
}

static Result<void> CheckAllocationSpec(const JobSpec& s) {
  if (!s.script.empty()) COHORT_TRY_VOID(CheckBatchScript(s.script));
  if (!s.command.empty() && s.script.empty()) {
    return FieldError("command", "an allocation runs no command of its own (cohort alloc -- CMD runs CMD on the "
                                 "submitting side; steps run on the nodes), got {} argument(s)",
                      s.command.size());
  }
  if (s.is_array() && s.script.empty()) {
    return FieldError("array", "an allocation without a batch script cannot be a job array");
  }
  if (s.max_restarts != 0) return FieldError("max_restarts", "an allocation is never restarted, got {}", s.max_restarts);
  if (s.min_nodes != 0) return FieldError("min_nodes", "an allocation is not elastic, got {}", s.min_nodes);
  if (s.container.enabled()) return FieldError("container", "an allocation cannot run in a container");
  if (s.progress_timeout_s != 0) return FieldError("progress_timeout_s", "an allocation reports no progress");
  if (!s.checkpoint_signal.empty()) return FieldError("checkpoint_signal", "an allocation has no checkpoints");
  if (s.checkpoint_before_limit_s != 0) {
    return FieldError("checkpoint_before_limit_s", "an allocation has no checkpoints");
  }
  for (const auto& [field, value] : {std::pair{"output", &s.output}, std::pair{"error", &s.error}}) {
    if (!value->empty() && s.script.empty()) {
      return FieldError(field, "an allocation runs no command of its own to write '{}'; its steps' output goes to "
                               "the allocation's shell", *value);
    }
  }
  return {};
}

// A seconds field given as a duration ("time_limit_s: 2h", what the flag takes): the error
// says the number of seconds to write.
static Result<void> RefuseDurationText(const json& j, const char* field, const char* flag) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) return {};
  auto ms = ParseDurationMs(it->get<std::string>(), field);
  if (!ms || *ms % 1000 != 0) return {};  // the reader's own "must be an integer"
  return FieldError(field, "is whole seconds, got \"{}\": write {} (the {} flag takes a duration such as 2h)",
                    it->get<std::string>(), *ms / 1000, flag);
}

// The spec's fields and ValidateJobSpec, without CheckSpecFitsNodes: how a stored job's
// spec is read back.
static Result<JobSpec> DecodeJobSpec(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  JobSpec s;
  // Only an allocation (kind, read below) may leave the command out.
  const auto kind_it = j.find("kind");
  const bool allocation = kind_it != j.end() && kind_it->is_string() && kind_it->get<std::string>() == "allocation";
  s.command = COHORT_TRY(r.StringList("command", allocation ? std::optional(std::vector<std::string>{}) : std::nullopt));
  s.name = COHORT_TRY(r.String("name", ""));
  s.user = COHORT_TRY(r.String("user", "anonymous"));
  s.env = COHORT_TRY(r.StringMap("env"));
  s.workdir = COHORT_TRY(r.String("workdir", ""));
  s.script = COHORT_TRY(r.String("script", "", kMaxScriptBytes));
  if (const json* u = r.Raw("umask")) s.umask = COHORT_TRY(ParseUmask(*u));
  s.output = COHORT_TRY(r.String("output", ""));
  s.error = COHORT_TRY(r.String("error", ""));
  s.open_mode = COHORT_TRY(r.String("open_mode", ""));
  // Given but empty is a mistake (a flag's value lost in the shell), not "no file".
  for (const char* field : {"output", "error", "open_mode"}) {
    if (auto it = j.find(field); it != j.end() && it->is_string() && it->get<std::string>().empty()) {
      return FieldError(field, "is empty: {}, or leave it out",
                        std::string_view(field) == "open_mode" ? "give 'append' or 'truncate'" : "give a file path");
    }
  }
  s.nodes = static_cast<int>(COHORT_TRY(r.Int("nodes", 1, 1, kMaxNodes)));
  s.min_nodes = static_cast<int>(COHORT_TRY(r.Int("min_nodes", 0, 0, kMaxNodes)));
  if (s.min_nodes > s.nodes) {
    return FieldError("min_nodes", "must be at most nodes ({}), got {}", s.nodes, s.min_nodes);
  }
  s.tasks_per_node = static_cast<int>(COHORT_TRY(r.Int("tasks_per_node", 1, 1, kMaxTasksPerNode)));
  s.tensor_group_size =
      static_cast<int>(COHORT_TRY(r.Int("tensor_group_size", 0, 0, kMaxTasksPerNode)));
  s.gpus_per_node = static_cast<int>(COHORT_TRY(r.Int("gpus_per_node", 0, 0, kMaxGpusPerNode)));
  s.cpus_per_task = static_cast<int>(COHORT_TRY(r.Int("cpus_per_task", 1, 0, kMaxCpusPerTask)));
  COHORT_TRY_VOID(ReadGpuSpecFields(r, s));
  s.priority = static_cast<int>(COHORT_TRY(r.Int("priority", 0, -kMaxPriority, kMaxPriority)));
  std::string placement = COHORT_TRY(r.String("placement", "pack"));
  if (placement == "pack") {
    s.placement = Placement::kPack;
  } else if (placement == "spread") {
    s.placement = Placement::kSpread;
  } else {
    return FieldError("placement", "must be 'pack' or 'spread', got '{}'", placement);
  }
  s.max_restarts = static_cast<int>(COHORT_TRY(r.Int("max_restarts", 0, 0, kMaxRestarts)));
  COHORT_TRY_VOID(RefuseDurationText(j, "time_limit_s", "-t/--time-limit"));
  COHORT_TRY_VOID(RefuseDurationText(j, "progress_timeout_s", "--progress-timeout"));
  s.time_limit_s = COHORT_TRY(r.Int("time_limit_s", 0, 0, kMaxTimeLimitS));
  s.progress_timeout_s = COHORT_TRY(r.Int("progress_timeout_s", 0, 0, kMaxProgressTimeoutS));
  s.checkpoint_signal = COHORT_TRY(r.String("checkpoint_signal", ""));
  if (s.checkpoint_signal.starts_with("SIG")) s.checkpoint_signal.erase(0, 3);
  if (!s.checkpoint_signal.empty() && CheckpointSignalNumber(s.checkpoint_signal) == 0) {
    return FieldError("checkpoint_signal", "must be one of USR1, USR2, HUP, INT, TERM (or empty), got '{}'",
                      s.checkpoint_signal);
  }
  COHORT_TRY_VOID(RefuseDurationText(j, "checkpoint_before_limit_s", "--signal SIG@SECONDS"));
  s.checkpoint_before_limit_s = COHORT_TRY(r.Int("checkpoint_before_limit_s", 0, 0, kMaxTimeLimitS));
  if (auto it = j.find("begin_ms"); it != j.end() && it->is_string()) {
    return FieldError("begin_ms", "is a time in milliseconds since the Unix epoch, got \"{}\" (cohort submit --begin "
                                  "takes 16:00, now+1h or 2026-12-01T09:00)",
                      it->get<std::string>().substr(0, 64));
  }
  s.begin_ms = COHORT_TRY(r.Int("begin_ms", 0, 0, kMaxBeginMs));
  if (const json* c = r.Raw("container")) {
    s.container = COHORT_TRY(ContainerSpecFromJson(*c, r.FieldName("container"), UnknownFields::kRefuse));
  }
  // One index may come as a number (YAML's `array: 7`); anything else is text.
  const json* raw_array = r.Raw("array");
  std::string array = raw_array && raw_array->is_number_integer() ? std::to_string(raw_array->get<int64_t>())
                                                                  : COHORT_TRY(r.String("array", ""));
  if (!array.empty()) s.array = COHORT_TRY(ParseArraySpec(array, "array")).ToString();
  if (std::string dep = COHORT_TRY(r.String("dependency", "")); !dep.empty()) {
    s.dependency = FormatDependency(COHORT_TRY(ParseDependency(dep, "dependency")));
  }
  s.kill_on_invalid_dep = COHORT_TRY(r.Bool("kill_on_invalid_dep", false));
  if (const json* sweep = r.Raw("sweep"); sweep && !sweep->is_null()) {
    s.sweep = COHORT_TRY(ValidateSweep(*sweep));
    const std::string array = SweepArray(s.sweep);
    if (!s.array.empty() && s.array != array) {
      return FieldError("array", "a sweep makes its own array ({}); give sweep.parallel for a throttle instead of "
                                 "array '{}'",
                        array, s.array);
    }
    s.array = array;
  }
  s.team = COHORT_TRY(r.String("team", ""));
  // Syntax is the head's (sched/constraints.h, at submit); here only sizes.
  s.nodelist = COHORT_TRY(r.String("nodelist", "", 4096));
  s.exclude = COHORT_TRY(r.String("exclude", "", 4096));
  s.constraint = COHORT_TRY(r.String("constraint", "", 1024));
  s.mem_per_node_mb = COHORT_TRY(r.Int("mem_per_node_mb", 0, 0, int64_t{1} << 40));
  if (!s.team.empty() && !ValidName(s.team, 64)) {
    return FieldError("team", "must be 1-64 characters of letters, digits, '.', '_' or '-', got '{}'", s.team);
  }
  const std::string kind = COHORT_TRY(r.String("kind", "batch"));
  if (kind == "service") {
    s.service = COHORT_TRY(r.String("service"));
    s.service_model = COHORT_TRY(r.String("service_model", s.service));
    if (!ValidName(s.service, 64)) {
      return FieldError("service", "must be 1-64 characters of letters, digits, '.', '_' or '-', got '{}'",
                        s.service);
    }
    if (s.service_model.empty() || s.service_model.size() > 256) {
      return FieldError("service_model", "must be 1-256 characters, got {}", s.service_model.size());
    }
    if (s.nodes != 1 || s.tasks_per_node != 1 || s.min_nodes != 0) {
      return FieldError("nodes", "a service replica is one task on one node (nodes 1, tasks_per_node 1)");
    }
    if (s.is_array()) return FieldError("array", "a service replica cannot be a job array");
    if (s.time_limit_s != 0 || s.progress_timeout_s != 0) {
      return FieldError(s.time_limit_s != 0 ? "time_limit_s" : "progress_timeout_s",
                        "a service replica runs until it is removed: it takes no time limit");
    }
  } else if (kind == "allocation") {
    s.allocation = true;  // checked by ValidateJobSpec
  } else if (kind != "batch") {
    return FieldError("kind", "must be 'batch', 'service' or 'allocation', got '{}'", kind);
  }
  COHORT_TRY_VOID(r.Finish());
  if (s.name.empty() && s.allocation) s.name = s.script.empty() ? "allocation" : "sbatch";
  if (s.name.empty() && !s.command.empty()) {
    s.name = JobNameFromPath(s.command[0]);
    if (s.name.empty()) s.name = "job";
  }
  COHORT_TRY_VOID(ValidateJobSpec(s));
  return s;
}

std::string JobNameFromPath(std::string_view path) {
  std::string base(path.substr(path.find_last_of('/') + 1));
  for (char& c : base) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return base.substr(0, 128);
}

Result<JobSpec> JobSpecFromJson(const json& j) {
  JobSpec s = COHORT_TRY(DecodeJobSpec(j));
  COHORT_TRY_VOID(CheckSpecFitsNodes(s));
  return s;
}

Result<void> ValidateJobSpec(const JobSpec& s) {
  if (s.allocation) {
    COHORT_TRY_VOID(CheckAllocationSpec(s));
  } else if (!s.script.empty()) {
    return FieldError("script", "a batch script runs only in an allocation (\"kind\": \"allocation\"; cohort sbatch)");
  } else if (s.command.empty()) {
    return FieldError("command", "must name a program to run (got an empty list)");
  } else if (s.command[0].empty()) {
    return FieldError("command[0]", "the program name is empty");
  }
  if (s.command.size() > 4096) return FieldError("command", "has {} arguments; at most 4096", s.command.size());
  if (s.checkpoint_before_limit_s < 0 || s.checkpoint_before_limit_s > kMaxTimeLimitS) {
    return FieldError("checkpoint_before_limit_s", "must be between 0 (none) and {} seconds, got {}", kMaxTimeLimitS,
                      s.checkpoint_before_limit_s);
  }
  if (s.checkpoint_before_limit_s > 0 && s.time_limit_s == 0) {
    return FieldError("checkpoint_before_limit_s",
                      "{} s before the time limit, but time_limit_s is 0 (unlimited): give the job a time limit",
                      s.checkpoint_before_limit_s);
  }
  size_t total = 0;
  for (size_t i = 0; i < s.command.size(); ++i) {
    if (s.command[i].find('\0') != std::string::npos) {
      return FieldError(fmt::format("command[{}]", i), "contains a NUL byte");
    }
    total += s.command[i].size();
  }
  if (total > 128 * 1024) return FieldError("command", "is {} bytes long; at most 128 KiB", total);
  if (!ValidName(s.name, 128)) {
    return FieldError("name", "must be 1-128 characters of letters, digits, '.', '_' or '-', got '{}'", s.name);
  }
  if (!ValidName(s.user, 64)) {
    return FieldError("user", "must be 1-64 characters of letters, digits, '.', '_' or '-', got '{}'", s.user);
  }
  if (s.env.size() > 1024) return FieldError("env", "has {} variables; at most 1024", s.env.size());
  for (const auto& [k, v] : s.env) {
    if (!ValidEnvName(k)) return FieldError("env." + k, "is not a valid environment variable name");
    if (IsReservedEnvName(k)) {
      return FieldError("env." + k, "is set by Cohort for every task (the job contract) and cannot be overridden");
    }
    if (v.find('\0') != std::string::npos || v.size() > 32 * 1024) {
      return FieldError("env." + k, "value must be at most 32 KiB with no NUL byte");
    }
  }
  if (s.workdir.find('\0') != std::string::npos) return FieldError("workdir", "contains a NUL byte");
  if (!s.workdir.empty() && s.workdir[0] != '/') {
    return FieldError("workdir", "must be an absolute path, got '{}'", s.workdir);
  }
  if (!s.output.empty()) COHORT_TRY_VOID(CheckOutputPattern("output", s.output));
  if (!s.error.empty()) COHORT_TRY_VOID(CheckOutputPattern("error", s.error));
  COHORT_TRY_VOID(CheckOpenMode(s.open_mode));
  if (s.gpus_per_node % s.tasks_per_node != 0) {
    return FieldError("gpus_per_node",
                      "{} GPUs cannot be split evenly among {} tasks per node; use a multiple of tasks_per_node",
                      s.gpus_per_node, s.tasks_per_node);
  }
  COHORT_TRY_VOID(ValidateGpuSpec(s));
  if (s.tensor_group_size > 0 && s.tasks_per_node % s.tensor_group_size != 0) {
    std::string msg = fmt::format(
        "tensor_group_size: a tensor group of {} tasks must stay inside one node, but "
        "tasks_per_node {} is not a multiple of {} (ranks fill nodes {} at a time)",
        s.tensor_group_size, s.tasks_per_node, s.tensor_group_size, s.tasks_per_node);
    return MakeError(ErrorCode::kUnsatisfiable, std::move(msg), "tensor_group_size");
  }
  if (static_cast<int64_t>(s.nodes) * s.tasks_per_node > 65536) {
    return FieldError("nodes", "a job may have at most 65536 tasks in all, got {} x {}", s.nodes, s.tasks_per_node);
  }
  if (static_cast<int64_t>(s.cpus_per_task) * s.tasks_per_node > kMaxCpusPerTask) {
    return FieldError("cpus_per_task", "{} tasks x {} CPUs per node exceeds {}", s.tasks_per_node,
                      s.cpus_per_task, kMaxCpusPerTask);
  }
  return {};
}

Result<void> ValidateNodeFeatures(const std::vector<std::string>& features, const std::string& field) {
  if (features.size() > 64) return FieldError(field, "at most 64 features, got {}", features.size());
  for (const std::string& f : features) {
    const bool ok = !f.empty() && f.size() <= 63 && std::all_of(f.begin(), f.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-';
    });
    if (!ok) return FieldError(field, "'{}' is not a feature name (1-63 of letters, digits, '.', '_', ':', '-')", f);
  }
  return {};
}

Result<void> ValidateNodeLabels(const std::map<std::string, std::string>& labels, const std::string& field) {
  if (labels.size() > 16) return FieldError(field, "at most 16 labels, got {}", labels.size());
  for (const auto& [k, v] : labels) {
    const bool key_ok = !k.empty() && k.size() <= 63 && std::islower(static_cast<unsigned char>(k[0])) &&
                        std::all_of(k.begin(), k.end(), [](char c) {
                          return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
                                 c == '.' || c == '_' || c == '-';
                        });
    if (!key_ok) {
      return FieldError(field + "." + k, "a label name is 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter");
    }
    if (v.size() > 63 || !ValidName(v, 63)) {
      return FieldError(field + "." + k, "a label value is 1-63 characters of letters, digits, '.', '_' or '-', got '{}'", v);
    }
  }
  return {};
}

// ---- Job ----

json ToJson(const Job& job) {
  json alloc_nodes = json::array();
  for (const auto& n : job.allocation.nodes) {
    json tasks = json::array();
    for (const auto& t : n.tasks) {
      json task{{"rank", t.rank}, {"local_rank", t.local_rank}, {"gpus", t.gpus}};
      if (t.gpu_share > 0 || t.gpu_memory_mib > 0) {
        task["gpu_share"] = t.gpu_share;
        task["gpu_memory_mib"] = t.gpu_memory_mib;
      }
      if (!t.devices.empty()) task["devices"] = t.devices;
      tasks.push_back(std::move(task));
    }
    alloc_nodes.push_back({{"node", n.node},
                           {"address", n.address},
                           {"node_rank", n.node_rank},
                           {"gpus", n.gpus},
                           {"cpus", n.cpus},
                           {"tasks", tasks},
                           {"version", n.version}});
    if (!n.gpu_sharing.empty()) alloc_nodes.back()["gpu_sharing"] = n.gpu_sharing;
  }
  json exits = json::array();
  for (const auto& e : job.exits) {
    exits.push_back({{"rank", e.rank},
                     {"node", e.node},
                     {"exit_code", e.exit_code},
                     {"signal", e.signal},
                     {"error", e.error},
                     {"finished_ms", e.finished_ms}});
  }
  json history = json::array();
  for (const auto& h : job.history) {
    json rec{{"attempt", h.attempt},
             {"start_ms", h.start_ms},
             {"end_ms", h.end_ms},
             {"nodes", h.nodes},
             {"end_reason", h.end_reason},
             {"gpus", h.gpus}};
    if (h.gpu_share_units > 0) rec["gpu_share_units"] = h.gpu_share_units;
    history.push_back(std::move(rec));
  }
  json out = {{"id", job.id},
              {"spec", ToJson(job.spec)},
              {"state", JobStateName(job.state)},
              {"reason", job.reason},
              {"attempt", job.attempt},
              {"moves", job.moves},
              {"submit_ms", job.submit_ms},
              {"start_ms", job.start_ms},
              {"end_ms", job.end_ms},
              {"exit_code", job.exit_code ? json(*job.exit_code) : json(nullptr)},
              {"allocation",
               {{"nodes", alloc_nodes},
                {"master_addr", job.allocation.master_addr},
                {"master_port", job.allocation.master_port}}},
              {"exits", exits},
              {"history", history},
              {"held", job.held},
              {"held_by", job.held_by}};
  if (job.is_array_element()) {
    out["array_job_id"] = job.array_job_id;
    out["array_task_id"] = job.array_task_id;
  }
  if (!job.sweep_values.empty()) out["sweep_values"] = job.sweep_values;
  if (job.spec.is_array()) {
    out["array_left"] = job.array_left;
    out["array_cancelled"] = job.array_cancelled;
  }
  if (job.move) {
    const MoveRequest& m = *job.move;
    out["move"] = {{"node", m.node},
                   {"requested_ms", m.requested_ms},
                   {"deadline_ms", m.deadline_ms},
                   {"baseline_checkpoint", m.baseline_checkpoint},
                   {"grow", m.grow}};
    if (m.preempted_for != 0) {
      out["move"]["preempted_for"] = m.preempted_for;
      out["move"]["preempt_reason"] = m.preempt_reason;
    }
  }
  if (!job.preemptions.empty()) {
    json list = json::array();
    for (const auto& p : job.preemptions) {
      list.push_back({{"requested_ms", p.requested_ms},
                      {"attempt", p.attempt},
                      {"by_job", p.by_job},
                      {"by_team", p.by_team},
                      {"kind", p.kind},
                      {"reason", p.reason},
                      {"work_at_risk_gpu_s", p.work_at_risk_gpu_s},
                      {"ended_ms", p.ended_ms},
                      {"outcome", p.outcome}});
    }
    out["preemptions"] = std::move(list);
  }
  if (!job.steps.empty()) {
    json steps = json::array();
    for (const auto& st : job.steps) steps.push_back(ToJson(st));
    out["steps"] = std::move(steps);
  }
  if (job.nomination) out["nomination"] = {{"since_ms", job.nomination->since_ms}, {"nodes", job.nomination->nodes}};
  if (job.last_checkpoint) {
    out["last_checkpoint"] = {{"attempt", job.last_checkpoint->attempt},
                              {"step", job.last_checkpoint->step},
                              {"reported_ms", job.last_checkpoint->reported_ms}};
  }
  return out;
}

Result<Job> JobFromJson(const json& j) {
  return Guard("job", [&]() -> Result<Job> {
    Job job;
    job.id = j.at("id").get<JobId>();
    job.spec = COHORT_TRY(DecodeJobSpec(j.at("spec")));
    job.state = COHORT_TRY(ParseJobState(j.at("state").get<std::string>()));
    job.reason = j.value("reason", "");
    job.attempt = j.value("attempt", 0);
    job.moves = std::clamp(j.value("moves", 0), 0, job.attempt);
    job.submit_ms = j.value("submit_ms", int64_t(0));
    job.start_ms = j.value("start_ms", int64_t(0));
    job.end_ms = j.value("end_ms", int64_t(0));
    // Only a pending job is held; records stored before holds existed load unheld.
    job.held = job.state == JobState::kPending && j.value("held", false);
    if (job.held) job.held_by = j.value("held_by", "");
    job.array_job_id = j.value("array_job_id", JobId(0));
    job.array_task_id = j.value("array_task_id", int64_t(-1));
    if (job.array_job_id < 0 || (job.array_job_id > 0 && job.array_task_id < 0)) {
      return Errorf(ErrorCode::kInternal, "malformed job record: array element {} of array {}", job.array_task_id,
                    job.array_job_id);
    }
    if (j.contains("sweep_values")) job.sweep_values = j["sweep_values"].get<std::map<std::string, std::string>>();
    for (const auto& st : j.value("steps", json::array())) job.steps.push_back(COHORT_TRY(StepRecordFromJson(st)));
    if (job.spec.is_array()) {
      job.array_left = j.value("array_left", "");
      if (!job.array_left.empty()) COHORT_TRY_VOID(ArrayIndexSet::Parse(job.array_left, "array_left"));
      job.array_cancelled = std::max<int64_t>(0, j.value("array_cancelled", int64_t(0)));
    }
    if (j.contains("exit_code") && !j["exit_code"].is_null()) job.exit_code = j["exit_code"].get<int>();
    if (j.contains("allocation")) {
      const json& a = j["allocation"];
      job.allocation.master_addr = a.value("master_addr", "");
      job.allocation.master_port = a.value("master_port", 0);
      for (const auto& n : a.value("nodes", json::array())) {
        NodeAllocation na;
        na.node = n.at("node").get<std::string>();
        na.address = n.value("address", "");
        na.node_rank = n.value("node_rank", 0);
        na.gpus = n.value("gpus", std::vector<int>{});
        na.cpus = n.value("cpus", 0);
        na.version = n.value("version", int64_t(0));
        na.gpu_sharing = n.value("gpu_sharing", "");
        for (const auto& t : n.value("tasks", json::array())) {
          na.tasks.push_back({t.at("rank").get<int>(), t.value("local_rank", 0),
                              t.value("gpus", std::vector<int>{}), t.value("gpu_share", 0),
                              t.value("gpu_memory_mib", int64_t(0)),
                              t.value("devices", std::vector<std::string>{})});
        }
        job.allocation.nodes.push_back(std::move(na));
      }
    }
    for (const auto& e : j.value("exits", json::array())) {
      job.exits.push_back({e.at("rank").get<int>(), e.value("node", ""), e.value("exit_code", 0),
                           e.value("signal", 0), e.value("error", ""),
                           e.value("finished_ms", int64_t(0))});
    }
    for (const auto& h : j.value("history", json::array())) {
      job.history.push_back({h.value("attempt", 0), h.value("start_ms", int64_t(0)),
                             h.value("end_ms", int64_t(0)),
                             h.value("nodes", std::vector<std::string>{}),
                             h.value("end_reason", ""), h.value("gpus", -1),
                             h.value("gpu_share_units", int64_t(0))});
    }
    if (j.contains("move") && !j["move"].is_null()) {
      const json& m = j["move"];
      MoveRequest r;
      r.node = m.value("node", "");
      r.requested_ms = m.value("requested_ms", int64_t(0));
      r.deadline_ms = m.value("deadline_ms", int64_t(0));
      r.baseline_checkpoint = m.value("baseline_checkpoint", int64_t(-1));
      r.grow = m.value("grow", false);
      r.preempted_for = m.value("preempted_for", JobId(0));
      r.preempt_reason = m.value("preempt_reason", "");
      if (r.deadline_ms < 0) {
        return Errorf(ErrorCode::kInternal, "malformed job record: move.deadline_ms {} is negative", r.deadline_ms);
      }
      // Only a running job's request means anything.
      if (job.state == JobState::kRunning) job.move = std::move(r);
    }
    for (const auto& p : j.value("preemptions", json::array())) {
      job.preemptions.push_back({p.value("requested_ms", int64_t(0)), p.value("attempt", 0),
                                 p.value("by_job", JobId(0)), p.value("by_team", ""), p.value("kind", ""),
                                 p.value("reason", ""), p.value("work_at_risk_gpu_s", 0.0),
                                 p.value("ended_ms", int64_t(0)), p.value("outcome", "")});
    }
    if (j.contains("nomination")) {
      const json& n = j.at("nomination");
      Nomination nom{n.value("since_ms", int64_t(0)), n.value("nodes", std::vector<std::string>{})};
      if (nom.since_ms <= 0) {
        return Errorf(ErrorCode::kInternal, "malformed job record: nomination.since_ms {} is not positive",
                      nom.since_ms);
      }
      // Only a pending job waits for GPUs freed for it.
      if (job.state == JobState::kPending) job.nomination = std::move(nom);
    }
    if (j.contains("last_checkpoint")) {
      const json& c = j.at("last_checkpoint");
      CheckpointMark mark{c.value("attempt", 0), c.value("step", int64_t(0)), c.value("reported_ms", int64_t(0))};
      if (mark.attempt < 0 || mark.step < 0 || mark.reported_ms < 0) {
        return Errorf(ErrorCode::kInternal,
                      "malformed job record: last_checkpoint attempt {}, step {}, reported_ms {} must not be negative",
                      mark.attempt, mark.step, mark.reported_ms);
      }
      job.last_checkpoint = mark;
    }
    return job;
  });
}

// ---- Node ----

static json Nullable(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
static json Nullable(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

json ToJson(const GpuTelemetry& t) {
  return json{{"utilization", Nullable(t.utilization)},
              {"memory_used_bytes", Nullable(t.memory_used_bytes)},
              {"memory_total_bytes", Nullable(t.memory_total_bytes)},
              {"temperature_celsius", Nullable(t.temperature_celsius)},
              {"power_watts", Nullable(t.power_watts)},
              {"sm_clock_hz", Nullable(t.sm_clock_hz)},
              {"updated_ms", t.updated_ms}};
}

// MIG and topology fields, written only when set so that plain GPUs read as before.
static void AddGpuPlaceFields(const Gpu& g, json& j) {
  if (!g.mig_profile.empty()) {
    j["mig_profile"] = g.mig_profile;
    j["mig_parent"] = g.mig_parent;
  }
  if (g.nvlink_island >= 0) j["nvlink_island"] = g.nvlink_island;
  if (g.pcie_switch >= 0) j["pcie_switch"] = g.pcie_switch;
}

json ToJson(const Gpu& g) {
  json j{{"index", g.index},
         {"name", g.name},
         {"uuid", g.uuid},
         {"memory_bytes", g.memory_bytes},
         {"simulated", g.simulated},
         {"healthy", g.healthy},
         {"health_reason", g.health_reason}};
  AddGpuPlaceFields(g, j);
  if (g.telemetry) j["telemetry"] = ToJson(*g.telemetry);
  return j;
}

// A GPU as an agent registers it: the inventory only (health and telemetry are the head's).
static json RegisteredGpuToJson(const Gpu& g) {
  json j{{"index", g.index},
         {"name", g.name},
         {"uuid", g.uuid},
         {"memory_bytes", g.memory_bytes},
         {"simulated", g.simulated}};
  AddGpuPlaceFields(g, j);
  return j;
}

static json GpusToJson(const std::vector<Gpu>& gpus) {
  json a = json::array();
  for (const auto& g : gpus) a.push_back(ToJson(g));
  return a;
}

json ToJson(const Node& n) {
  return json{{"name", n.name},
              {"address", n.address},
              {"agent_url", n.agent_url},
              {"incarnation", n.incarnation},
              {"version", n.version},
              {"gpus", GpusToJson(n.gpus)},
              {"cpus", n.cpus},
              {"labels", n.labels},
              {"features", n.features},
              {"memory_bytes", n.memory_bytes},
              {"gpu_sharing", n.gpu_sharing},
              {"state", NodeStateName(n.state)},
              {"reason", n.reason},
              {"drain", n.drain},
              {"drain_reason", n.drain_reason},
              {"registered_ms", n.registered_ms},
              {"last_heartbeat_ms", n.last_heartbeat_ms}};
}

Result<Node> NodeFromJson(const json& j) {
  return Guard("node", [&]() -> Result<Node> {
    Node n;
    n.name = j.at("name").get<std::string>();
    n.address = j.value("address", "");
    n.agent_url = j.value("agent_url", "");
    n.incarnation = j.value("incarnation", "");
    n.version = j.value("version", "");
    for (const auto& g : j.value("gpus", json::array())) n.gpus.push_back(GpuFromStored(g));
    n.cpus = j.value("cpus", 0);
    n.labels = j.value("labels", std::map<std::string, std::string>{});
    n.features = j.value("features", std::vector<std::string>{});
    n.memory_bytes = j.value("memory_bytes", int64_t(0));
    n.gpu_sharing = j.value("gpu_sharing", "");
    n.state = j.value("state", "UP") == "DOWN" ? NodeState::kDown : NodeState::kUp;
    n.reason = j.value("reason", "");
    n.drain = j.value("drain", false);
    n.drain_reason = j.value("drain_reason", "");
    n.registered_ms = j.value("registered_ms", int64_t(0));
    n.last_heartbeat_ms = j.value("last_heartbeat_ms", int64_t(0));
    return n;
  });
}

// ---- Agent protocol ----

json ToJson(const Registration& r) {
  return json{{"name", r.name},       {"address", r.address}, {"agent_url", r.agent_url},
              {"incarnation", r.incarnation}, {"version", r.version},
              {"gpus", [&] {
                 json a = json::array();
                 for (const auto& g : r.gpus) a.push_back(RegisteredGpuToJson(g));
                 return a;
               }()},
              {"cpus", r.cpus}, {"labels", r.labels}, {"features", r.features},
              {"memory_bytes", r.memory_bytes}, {"gpu_sharing", r.gpu_sharing}, {"csr", r.csr},
              {"free_ports", r.free_ports}};
}

Result<Registration> RegistrationFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  Registration reg;
  reg.name = COHORT_TRY(r.String("name"));
  reg.address = COHORT_TRY(r.String("address"));
  reg.agent_url = COHORT_TRY(r.String("agent_url", ""));
  reg.incarnation = COHORT_TRY(r.String("incarnation"));
  reg.version = COHORT_TRY(r.String("version", "", 64));
  reg.gpus = COHORT_TRY(GpusFromJson(r, "gpus"));
  reg.cpus = static_cast<int>(COHORT_TRY(r.Int("cpus", 0, 0, 1 << 20)));
  reg.labels = COHORT_TRY(r.StringMap("labels"));
  COHORT_TRY_VOID(ValidateNodeLabels(reg.labels, "labels"));
  reg.features = COHORT_TRY(r.StringList("features", std::vector<std::string>{}));
  COHORT_TRY_VOID(ValidateNodeFeatures(reg.features, "features"));
  reg.memory_bytes = COHORT_TRY(r.Int("memory_bytes", 0, 0, int64_t{1} << 60));
  reg.gpu_sharing = COHORT_TRY(r.String("gpu_sharing", ""));
  if (!reg.gpu_sharing.empty() && reg.gpu_sharing != "mps" && reg.gpu_sharing != "time-slicing") {
    return FieldError("gpu_sharing", "must be 'mps' or 'time-slicing', got '{}'", reg.gpu_sharing);
  }
  reg.csr = COHORT_TRY(r.String("csr", "", 16 << 10));
  if (r.Raw("free_ports")) reg.free_ports = COHORT_TRY(IntList(r, "free_ports", 1, 65535, 64));
  COHORT_TRY_VOID(r.Finish(UnknownFields::kIgnore));
  if (!ValidName(reg.name, 64)) {
    return FieldError("name", "must be 1-64 characters of letters, digits, '.', '_' or '-', got '{}'", reg.name);
  }
  if (reg.address.empty() || reg.address.size() > 255) return FieldError("address", "must be a host name or IP");
  if (!ValidName(reg.incarnation, 64)) return FieldError("incarnation", "must be a token of 1-64 characters");
  if (!reg.agent_url.empty()) {
    if (auto p = ParseHttpUrl(reg.agent_url); !p) return FieldError("agent_url", "{}", p.error().message);
  }
  return reg;
}

json ToJson(const AgentTiming& t) {
  return json{{"heartbeat_interval_ms", t.heartbeat_interval_ms},
              {"failure_timeout_ms", t.failure_timeout_ms},
              {"fence_timeout_ms", t.fence_timeout_ms},
              {"kill_grace_ms", t.kill_grace_ms}};
}

Result<AgentTiming> AgentTimingFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j, "timing"));
  AgentTiming t;
  t.heartbeat_interval_ms = COHORT_TRY(r.Int("heartbeat_interval_ms", 1000, 10, 600'000));
  t.failure_timeout_ms = COHORT_TRY(r.Int("failure_timeout_ms", 3000, 10, 3'600'000));
  t.fence_timeout_ms = COHORT_TRY(r.Int("fence_timeout_ms", 2000, 10, 3'600'000));
  t.kill_grace_ms = COHORT_TRY(r.Int("kill_grace_ms", 5000, 0, 3'600'000));
  COHORT_TRY_VOID(r.Finish(UnknownFields::kIgnore));
  return t;
}

static json TaskReportToJson(const TaskReport& t) {
  json j{{"job", t.job},       {"attempt", t.attempt},     {"rank", t.rank},
         {"running", t.running}, {"pid", t.pid},           {"gpus", t.gpus},
         {"cpus", t.cpus},     {"exit_code", t.exit_code}, {"signal", t.signal},
         {"error", t.error},   {"finished_ms", t.finished_ms},
         {"cpu_seconds", t.cpu_seconds}, {"rss_bytes", t.rss_bytes},
         {"gpu_memory_bytes", t.gpu_memory_bytes}, {"gpu_memory_warning", t.gpu_memory_warning}};
  // Only when bound, so an unbound task's report reads the same to a head that predates it.
  if (!t.cpu_list.empty()) j["cpu_list"] = t.cpu_list;
  return j;
}

static json GpuReportToJson(const GpuReport& g) {
  json j = {{"index", g.index}};
  const GpuTelemetry& t = g.telemetry;
  if (t.utilization) j["utilization"] = *t.utilization;
  if (t.memory_used_bytes) j["memory_used_bytes"] = *t.memory_used_bytes;
  if (t.memory_total_bytes) j["memory_total_bytes"] = *t.memory_total_bytes;
  if (t.temperature_celsius) j["temperature_celsius"] = *t.temperature_celsius;
  if (t.power_watts) j["power_watts"] = *t.power_watts;
  if (t.sm_clock_hz) j["sm_clock_hz"] = *t.sm_clock_hz;
  if (g.health_events) j["health_events"] = g.health_events;
  if (!g.health_event.empty()) j["health_event"] = g.health_event;
  return j;
}

json ToJson(const Heartbeat& h) {
  json tasks = json::array();
  for (const auto& t : h.tasks) tasks.push_back(TaskReportToJson(t));
  json out{{"incarnation", h.incarnation},
              {"applied_version", h.applied_version},
              {"tasks", tasks},
              {"free_ports", h.free_ports}};
  if (!h.gpus.empty()) {
    json gpus = json::array();
    for (const auto& g : h.gpus) gpus.push_back(GpuReportToJson(g));
    out["gpus"] = std::move(gpus);
  }
  return out;
}

Result<Heartbeat> HeartbeatFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  Heartbeat h;
  h.incarnation = COHORT_TRY(r.String("incarnation"));
  h.applied_version = COHORT_TRY(r.Int("applied_version", 0, 0, INT64_MAX));
  h.free_ports = COHORT_TRY(IntList(r, "free_ports", 1, 65535, 64));
  const json* tasks = r.Raw("tasks");
  if (tasks) {
    if (!tasks->is_array() || tasks->size() > kMaxReportedTasks) {
      return FieldError("tasks", "must be an array of at most {} task reports", kMaxReportedTasks);
    }
    for (size_t i = 0; i < tasks->size(); ++i) {
      auto t = COHORT_TRY(ObjectReader::Open((*tasks)[i], fmt::format("tasks[{}]", i)));
      TaskReport rep;
      rep.job = COHORT_TRY(t.Int("job", std::nullopt, 1, INT64_MAX));
      rep.attempt = static_cast<int>(COHORT_TRY(t.Int("attempt", std::nullopt, 0, 1 << 30)));
      rep.rank = static_cast<int>(COHORT_TRY(t.Int("rank", std::nullopt, 0, 1 << 30)));
      rep.running = COHORT_TRY(t.Bool("running"));
      rep.pid = static_cast<int>(COHORT_TRY(t.Int("pid", 0, 0, INT32_MAX)));
      rep.gpus = COHORT_TRY(IntList(t, "gpus", 0, kMaxGpusPerNode - 1, kMaxGpusPerNode));
      rep.cpus = static_cast<int>(COHORT_TRY(t.Int("cpus", 0, 0, 1 << 20)));
      rep.exit_code = static_cast<int>(COHORT_TRY(t.Int("exit_code", 0, -1, 255)));
      rep.signal = static_cast<int>(COHORT_TRY(t.Int("signal", 0, 0, 128)));
      rep.error = CutText(COHORT_TRY(t.String("error", "")), kMaxTaskErrorBytes);
      rep.finished_ms = COHORT_TRY(t.Int("finished_ms", 0, 0, INT64_MAX));
      rep.cpu_seconds = COHORT_TRY(t.Double("cpu_seconds", 0, 0, 1e12));
      rep.rss_bytes = COHORT_TRY(t.Int("rss_bytes", 0, 0, int64_t(1) << 50));
      rep.gpu_memory_bytes = COHORT_TRY(t.Int("gpu_memory_bytes", 0, 0, int64_t(1) << 50));
      rep.gpu_memory_warning = CutText(COHORT_TRY(t.String("gpu_memory_warning", "")), kMaxTaskErrorBytes);
      rep.cpu_list = COHORT_TRY(t.String("cpu_list", ""));
      if (rep.cpu_list.size() > kMaxCpuListBytes ||
          rep.cpu_list.find_first_not_of("0123456789,-") != std::string::npos) {
        return FieldError(t.FieldName("cpu_list"), "must be a CPU list such as 0-3,8 of at most {} characters",
                          kMaxCpuListBytes);
      }
      COHORT_TRY_VOID(t.Finish(UnknownFields::kIgnore));
      h.tasks.push_back(std::move(rep));
    }
  }
  if (const json* gpus = r.Raw("gpus")) {
    if (!gpus->is_array() || gpus->size() > size_t(kMaxGpusPerNode)) {
      return FieldError("gpus", "must be an array of at most {} GPU reports", kMaxGpusPerNode);
    }
    for (size_t i = 0; i < gpus->size(); ++i) {
      auto g = COHORT_TRY(ObjectReader::Open((*gpus)[i], fmt::format("gpus[{}]", i)));
      GpuReport rep;
      rep.index = static_cast<int>(COHORT_TRY(g.Int("index", std::nullopt, 0, kMaxGpusPerNode - 1)));
      rep.telemetry = COHORT_TRY(TelemetryFromReport(g));
      rep.health_events = COHORT_TRY(g.Int("health_events", 0, 0, INT64_MAX));
      rep.health_event = COHORT_TRY(g.String("health_event", "", 1024));
      COHORT_TRY_VOID(g.Finish(UnknownFields::kIgnore));
      h.gpus.push_back(std::move(rep));
    }
  }
  COHORT_TRY_VOID(r.Finish(UnknownFields::kIgnore));
  return h;
}

json ToJson(const HeartbeatReply& r) {
  json tasks = json::array();
  for (const auto& t : r.tasks) {
    json l = {{"job", t.job}, {"attempt", t.attempt}, {"rank", t.rank}, {"gpus", t.gpus}};
    // A task the agent already runs goes without its launch details (DesiredTasks).
    if (t.has_details()) {
      if (t.hold) l["hold"] = true;
      l["command"] = t.command;
      l["env"] = t.env;
      l["workdir"] = t.workdir;
      if (!t.output.empty()) l["output"] = t.output;
      if (!t.error.empty()) l["error"] = t.error;
      if (!t.open_mode.empty()) l["open_mode"] = t.open_mode;
      if (!t.script.empty()) l["script"] = t.script;
      l["cpus"] = t.cpus;
      l["user"] = t.user;
      if (t.container.enabled()) l["container"] = ToJson(t.container);
    }
    if (t.checkpoint_requested) {
      l["checkpoint_requested"] = true;
      l["checkpoint_signal"] = t.checkpoint_signal;
      if (t.checkpoint_requested_ms > 0) l["checkpoint_requested_ms"] = t.checkpoint_requested_ms;
    }
    tasks.push_back(std::move(l));
  }
  json acked = json::array();
  for (const auto& a : r.acked) acked.push_back({{"job", a.job}, {"attempt", a.attempt}, {"rank", a.rank}});
  return json{{"version", r.version}, {"tasks", tasks}, {"acked", acked}, {"timing", ToJson(r.timing)}};
}

// A task's key in the head's reply (a launch or an ack): job, attempt and rank.
static Result<TaskRef> TaskRefFrom(ObjectReader& r) {
  TaskRef ref;
  ref.job = COHORT_TRY(r.Int("job", std::nullopt, 1, INT64_MAX));
  ref.attempt = static_cast<int>(COHORT_TRY(r.Int("attempt", std::nullopt, 0, 1 << 30)));
  ref.rank = static_cast<int>(COHORT_TRY(r.Int("rank", std::nullopt, 0, 1 << 30)));
  return ref;
}

// The agent reads the head's reply as the head reads its heartbeat: every field's type and
// range checked and named ("tasks[2].gpus: ..."), a newer head's unknown fields dropped.
Result<HeartbeatReply> HeartbeatReplyFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  HeartbeatReply reply;
  reply.version = COHORT_TRY(r.Int("version", std::nullopt, 0, INT64_MAX));
  const json* tasks = r.Raw("tasks");
  if (tasks == nullptr || !tasks->is_array() || tasks->size() > kMaxReportedTasks) {
    return FieldError(r.FieldName("tasks"), "must be an array of at most {} task launches", kMaxReportedTasks);
  }
  for (size_t i = 0; i < tasks->size(); ++i) {
    auto t = COHORT_TRY(ObjectReader::Open((*tasks)[i], fmt::format("{}[{}]", r.FieldName("tasks"), i)));
    TaskLaunch l;
    const TaskRef key = COHORT_TRY(TaskRefFrom(t));
    l.job = key.job;
    l.attempt = key.attempt;
    l.rank = key.rank;
    // No command: the agent runs the task already (the head sends no launch details).
    l.command = COHORT_TRY(t.StringList("command", std::vector<std::string>{}));
    l.env = COHORT_TRY(t.StringMap("env"));
    l.workdir = COHORT_TRY(t.String("workdir", ""));
    l.output = COHORT_TRY(t.String("output", "", 4096));
    l.error = COHORT_TRY(t.String("error", "", 4096));
    l.open_mode = COHORT_TRY(t.String("open_mode", "", 16));
    l.gpus = COHORT_TRY(IntList(t, "gpus", 0, kMaxGpusPerNode - 1, kMaxGpusPerNode));
    l.cpus = static_cast<int>(COHORT_TRY(t.Int("cpus", 0, 0, 1 << 20)));
    l.user = COHORT_TRY(t.String("user", "", 256));
    // A newer head's container field is dropped (the agent protocol; codecs.cc's top).
    if (const json* c = t.Raw("container")) {
      l.container = COHORT_TRY(ContainerSpecFromJson(*c, t.FieldName("container"), UnknownFields::kIgnore));
    }
    l.hold = COHORT_TRY(t.Bool("hold", false));
    l.script = COHORT_TRY(t.String("script", "", kMaxScriptBytes));
    l.checkpoint_requested = COHORT_TRY(t.Bool("checkpoint_requested", false));
    l.checkpoint_signal = static_cast<int>(COHORT_TRY(t.Int("checkpoint_signal", 0, 0, 128)));
    l.checkpoint_requested_ms = COHORT_TRY(t.Int("checkpoint_requested_ms", 0, 0, INT64_MAX));
    COHORT_TRY_VOID(t.Finish(UnknownFields::kIgnore));
    reply.tasks.push_back(std::move(l));
  }
  if (const json* acked = r.Raw("acked")) {
    if (!acked->is_array() || acked->size() > kMaxReportedTasks) {
      return FieldError(r.FieldName("acked"), "must be an array of at most {} tasks", kMaxReportedTasks);
    }
    for (size_t i = 0; i < acked->size(); ++i) {
      auto a = COHORT_TRY(ObjectReader::Open((*acked)[i], fmt::format("{}[{}]", r.FieldName("acked"), i)));
      reply.acked.push_back(COHORT_TRY(TaskRefFrom(a)));
      COHORT_TRY_VOID(a.Finish(UnknownFields::kIgnore));
    }
  }
  if (const json* timing = r.Raw("timing")) reply.timing = COHORT_TRY(AgentTimingFromJson(*timing));
  COHORT_TRY_VOID(r.Finish(UnknownFields::kIgnore));
  return reply;
}

}  // namespace cohort::api
