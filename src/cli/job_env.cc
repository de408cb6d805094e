#include "cli/job_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <fmt/format.h>

#include "api/types.h"

namespace cohort::cli {
namespace {

// Names a POSIX shell accepts: [A-Za-z_][A-Za-z0-9_]*.
bool ValidName(std::string_view n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  return std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::vector<std::string_view> SplitCommas(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

}  // namespace

bool DeniedForExport(std::string_view name) {
  static constexpr std::string_view kDenied[] = {
      // Injected into every process: a preload built for the submitting host breaks tasks.
      "LD_PRELOAD", "LD_AUDIT", "LD_DEBUG", "LD_DEBUG_OUTPUT",
      // The agent sets these for the job's account.
      "HOME", "USER", "LOGNAME", "SHELL", "MAIL",
      // The submitting session's, meaningless on a node.
      "PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "DISPLAY", "XAUTHORITY", "TMUX", "TMUX_PANE", "STY", "WINDOWID",
      "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "XDG_SESSION_ID", "XDG_SESSION_TYPE", "XDG_SEAT", "XDG_VTNR",
      "TERM_SESSION_ID", "PROMPT_COMMAND",
      // Slurm's names that cohort sets for an allocation's shell (cohort alloc) or an array's
      // element: a job submitted from there is neither that allocation nor that element.
      "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_ARRAY_JOB_ID",
      "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",
      "SLURM_ARRAY_TASK_STEP"};
  if (name.starts_with("SSH_") || name.starts_with("BASH_FUNC_")) return true;
  if (api::IsReservedEnvName(name)) return true;  // COHORT_* (COHORT_TOKEN too), RANK, ...
  return std::find(std::begin(kDenied), std::end(kDenied), name) != std::end(kDenied);
}

Result<std::map<std::string, std::string>> ExportedEnvironment(std::string_view spec,
                                                               const std::map<std::string, std::string>& environment) {
  std::map<std::string, std::string> out;
  const auto items = SplitCommas(spec);
  bool none = false;
  for (std::string_view item : items) {
    if (item.empty()) return FieldError("--export", "'{}' has an empty item; expected ALL, NONE or VAR[=VALUE],...", spec);
    if (item == "NONE") {
      none = true;
      continue;
    }
    if (item == "ALL") {
      // What a spec cannot carry (a name no shell takes, a value over 32 KiB) stays behind.
      for (const auto& [k, v] : environment) {
        if (!DeniedForExport(k) && ValidName(k) && v.size() <= 32 * 1024) out.insert_or_assign(k, v);
      }
      continue;
    }
    const size_t eq = item.find('=');
    const std::string name(item.substr(0, eq));
    if (!ValidName(name)) return FieldError("--export", "'{}' is no variable name (letters, digits and _)", name);
    if (api::IsReservedEnvName(name)) {
      return FieldError("--export", "{} is set by cohort for every task (cohort help environment)", name);
    }
    if (eq != std::string_view::npos) {
      out.insert_or_assign(name, std::string(item.substr(eq + 1)));
      continue;
    }
    auto it = environment.find(name);
    if (it == environment.end()) {
      return FieldError("--export", "{} is not set in this shell; give a value with --export={}=VALUE", name, name);
    }
    out.insert_or_assign(name, it->second);
  }
  if (none && items.size() > 1) return FieldError("--export", "NONE cannot be combined with other items, got '{}'", spec);
  return out;
}

Result<std::string> ResolveProgram(const std::string& program, std::string_view path_var, const std::string& workdir) {
  if (program.empty()) return FieldError("command", "the program name is empty");
  auto usable = [](const std::filesystem::path& p) -> std::optional<std::string> {
    struct stat st{};
    if (::stat(p.c_str(), &st) != 0) return "does not exist";
    if (S_ISDIR(st.st_mode)) return "is a directory";
    if (::access(p.c_str(), X_OK) != 0) return "is not executable (chmod +x?)";
    return std::nullopt;
  };
  if (program.find('/') != std::string::npos) {
    std::filesystem::path p(program);
    if (p.is_relative()) p = std::filesystem::path(workdir) / p;
    p = p.lexically_normal();
    if (auto why = usable(p)) {
      return FieldError("command", "program '{}' ({}) {} on the submitting side", program, p.string(), *why);
    }
    return p.string();
  }
  size_t start = 0;
  while (start <= path_var.size()) {
    size_t end = path_var.find(':', start);
    if (end == std::string_view::npos) end = path_var.size();
    std::filesystem::path dir(std::string(path_var.substr(start, end - start)));
    if (dir.empty()) dir = ".";  // an empty PATH entry is the working directory
    if (dir.is_relative()) dir = std::filesystem::path(workdir) / dir;
    const std::filesystem::path candidate = (dir / program).lexically_normal();
    if (!usable(candidate)) return candidate.string();
    start = end + 1;
  }
  return FieldError("command", "program '{}' is not found in PATH on the submitting side ({}); give its path, "
                    "or fix PATH", program, path_var.empty() ? "PATH is empty" : "PATH=" + std::string(path_var));
}

Result<json> ApplySubmittingSide(json spec, std::string_view export_spec,
                                 const std::map<std::string, std::string>& environment) {
  const bool container = spec.contains("container") && spec["container"].is_object();
  if (export_spec.empty()) export_spec = container ? "NONE" : "ALL";
  std::map<std::string, std::string> env = COHORT_TRY(ExportedEnvironment(export_spec, environment));
  if (spec.contains("env") && spec["env"].is_object()) {
    for (const auto& [k, v] : spec["env"].items()) {
      if (v.is_string()) env.insert_or_assign(k, v.get<std::string>());
    }
    for (const auto& [k, v] : env) spec["env"][k] = v;
  } else if (!spec.contains("env") || spec["env"].is_null()) {
    spec["env"] = env;
  }  // else: a malformed env, named by JobSpecFromJson
  // A batch script's command is its arguments, not a program.
  const bool script = spec.contains("script") && spec["script"].is_string();
  if (!container && !script && spec.contains("command") && spec["command"].is_array() && !spec["command"].empty() &&
      spec["command"][0].is_string() && spec.contains("workdir") && spec["workdir"].is_string()) {
    auto path = env.find("PATH");
    std::string path_var;
    if (path != env.end()) {
      path_var = path->second;
    } else if (auto here = environment.find("PATH"); here != environment.end()) {
      path_var = here->second;
    }
    spec["command"][0] =
        COHORT_TRY(ResolveProgram(spec["command"][0].get<std::string>(), path_var, spec["workdir"].get<std::string>()));
  }
  return spec;
}

}  // namespace cohort::cli
