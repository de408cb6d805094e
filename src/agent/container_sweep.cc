#include "agent/container_sweep.h"

#include <sstream>

#include <fmt/format.h>

#include "agent/container.h"
#include "agent/runtime_call.h"

namespace cohort::agent {
namespace {

// "123": one or more decimal digits and nothing else.
bool Digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// "jJOB-aATTEMPT-rRANK".
bool TaskSuffix(std::string_view s) {
  for (char tag : {'j', 'a', 'r'}) {
    if (s.empty() || s.front() != tag) return false;
    s.remove_prefix(1);
    const size_t dash = tag == 'r' ? s.size() : s.find('-');
    if (dash == std::string_view::npos || !Digits(s.substr(0, dash))) return false;
    s.remove_prefix(tag == 'r' ? dash : dash + 1);
  }
  return s.empty();
}

}  // namespace

std::string ContainerNamePrefix(const std::string& agent_work_dir) {
  const std::string name = ContainerName(agent_work_dir, 0, 0, 0);
  return name.substr(0, name.size() - std::string_view("j0-a0-r0").size());
}

std::vector<std::string> ContainerListArgv(const std::string& runtime_command) {
  return {runtime_command, "ps", "--all", "--format", "{{.Names}}"};
}

std::vector<std::string> LeftoverContainers(std::string_view ps_output, std::string_view prefix,
                                            const std::set<std::string>& keep) {
  std::vector<std::string> out;
  std::istringstream lines{std::string(ps_output)};
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.starts_with(prefix) || !TaskSuffix(std::string_view(line).substr(prefix.size()))) continue;
    if (!keep.contains(line)) out.push_back(line);
  }
  return out;
}

ContainerSweeper::ContainerSweeper(Options options)
    : options_(std::move(options)), prefix_(ContainerNamePrefix(options_.work_dir)) {}

ContainerSweeper::Swept ContainerSweeper::Sweep() {
  Swept out;
  const std::string scratch = options_.work_dir + "/sweep";
  auto failed = [&](const std::string& kind, const std::string& problem) {
    auto [it, fresh] = failing_.try_emplace(kind, problem);
    if (fresh) out.problems.push_back(fmt::format("{}: {}", kind, problem));
  };
  auto stopping = [&] { return options_.calls && options_.calls->cancelled(); };
  for (const auto& [kind, command] : options_.runtimes) {
    auto listed = RunRuntimeCommand(ContainerListArgv(command), scratch, options_.timeout, options_.calls);
    if (!listed && stopping()) break;
    if (!listed) {
      if (listed.error().code != ErrorCode::kNotFound) failed(kind, listed.error().message);
      continue;
    }
    // The running tasks after the list (container_sweep.h): a task starting now is kept.
    std::vector<std::string> left = LeftoverContainers(*listed, prefix_, options_.running ? options_.running()
                                                                                          : std::set<std::string>{});
    if (left.empty()) {
      failing_.erase(kind);
      continue;
    }
    std::vector<std::string> rm = ContainerRemoveArgv(command, left.front());
    rm.insert(rm.end(), left.begin() + 1, left.end());
    auto removed = RunRuntimeCommand(rm, scratch, options_.timeout, options_.calls);
    if (!removed && stopping()) break;
    if (!removed) {
      failed(kind, removed.error().message);
      continue;
    }
    failing_.erase(kind);
    for (const std::string& name : left) out.removed.push_back(fmt::format("{} {}", kind, name));
  }
  return out;
}

}  // namespace cohort::agent
