// Linux's exec and path limits for job specs (spec_limits.h).
#include "api/spec_limits.h"

#include <string_view>

namespace cohort::api {
namespace {

// "3.0 MiB", "130.5 KiB", "900 bytes".
std::string Size(size_t bytes) {
  if (bytes >= (1 << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
  if (bytes >= (1 << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / (1 << 10));
  return fmt::format("{} bytes", bytes);
}

Result<void> CheckArguments(const std::vector<std::string>& command) {
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i].size() + 1 > kMaxArgStrlen) {
      return FieldError(fmt::format("command[{}]", i),
                        "is {} bytes; Linux starts a program with arguments of at most {} bytes (MAX_ARG_STRLEN)",
                        command[i].size(), kMaxArgStrlen - 1);
    }
  }
  return {};
}

Result<void> CheckExecSize(const JobSpec& s) {
  size_t args = ExecBytes(s.command);
  size_t env = ExecBytes(s.env);
  if (args + env <= kMaxSpecExecBytes) return {};
  return FieldError(env >= args ? "env" : "command",
                    "{} of environment and arguments; a task can be started with at most {} "
                    "(Linux ARG_MAX, less {} KiB for what Cohort adds)",
                    Size(args + env), Size(kMaxSpecExecBytes), kExecReserveBytes >> 10);
}

Result<void> CheckWorkdir(std::string_view dir) {
  if (dir.size() >= kPathMax) {
    return FieldError("workdir", "is {} bytes long; Linux paths are at most {} bytes (PATH_MAX), so no node could enter it",
                      dir.size(), kPathMax - 1);
  }
  for (size_t start = 0; start < dir.size();) {
    size_t end = std::min(dir.find('/', start), dir.size());
    std::string_view name = dir.substr(start, end - start);
    if (name == "..") {
      return FieldError("workdir", "must not have '..' components (write the directory they lead to), got '{}'", dir);
    }
    if (name.size() > kNameMax) {
      return FieldError("workdir",
                        "has a name of {} bytes ('{}...'); Linux names are at most {} bytes (NAME_MAX), so no node "
                        "could have it",
                        name.size(), name.substr(0, 32), kNameMax);
    }
    start = end + 1;
  }
  return {};
}

}  // namespace

size_t ExecBytes(const std::vector<std::string>& strings) {
  size_t total = 0;
  for (const auto& s : strings) total += s.size() + 1 + sizeof(char*);
  return total;
}

size_t ExecBytes(const std::map<std::string, std::string>& env) {
  size_t total = 0;
  for (const auto& [name, value] : env) total += name.size() + 1 + value.size() + 1 + sizeof(char*);
  return total;
}

Result<void> CheckSpecFitsNodes(const JobSpec& s) {
  COHORT_TRY_VOID(CheckArguments(s.command));
  COHORT_TRY_VOID(CheckExecSize(s));
  return CheckWorkdir(s.workdir);
}

}  // namespace cohort::api
