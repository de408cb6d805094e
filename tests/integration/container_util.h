// Helpers of the container tests (container_test.cc with Podman, docker_test.cc with
// Docker): running the runtime's command line, finding a job's containers and the host
// pid of a process started into one.
#pragma once

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "agent/container.h"
#include "harness.h"

namespace cohort::testing {

// Runs argv; its exit code and output (stdout and stderr together, through DIR/run.out:
// one call at a time per directory).
inline std::pair<int, std::string> RunTool(std::vector<std::string> argv, const std::string& dir) {
  SpawnOptions o;
  o.argv = std::move(argv);
  o.stdout_path = dir + "/run.out";
  std::filesystem::remove(o.stdout_path);
  auto p = Subprocess::Spawn(o);
  if (!p) return {-1, p.error().message};
  auto st = p->Wait();
  return {st ? st->Code() : -1, ReadFile(o.stdout_path)};
}

// The names of the containers of job `id` of the agent node-a of cluster `c` that
// `runtime` still knows, any state, each followed by a space. Other tests' clusters run
// their own job `id` at the same time (ctest -j): the name's hash of the agent's work
// directory tells them apart (agent/container.h).
inline std::string ContainersOfJob(const std::string& runtime, const LocalCluster& c, int64_t id) {
  const std::string name = agent::ContainerName(c.dir() + "/node-a", id, 0, 0);
  const std::string prefix = name.substr(0, name.rfind("-a") + 2);  // cohort-HASH-jID-a
  auto [rc, out] = RunTool({runtime, "ps", "--all", "--format", "{{.Names}}"}, c.dir());
  std::string mine;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(prefix)) mine += line + " ";
  }
  return mine;
}

// `sh -c BURNER marker`: holds 128 MiB in the shell and burns a core; `marker`, its $0,
// names it on the host's command lines (FindProcess).
inline const std::string kBurner =
    "x=$(head -c 134217728 /dev/zero | tr '\\0' a); while :; do :; done";

// The host pid of the oldest process whose command line contains `marker` (pgrep -o -f),
// 0 if none.
inline int FindProcess(const std::string& marker, const std::string& dir) {
  auto [rc, out] = RunTool({"pgrep", "-o", "-f", marker}, dir);
  return rc == 0 ? atoi(out.c_str()) : 0;
}

// The first container of job `id` of `c`'s agent node-a (ContainersOfJob), empty if none.
inline std::string FirstContainerOfJob(const std::string& runtime, const LocalCluster& c, int64_t id) {
  std::string names = ContainersOfJob(runtime, c, id);
  return names.substr(0, names.find(' '));
}

}  // namespace cohort::testing
