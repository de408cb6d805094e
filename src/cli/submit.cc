// `cohort submit [SPEC_FILE] [flags] [-- COMMAND ARGS...]`: submit a job, like sbatch.
//
// The spec comes from a YAML/JSON file, from flags and a command after "--", or from both
// (flags override the file's fields). It is checked locally with api::JobSpecFromJson
// before anything goes over the network, so bad input fails fast with exit code 2.
// --wait polls the job until it ends and exits 0 only if it SUCCEEDED; --dry-run prints
// the checked spec instead of submitting it.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/client.h"
#include "cli/submit.h"
#include "cli/job_env.h"
#include "cli/job_spec_file.h"
#include "cli/suggest.h"
#include "cli/table.h"
#include "common/clock.h"
#include "sched/constraints.h"

extern char** environ;

namespace cohort::cli {
namespace {

constexpr Millis kWaitPoll{200};
constexpr Millis kWaitUnavailableGrace{30'000};

// CLI flag that sets each spec field, for error messages about a flag's value.
const std::map<std::string, std::string, std::less<>>& FlagForField() {
  static const std::map<std::string, std::string, std::less<>> kFlags = {
      {"nodes", "--nodes"},
      {"min_nodes", "--min-nodes"},
      {"checkpoint_signal", "--checkpoint-signal"},
      {"checkpoint_before_limit_s", "--signal"},
      {"container.image", "--container"},
      {"array", "--array"},
      {"dependency", "--dependency"},
      {"tasks_per_node", "--tasks-per-node"},
      {"gpus_per_node", "--gpus-per-node"},
      {"gpus", "--gpus"},
      {"gpu_type", "--gpus"},
      {"gpus_per_task", "--gpus-per-task"},
      {"gpu_memory", "--gpu-memory"},
      {"gpu_memory_enforce", "--gpu-memory-enforce"},
      {"topology", "--topology"},
      {"cpus_per_task", "--cpus-per-task"},
      {"priority", "--priority"},
      {"max_restarts", "--max-restarts"},
      {"name", "--name"},
      {"placement", "--placement"},
      {"time_limit_s", "--time-limit"},
      {"progress_timeout_s", "--progress-timeout"},
      {"workdir", "--workdir"},
      {"output", "--output"},
      {"error", "--error"},
      {"open_mode", "--open-mode"},
      {"user", "--user"},
      {"team", "--team"},
      {"mem_per_node_mb", "--mem"},
      {"nodelist", "--nodelist"},
      {"exclude", "--exclude"},
      {"constraint", "--constraint"},
      {"begin_ms", "--begin"}};
  return kFlags;
}

bool FlagGiven(const SubmitFlags& f, std::string_view field) {
  if (field == "nodes") return f.nodes.has_value();
  if (field == "min_nodes") return f.min_nodes.has_value();
  if (field == "checkpoint_signal") return f.checkpoint_signal.has_value() || f.signal.has_value();
  if (field == "checkpoint_before_limit_s") return f.signal.has_value();
  if (field == "container.image") return f.container.has_value();
  if (field == "array") return f.array.has_value();
  if (field == "dependency") return f.dependency.has_value();
  if (field == "tasks_per_node") return f.tasks_per_node.has_value();
  if (field == "gpus_per_node") return f.gpus_per_node.has_value() || f.gpus.has_value();
  if (field == "gpus" || field == "gpu_type") return f.gpus.has_value();
  if (field == "gpus_per_task") return f.gpus_per_task.has_value();
  if (field == "gpu_memory") return f.gpu_memory.has_value();
  if (field == "gpu_memory_enforce") return f.gpu_memory_enforce.has_value();
  if (field == "topology") return f.topology.has_value();
  if (field == "cpus_per_task") return f.cpus_per_task.has_value();
  if (field == "priority") return f.priority.has_value();
  if (field == "max_restarts") return f.max_restarts.has_value();
  if (field == "name") return f.name.has_value();
  if (field == "placement") return f.placement.has_value();
  if (field == "time_limit_s") return f.time_limit.has_value();
  if (field == "progress_timeout_s") return f.progress_timeout.has_value();
  if (field == "workdir") return f.workdir.has_value();
  if (field == "output") return f.output.has_value();
  if (field == "error") return f.error.has_value();
  if (field == "open_mode") return f.open_mode.has_value();
  if (field == "user") return f.user.has_value();
  if (field == "team") return f.team.has_value();
  if (field == "mem_per_node_mb") return f.mem.has_value();
  if (field == "nodelist") return f.nodelist.has_value();
  if (field == "exclude") return f.exclude.has_value();
  if (field == "constraint") return f.constraint.has_value();
  if (field == "begin_ms") return f.begin.has_value();
  return false;
}

// Names the flag, not the file, when a flag supplied the bad value:
// "--nodes: must be between 1 and 4096, got 0".
Error AttributeError(Error e, const SubmitFlags& flags, const std::string& source) {
  auto it = FlagForField().find(e.field);
  if (it != FlagForField().end() && FlagGiven(flags, e.field) && e.message.starts_with(e.field + ": ")) {
    e.message = it->second + e.message.substr(e.field.size());
    return e;
  }
  if (e.field.starts_with("env.") && !flags.env.empty()) {
    std::string key = e.field.substr(4);
    for (const auto& kv : flags.env) {
      if (kv == key || kv.starts_with(key + "=")) {
        e.message = "--env " + e.message.substr(4);
        return e;
      }
    }
  }
  if (e.field.starts_with("command") && !flags.command.empty()) {
    e.message = "the command after --: " + e.message;
    return e;
  }
  return source.empty() ? e : WithContext(std::move(e), source);
}

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string_view::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}


bool SawDashDash(const CLI::App* sub) {
  for (const auto& a : sub->remaining(false)) {
    if (a == "--") return true;
  }
  return false;
}

template <typename T>
CLI::Option* AddOptional(CLI::App* sub, const std::string& names, std::optional<T>& target, const std::string& help) {
  return sub->add_option_function<T>(names, [&target](const T& v) { target = v; }, help);
}

// An sbatch script given where a spec file goes ("#!" first): what to type instead (cohort
// batch, which reads its #SBATCH lines); "" for anything else.
std::string ScriptInsteadOfSpec(const std::string& path) {
  if (path.empty() || path == "-") return {};
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || !line.starts_with("#!")) return {};
  bool directives = false;
  for (int n = 0; n < 200 && !directives && std::getline(in, line); ++n) directives = line.starts_with("#SBATCH");
  std::string program = path.find('/') == std::string::npos ? "./" + path : path;
  return fmt::format("{} is a script, not a job spec (YAML or JSON): submit it as a batch script with cohort batch {} "
                     "(sbatch: {}it runs once, on the first node, its steps with cohort run), or run it as every "
                     "task with cohort submit [flags] -- {}",
                     path, path, directives ? "reads its #SBATCH lines; " : "", program);
}

int Run(const SubmitState& st, const CLI::App* sub, const GlobalOptions& global) {
  std::vector<std::string> extras;
  for (const auto& a : sub->remaining(false)) {
    if (a != "--") extras.push_back(a);
  }
  if (!extras.empty() && extras.front().starts_with("-")) {
    const std::string typed = extras.front().substr(0, extras.front().find('='));
    if (std::string slurm = SlurmFlagHint(typed); !slurm.empty()) {
      return ReportError(
          MakeError(ErrorCode::kInvalidArgument, fmt::format("unknown option '{}': {}", typed, slurm)).error());
    }
    // Every one-letter flag is one edit from any other: a guess would be noise.
    auto close = typed.starts_with("--") ? ClosestNames(typed, FlagNames(*sub)) : std::vector<std::string>{};
    return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                 fmt::format("unknown option '{}'{} (see cohort submit --help; a command's own "
                                             "options go after --)",
                                             extras.front(), close.empty() ? "" : "; did you mean " + close[0] + "?"))
                           .error());
  }
  if (!extras.empty()) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument,
                             fmt::format("unexpected argument(s) '{}'; put the command to run after --: "
                                         "cohort submit [SPEC_FILE] [flags] -- COMMAND [ARGS...]",
                                         Join(extras, " "))).error());
  }
  if (st.spec_file.empty() && st.flags.command.empty()) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument,
                             "nothing to run: give a spec file (cohort submit job.yaml) or a command "
                             "after -- (cohort submit -N 2 -G 4 -- python train.py)").error());
  }
  json base = json::object();
  std::string source;
  if (auto script = ScriptInsteadOfSpec(st.spec_file); !script.empty()) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument, script).error());
  }
  if (!st.spec_file.empty()) {
    source = st.spec_file == "-" ? "<stdin>" : st.spec_file;
    auto doc = LoadSpecDocument(st.spec_file);
    if (!doc) {
      Error e = doc.error();
      std::error_code ec;
      if (st.spec_file != "-" && !std::filesystem::exists(st.spec_file, ec) && st.flags.command.empty()) {
        e.message += fmt::format(" (to run a command, put it after --: cohort submit -- {})", st.spec_file);
      }
      return ReportError(e);
    }
    if (doc->is_null()) {
      *doc = json::object();
    } else if (!doc->is_object()) {
      return ReportError(JobSpecFromDocument(*doc, source).error());
    }
    base = std::move(*doc);
  }
  const bool user_named = st.flags.user.has_value() || (base.contains("user") && !base["user"].is_null());
  auto spec = BuildSubmitSpec(std::move(base), st.flags, source);
  if (!spec) return ReportError(spec.error());
  return SubmitBuiltSpec(*spec, user_named, st, global, "job");
}

}  // namespace

SubmitDefaults CurrentDefaults() {
  SubmitDefaults d;
  std::error_code ec;
  auto cwd = std::filesystem::current_path(ec);
  if (!ec) d.workdir = cwd.string();
  if (const char* user = std::getenv("USER"); user && *user) {
    d.user = user;
  } else if (const passwd* pw = getpwuid(geteuid()); pw && pw->pw_name) {
    d.user = pw->pw_name;
  }
  d.environment = CurrentEnvironment();
  const mode_t mask = ::umask(0);
  ::umask(mask);
  d.umask = static_cast<int>(mask);
  return d;
}

int SubmitBuiltSpec(const api::JobSpec& spec, bool user_named, const SubmitState& st, const GlobalOptions& global,
                    std::string_view what) {
  if (st.dry_run) {
    PrintJson(api::ToJson(spec));
    return 0;
  }

  HttpClient head = HeadClient(global);
  const std::string path = st.hold ? api::routes::WithQuery(api::routes::kJobs, {{"hold", "true"}})
                                   : std::string(api::routes::kJobs);
  auto created = head.Post(path, SubmitBody(spec, user_named, head));
  if (!created) return ReportError(WithContext(created.error(), "submitting the job"));
  auto job = api::JobFromJson(*created);
  if (!job) return ReportError(job.error());

  if (global.json) {
    if (!st.wait) PrintJson(*created);
  } else if (st.parsable) {
    std::printf("%lld\n", static_cast<long long>(job->id));
  } else {
    std::printf("Submitted %.*s %lld%s\n", static_cast<int>(what.size()), what.data(), static_cast<long long>(job->id),
                job->held ? " (held: cohort release to start it)" : "");
  }
  if (!st.wait) return 0;
  std::fflush(stdout);
  // Poll until the job ends; a head that is briefly unreachable (a restart) is tolerated.
  json last = *created;
  SteadyTime unreachable_since{};
  while (!api::IsTerminal(job->state)) {
    std::this_thread::sleep_for(kWaitPoll);
    auto j = head.Get(api::routes::Job(job->id));
    if (!j) {
      if (ExitCodeFor(j.error()) != 3) return ReportError(j.error());
      if (unreachable_since == SteadyTime{}) unreachable_since = SteadyClock::now();
      if (SteadyClock::now() - unreachable_since > kWaitUnavailableGrace) return ReportError(j.error());
      continue;
    }
    unreachable_since = SteadyTime{};
    auto next = api::JobFromJson(*j);
    if (!next) return ReportError(next.error());
    job = std::move(next);
    last = std::move(*j);
  }
  if (global.json) {
    PrintJson(last);
  } else if (!st.parsable) {
    std::printf("%s\n", FinalStateLine(*job).c_str());
  }
  return job->state == api::JobState::kSucceeded ? 0 : 1;
}

Result<int64_t> ParseTimeLimit(std::string_view text) {
  auto bad = [&] {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--time-limit: '{}' is not a time limit; use whole seconds as a duration (3600, "
                                 "90s, 15m, 2h, 1d12h, MM:SS, HH:MM:SS, D-HH:MM:SS; cohort help durations) or "
                                 "0/unlimited",
                                 text),
                     "time_limit_s");
  };
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
  std::string lower = s;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "unlimited" || lower == "infinite" || lower == "none") return int64_t{0};
  auto ms = ParseDurationMs(s, "--time-limit");
  if (!ms || *ms % 1000 != 0) return bad();
  if (*ms / 1000 > api::kMaxTimeLimitS) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--time-limit: '{}' is longer than the maximum of {} days", text,
                                 api::kMaxTimeLimitS / 86400),
                     "time_limit_s");
  }
  return *ms / 1000;
}

Result<SignalFlag> ParseSignalFlag(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--signal: '{}': {}; write [B:]SIGNAL[@SECONDS], as Slurm's: USR1@120 asks for a "
                                 "checkpoint with SIGUSR1 two minutes before the time limit",
                                 text, why),
                     "checkpoint_signal");
  };
  std::string_view rest = text;
  if (rest.starts_with("B:")) {
    rest.remove_prefix(2);  // every task gets the signal: there is no batch shell to single out
  } else if (rest.size() > 1 && rest[1] == ':') {
    return bad(fmt::format("the '{}:' option is not supported (only B: is)", rest[0]));
  }
  SignalFlag out;
  std::string_view sig = rest;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    sig = rest.substr(0, at);
    std::string_view time = rest.substr(at + 1);
    auto ms = ParseDurationMs(time, "--signal");
    if (!ms || *ms < 1000 || *ms % 1000 != 0 || *ms / 1000 > api::kMaxTimeLimitS) {
      return bad(fmt::format("'{}' is not a time before the limit (whole seconds from 1: 120, 90s, 5m)", time));
    }
    out.before_limit_s = *ms / 1000;
  }
  if (sig.empty()) return bad("no signal named");
  std::string name(sig);
  if (std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    for (const char* known : {"HUP", "INT", "USR1", "USR2", "TERM"}) {
      if (std::to_string(api::CheckpointSignalNumber(known)) == sig) name = known;
    }
  }
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.starts_with("SIG")) name.erase(0, 3);
  if (api::CheckpointSignalNumber(name) == 0) {
    return bad(fmt::format("'{}' is not a signal a job can be asked to checkpoint with (USR1, USR2, HUP, INT, TERM)",
                           sig));
  }
  out.signal = name;
  return out;
}

Result<int64_t> ParseProgressTimeout(std::string_view text) {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
  std::string lower = s;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "0" || lower == "off" || lower == "none") return int64_t{0};
  auto ms = ParseDurationMs(s, "--progress-timeout");
  if (!ms || *ms < 1000 || *ms % 1000 != 0 || *ms / 1000 > api::kMaxProgressTimeoutS) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--progress-timeout: '{}' is not a progress timeout; use whole seconds "
                                 "from 1s to {} days (120, 90s, 15m, 2h), or 0/off",
                                 text, api::kMaxProgressTimeoutS / 86400),
                     "progress_timeout_s");
  }
  return *ms / 1000;
}

std::string FormatTimeLimit(int64_t seconds) {
  if (seconds <= 0) return "unlimited";
  int64_t d = seconds / 86400, h = (seconds % 86400) / 3600, m = (seconds % 3600) / 60, s = seconds % 60;
  if (d > 0) return fmt::format("{}-{:02d}:{:02d}:{:02d}", d, h, m, s);
  return fmt::format("{:02d}:{:02d}:{:02d}", h, m, s);
}

Result<std::pair<std::string, std::string>> ParseEnvAssignment(
    std::string_view text, const std::map<std::string, std::string>& environment) {
  size_t eq = text.find('=');
  if (eq == 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--env '{}': expected KEY=VALUE (or KEY to pass on its current value)", text),
                     "env");
  }
  if (eq != std::string_view::npos) {
    return std::pair{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
  }
  auto it = environment.find(std::string(text));
  if (it == environment.end()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("--env {}: not set in this shell; give a value with --env {}=VALUE", text, text),
                     "env");
  }
  return std::pair{it->first, it->second};
}

Result<json> MergeSubmitFlags(json base, const SubmitFlags& flags, const SubmitDefaults& defaults) {
  if (base.is_null()) base = json::object();
  if (!base.is_object()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("the job spec must be a mapping of fields, got {}", JsonTypeName(base)));
  }
  auto set = [&](const char* key, const auto& value) {
    if (value) base[key] = *value;
  };
  set("nodes", flags.nodes);
  set("min_nodes", flags.min_nodes);
  set("checkpoint_signal", flags.checkpoint_signal);
  if (flags.signal) {
    const SignalFlag sig = COHORT_TRY(ParseSignalFlag(*flags.signal));
    if (flags.checkpoint_signal && api::CheckpointSignalNumber(*flags.checkpoint_signal) !=
                                       api::CheckpointSignalNumber(sig.signal)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("--signal {} and --checkpoint-signal {} name different signals; give one",
                                   *flags.signal, *flags.checkpoint_signal),
                       "checkpoint_signal");
    }
    base["checkpoint_signal"] = sig.signal;
    base["checkpoint_before_limit_s"] = sig.before_limit_s;
  }
  set("tasks_per_node", flags.tasks_per_node);
  set("gpus_per_node", flags.gpus_per_node);
  if (flags.gpus) {
    // -G replaces what the file asks of GPUs; the API parses it (api/gpu_spec.h).
    for (const char* k : {"gpus", "gpu_type", "gpus_per_node"}) base.erase(k);
    base["gpus"] = *flags.gpus;
  }
  if (flags.gpus_per_task) {
    base.erase("gpus_per_task");
    base["gpus_per_task"] = *flags.gpus_per_task;
    // A fraction holds a part of one GPU: the file's whole-GPU count no longer applies, nor
    // its type when the flag names one (h100:0.5).
    if (flags.gpus_per_task->find('.') != std::string::npos && !flags.gpus) base.erase("gpus_per_node");
    if (flags.gpus_per_task->find(':') != std::string::npos && !flags.gpus) {
      for (const char* k : {"gpus", "gpu_type", "gpus_per_node"}) base.erase(k);
    }
  }
  set("gpu_memory", flags.gpu_memory);
  set("gpu_memory_enforce", flags.gpu_memory_enforce);
  set("topology", flags.topology);
  set("cpus_per_task", flags.cpus_per_task);
  set("priority", flags.priority);
  set("max_restarts", flags.max_restarts);
  set("name", flags.name);
  set("placement", flags.placement);
  set("user", flags.user);
  set("team", flags.team);
  set("array", flags.array);
  set("dependency", flags.dependency);
  if (flags.kill_on_invalid_dep) base["kill_on_invalid_dep"] = true;
  set("output", flags.output);
  set("error", flags.error);
  set("open_mode", flags.open_mode);
  set("nodelist", flags.nodelist);
  set("exclude", flags.exclude);
  set("constraint", flags.constraint);
  if (flags.mem) base["mem_per_node_mb"] = COHORT_TRY(sched::ParseMemoryMb(*flags.mem, "--mem"));
  if (flags.begin) {
    base["begin_ms"] = COHORT_TRY(ParseBeginTime(*flags.begin, "--begin", defaults.now_ms > 0 ? defaults.now_ms
                                                                                                : NowUnixMs()));
  }
  if (flags.container) {
    if (!base.contains("container") || !base["container"].is_object()) base["container"] = json::object();
    base["container"]["image"] = *flags.container;
  }
  if (flags.time_limit) base["time_limit_s"] = COHORT_TRY(ParseTimeLimit(*flags.time_limit));
  if (flags.progress_timeout) {
    base["progress_timeout_s"] = COHORT_TRY(ParseProgressTimeout(*flags.progress_timeout));
  }
  if (flags.workdir) {
    std::filesystem::path p(*flags.workdir);
    if (p.is_relative() && !defaults.workdir.empty()) p = std::filesystem::path(defaults.workdir) / p;
    std::string dir = p.lexically_normal().string();
    if (dir.size() > 1 && dir.ends_with('/')) dir.pop_back();
    base["workdir"] = dir;
  }
  if (!flags.env.empty()) {
    if (!base.contains("env") || base["env"].is_null()) base["env"] = json::object();
    if (!base["env"].is_object()) {
      return FieldError("env", "must be a mapping of NAME: value, got {}", JsonTypeName(base["env"]));
    }
    for (const auto& kv : flags.env) {
      auto [k, v] = COHORT_TRY(ParseEnvAssignment(kv, defaults.environment));
      base["env"][k] = v;
    }
  }
  if (!flags.command.empty()) base["command"] = flags.command;
  auto missing = [&](const char* key) { return !base.contains(key) || base[key].is_null(); };
  if (missing("workdir") && !defaults.workdir.empty()) base["workdir"] = defaults.workdir;
  // The tasks create files as this shell would (sbatch sends SLURM_UMASK the same way).
  if (missing("umask") && defaults.umask >= 0) base["umask"] = fmt::format("{:04o}", defaults.umask);
  if (missing("user") && !defaults.user.empty()) base["user"] = defaults.user;
  return base;
}

json SubmitBody(const api::JobSpec& spec, bool user_named, const HttpClient& head) {
  json body = api::ToJson(spec);
  if (!user_named && !head.bearer_token().empty()) body.erase("user");
  return body;
}

Result<void> CheckConstraintSyntax(const api::JobSpec& spec) {
  sched::JobRequest r;
  r.nodes = spec.nodes;
  r.nodelist = spec.nodelist;
  r.exclude = spec.exclude;
  r.constraint = spec.constraint;
  r.mem_per_node_mb = spec.mem_per_node_mb;
  return sched::CheckConstraintSyntax(r);
}

// An output or error path with no pattern in it that names a directory here (the working
// directory is usually shared with the nodes): refused now, as the node would fail the job
// at start with "Is a directory".
Result<void> CheckOutputFilesHere(const api::JobSpec& spec) {
  for (const auto& [field, value] : {std::pair{"output", &spec.output}, std::pair{"error", &spec.error}}) {
    if (value->empty() || value->find('%') != std::string::npos) continue;
    std::filesystem::path p(*value);
    if (p.is_relative() && !spec.workdir.empty()) p = std::filesystem::path(spec.workdir) / p;
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      return FieldError(field, "'{}' is a directory ({}); give a file in it, e.g. '{}/slurm-%j.out'", *value,
                        p.lexically_normal().string(), *value);
    }
  }
  return {};
}

Result<api::JobSpec> BuildSubmitSpec(json base, const SubmitFlags& flags, const std::string& source) {
  const SubmitDefaults defaults = CurrentDefaults();
  auto merged = MergeSubmitFlags(std::move(base), flags, defaults);
  if (!merged) return std::unexpected(merged.error());
  // The spec as given is checked first, so that its own errors come before the
  // submitting side's (an unset --export variable, a program missing here).
  if (auto given = api::JobSpecFromJson(*merged); !given) {
    Error e = AttributeError(given.error(), flags, source);
    AddSpecHint(e, *merged);
    return std::unexpected(std::move(e));
  }
  merged = ApplySubmittingSide(std::move(*merged), flags.export_env, defaults.environment);
  if (!merged) return std::unexpected(AttributeError(merged.error(), flags, source));
  auto spec = api::JobSpecFromJson(*merged);
  if (!spec) return std::unexpected(AttributeError(spec.error(), flags, source));
  if (auto here = CheckOutputFilesHere(*spec); !here) return std::unexpected(AttributeError(here.error(), flags, source));
  COHORT_TRY_VOID(CheckConstraintSyntax(*spec));
  return spec;
}

void AddResourceFlags(CLI::App* sub, SubmitFlags& f, bool slurm_tasks) {
  AddOptional(sub, "-N,--nodes", f.nodes, "Nodes in the gang (default 1)");
  if (slurm_tasks) {
    AddOptional(sub, "-n,--ntasks", f.ntasks,
                "Tasks in all, as sbatch's: spread evenly over the nodes (-N 2 -n 8 is 4 per node)");
    AddOptional(sub, "--ntasks-per-node,--tasks-per-node", f.tasks_per_node, "Tasks per node (default 1)");
    AddOptional(sub, "--gres", f.gres, "GPUs per node as sbatch's --gres=gpu[:TYPE]:COUNT (the same as -G [TYPE:]COUNT)");
  } else {
    AddOptional(sub, "-n,--tasks-per-node,--ntasks-per-node", f.tasks_per_node, "Processes per node (default 1)");
  }
  AddOptional(sub, "-G,--gpus,--gpus-per-node", f.gpus,
              "GPUs per node, [TYPE:]COUNT, split evenly among its tasks: 4, h100:4 (a model, as NVML names it "
              "in short), 1g.10gb:2 (MIG instances) (default 0)");
  AddOptional(sub, "--gpus-per-task", f.gpus_per_task,
              "A part of one GPU per task, shared with other tasks: 0.25, 0.5 or 0.75 (or a whole number of GPUs); "
              "[TYPE:] names the model, as Slurm's: h100:0.5");
  AddOptional(sub, "--gpu-memory", f.gpu_memory, "GPU memory per task on a shared GPU, e.g. 20GiB");
  AddOptional(sub, "--gpu-memory-enforce", f.gpu_memory_enforce,
              "A task over its GPU memory share is reported (report, the default) or stopped (kill)");
  AddOptional(sub, "--topology", f.topology,
              "preferred (default: best-connected GPUs, fewest switches, never waiting for them) or required "
              "(wait for one NVLink island per node and one switch)");
  AddOptional(sub, "-c,--cpus-per-task", f.cpus_per_task, "CPU cores per task (default 1)");
  AddOptional(sub, "-J,--name,--job-name", f.name, "Job name (default: the program's name)");
  // Slurm's -p is a partition: a word there gets what cohort offers instead, not CLI11's
  // "Could not convert".
  AddOptional(sub, "-p,--priority", f.priority, "Priority, -1000..1000; higher runs first (default 0; above 0 only an admin may give)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            int64_t n = 0;
            const char* end = v.data() + v.size();
            auto [at, ec] = std::from_chars(v.data() + (v.starts_with('+') ? 1 : 0), end, n);
            if (!v.empty() && ec == std::errc() && at == end) return {};
            return fmt::format("'{}' is not a priority (a whole number, -1000..1000); cohort has no partitions "
                               "(Slurm's -p): choose nodes with -C/--constraint or -w/--nodelist",
                               v);
          },
          "INT", "priority"));
  AddOptional(sub, "--placement", f.placement, "pack (fewest free GPUs that fit) or spread (most free)");
  AddOptional(sub, "-t,--time-limit,--time", f.time_limit,
              "Time limit, a duration: 3600, 90s, 15m, 2h, 1d12h, HH:MM:SS, D-HH:MM:SS (default unlimited)");
  sub->add_option("--env", f.env, "Environment variable KEY=VALUE (or KEY: its value here); repeatable")
      ->allow_extra_args(false);
  sub->add_option("--export", f.export_env,
                  "Environment sent from here: ALL (default: all but a deny list, see cohort help environment; "
                  "NONE for a --container job), NONE, or VAR[=VALUE],... (only those; ALL,VAR=VALUE adds to all)");
  AddOptional(sub, "--mem", f.mem,
              "Memory per node the job reserves (scheduled, not enforced): 512 (MiB), 1500M, 64G, 1T");
  AddOptional(sub, "-w,--nodelist", f.nodelist,
              "Nodes the job must include, as a host list: node[1-4,7],gpu-a (others are added up to --nodes)");
  AddOptional(sub, "-x,--exclude", f.exclude, "Nodes the job must not use, as a host list: node[5-8]");
  AddOptional(sub, "-C,--constraint", f.constraint,
              "Node features the job needs (cohort agent --features): a100, a100&ib, h100|a100, (a|b)&ib");
  AddOptional(sub, "-D,--workdir,--chdir", f.workdir, "Working directory of the tasks (default: the current directory)");
  AddOptional(sub, "--user", f.user,
              "Submit as this user (admins; default: your token's user, or $USER against a head run with --insecure)");
  AddOptional(sub, "-A,--team,--account", f.team,
              "The team the job counts against, for quotas and fair share (Slurm's --account; default: the "
              "user's team, else default); users may name only their own team");
}

std::string FinalStateLine(const api::Job& job) {
  std::string line = fmt::format("Job {} {}", job.id, api::JobStateName(job.state));
  if (auto t = JobRunTimeMs(job, job.end_ms)) line += " after " + FormatDuration(*t);
  if (job.state != api::JobState::kSucceeded) {
    if (job.exit_code) line += fmt::format(" (exit code {})", *job.exit_code);
    if (!job.reason.empty()) line += ": " + job.reason;
  }
  return line;
}

void AddSubmitCommand(CommandContext& ctx) {
  auto st = std::make_shared<SubmitState>();
  auto* sub = ctx.app.add_subcommand(
      "submit", "Submit a job: cohort submit [SPEC_FILE] [flags] [-- COMMAND ARGS...]; flags override the file");
  sub->allow_extras();  // reported by Run with a hint about "--"
  sub->validate_positionals();
  SubmitFlags& f = st->flags;

  // SPEC_FILE takes the first positional before "--"; everything after "--" is the command.
  auto accepted = std::make_shared<std::optional<std::string>>();
  CLI::Validator spec_before_dashdash(
      [sub, accepted](std::string& v) -> std::string {
        if (*accepted && **accepted == v) return {};
        if (SawDashDash(sub)) return "an argument after -- belongs to the command";
        *accepted = v;
        return {};
      },
      "", "");
  CLI::Validator command_after_dashdash(
      [sub](std::string&) -> std::string { return SawDashDash(sub) ? "" : "the command must follow --"; }, "",
      "");
  sub->add_option("SPEC_FILE", st->spec_file, "Job spec file (.yaml, .yml or .json; - for stdin)")
      ->check(spec_before_dashdash);
  sub->add_option("COMMAND", f.command, "The program and its arguments, after --")->check(command_after_dashdash);
  AddSubmitFlags(sub, *st);
  AddClientOptions(sub, ctx.global);

  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [st, sub, &global] {
    if (st->wrap) {
      if (!st->flags.command.empty() || st->wrap->empty()) {
        return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                     st->wrap->empty() ? "--wrap: give the command line to run"
                                                       : "--wrap and a command after --: give one of them")
                               .error());
      }
      st->flags.command = {"/bin/sh", "-c", *st->wrap};
    }
    return Run(*st, sub, global);
  });
}

void AddSubmitFlags(CLI::App* sub, SubmitState& state, bool slurm_tasks) {
  SubmitState* st = &state;
  SubmitFlags& f = st->flags;
  AddResourceFlags(sub, f, slurm_tasks);
  AddOptional(sub, "--min-nodes", f.min_nodes,
              "Elastic: start (or restart after a failure) on as few as this many nodes when --nodes are not "
              "free; grows back at its next checkpoint (default: exactly --nodes)");
  AddOptional(sub, "--checkpoint-signal", f.checkpoint_signal,
              "Signal sent to the tasks when `cohort drain --now` or a preemption asks the job to checkpoint "
              "before it moves: USR1, USR2, HUP, INT or TERM (default none); a task that dies of it, or exits "
              "non-zero after it, is moved (requeued, no restart counted)");
  AddOptional(sub, "--signal", f.signal,
              "As Slurm's --signal=[B:]SIG[@TIME]: TIME seconds (default 60) before the time limit, ask the job to "
              "checkpoint: SIG (USR1, USR2, HUP, INT, TERM) to every task once, and a checkpoint request in the "
              "replies to its progress reports; it is also the --checkpoint-signal. The job runs on to its "
              "limit (or requeues itself: cohort requeue $COHORT_JOB_ID)");
  AddOptional(sub, "--container", f.container,
              "Run every task in this container image (Podman on the nodes; the spec's container.runtime may "
              "say docker): e.g. localhost/trainer:1.0");
  AddOptional(sub, "-a,--array", f.array,
              "A job array, as Slurm's: indices 0-999, 0-99:2 or 1,3,5, and %N to run at most N at once "
              "(0-999%16); each element gets COHORT_ARRAY_TASK_ID (and SLURM_ARRAY_TASK_ID)");
  AddOptional(sub, "-d,--dependency", f.dependency,
              "Start only after other jobs, as Slurm's: afterok:12, afterany:12:13, afternotok:14, after:15, "
              "singleton; join with ',' (all must hold); 12_7 names one element of array 12");
  sub->add_flag("--kill-on-invalid-dep", f.kill_on_invalid_dep,
                "Cancel the job if its dependency can never be satisfied (default: it stays PENDING with reason "
                "DependencyNeverSatisfied)");
  AddOptional(sub, "-o,--output", f.output,
              "Also write the tasks' stdout (and stderr, without -e) to this file, as sbatch's: relative to the "
              "working directory, opened as the job's user on each task's node; patterns %j (job id), %A_%a "
              "(array id and index), %x (name), %u (user), %N (node), %n (node index), %t (rank), %% (a '%'); "
              "cohort logs keeps showing the output too");
  AddOptional(sub, "-e,--error", f.error, "Write the tasks' stderr to this file instead (patterns as -o)");
  AddOptional(sub, "--open-mode", f.open_mode,
              "truncate (default: the first attempt empties the files, a requeue or restart appends) or append");
  AddOptional(sub, "--max-restarts", f.max_restarts, "Gang restarts after a node or task failure (default 0)");
  AddOptional(sub, "--progress-timeout", f.progress_timeout,
              "Fail (and restart) the gang when no progress is reported at $COHORT_REPORT for this long: "
              "120, 90s, 15m, 2h (default off)");
  AddOptional(sub, "-b,--begin", f.begin,
              "Start no sooner than this, as Slurm's --begin: now+1h (now+90, now+2days), 16:00 (the next time the "
              "clock shows it), midnight, noon, teatime, tomorrow, 2026-12-01 or 2026-12-01T09:30 (local time); "
              "the job waits PENDING with reason BeginTime (cohort update --begin moves it)");
  AddOptional(sub, "--wrap", st->wrap,
              "A command line to run with /bin/sh -c, as sbatch --wrap: --wrap 'python3 train.py > out.txt'");
  sub->add_flag("-H,--hold", st->hold, "Submit the job held, as sbatch --hold: it waits until cohort release JOB");
  sub->add_flag("--parsable", st->parsable, "Print only the job id, as sbatch --parsable: JOB=$(cohort submit "
                                            "--parsable -- ./run.sh)");
  sub->add_flag("--wait", st->wait, "Wait until the job ends; exit 0 only if it SUCCEEDED");
  sub->add_flag("--dry-run", st->dry_run, "Check the spec and print it as JSON; submit nothing");
}

}  // namespace cohort::cli
