#include "agent/container.h"

#include <fmt/format.h>

#include <string_view>

namespace cohort::agent {

std::vector<std::string> ContainerRunArgv(const ContainerLaunch& c) {
  std::vector<std::string> argv = {c.runtime_command, "run", "--rm", "--init", "--name", c.name,
                                   "--network=host", "--ipc=host", "--pull=missing"};
  // An earlier container of this name can only be a leftover of this same task (a shim
  // killed before it could remove it): Podman replaces it; Docker has no such flag, and
  // the shim's removal after every task is what keeps the name free.
  if (c.runtime == "podman") argv.push_back("--replace");
  for (const auto& name : c.env_names) argv.insert(argv.end(), {"-e", name});
  for (const auto& dir : c.mounts) argv.insert(argv.end(), {"-v", dir + ":" + dir});
  if (!c.workdir.empty()) argv.insert(argv.end(), {"-w", c.workdir});
  if (c.identity) {
    argv.insert(argv.end(), {"--user", fmt::format("{}:{}", c.identity->uid, c.identity->gid)});
    // The runtime runs as the agent (root), so the container's uid 0 is the host's: a
    // set-user-ID program of the job's image would make the job root there, with the
    // host directories mounted into it. No exec gains privileges.
    argv.push_back("--security-opt=no-new-privileges");
    for (gid_t g : c.identity->groups) {
      if (g != c.identity->gid) argv.insert(argv.end(), {"--group-add", std::to_string(g)});
    }
  }
  for (const auto& d : c.devices) argv.insert(argv.end(), {"--device", d});
  if (!c.cpuset.empty()) argv.insert(argv.end(), {"--cpuset-cpus", c.cpuset});
  argv.push_back(c.image);
  argv.insert(argv.end(), c.command.begin(), c.command.end());
  return argv;
}

std::vector<std::string> ContainerRemoveArgv(const std::string& runtime_command, const std::string& name) {
  return {runtime_command, "rm", "--force", name};
}

std::vector<std::string> ContainerInitPidArgv(const std::string& runtime_command, const std::string& name) {
  return {runtime_command, "container", "inspect", "--format", "{{.State.Pid}}", name};
}

std::vector<std::string> ContainerSignalArgv(const std::string& runtime_command, const std::string& name,
                                             const std::string& signal) {
  return {runtime_command, "kill", "--signal", signal, name};
}

std::vector<std::string> ContainerImageExistsArgv(const std::string& runtime_command, const std::string& image) {
  return {runtime_command, "image", "inspect", "--format", "{{.Id}}", image};
}

std::string ContainerName(const std::string& agent_work_dir, int64_t job, int attempt, int rank) {
  // FNV-1a: stable across runs and builds (std::hash need not be).
  uint32_t h = 2166136261u;
  for (unsigned char ch : agent_work_dir) {
    h ^= ch;
    h *= 16777619u;
  }
  return fmt::format("cohort-{:08x}-j{}-a{}-r{}", h, job, attempt, rank);
}

}  // namespace cohort::agent
