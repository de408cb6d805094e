// Resource use of tasks, read from /proc.
//
// A task is named by its shim's pid (its "root"). A process belongs to the task when
//  - its session is the root: the shim calls setsid(), so the shim, the task and what it
//    starts share the session whose id is the shim's pid; or
//  - the root is among its ancestors (parent pids): the shim is a child subreaper
//    (task_shim.h), so every descendant of the task that leaves the session and is
//    orphaned is reparented to the shim and stays in its tree.
// The second rule is what measures container tasks (container.h): Podman's monitor
// (conmon) daemonizes into a session of its own and is reparented to the shim; the
// container's init is conmon's child and leads another session, and every process of the
// container descends from that init (the container's PID namespace reparents its orphans
// to it). The tree is exact for any runtime whose monitor the task starts, needs no
// runtime-specific flag, inspect call or pidfile, and does not depend on how the node's
// cgroups are set up (v1 or v2, cgroupfs or systemd, rootful or rootless: the cgroup path
// of a container differs in each). Docker's containers are children of the Docker
// daemon's containerd shim, not of the task: they are not measured (README, Containers).
//
// A task's use is the sum over its processes of CPU time (utime + stime, plus the
// children's cutime + cstime, so processes that have already been reaped still count)
// and resident memory. One pass over /proc serves both the usage and the map from pid to
// task that attributes GPU processes (NVML reports host pids: gpu/task_memory.h). Plain
// functions over /proc; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

namespace cohort::agent {

struct ProcUsage {
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
};

// One line of /proc/PID/stat: the process's pid, parent, session and usage. std::nullopt
// when the line is malformed. `ticks_per_s` is sysconf(_SC_CLK_TCK), `page_bytes` the
// page size.
struct ProcStat {
  int pid = 0;
  int ppid = 0;
  int session = 0;
  ProcUsage usage;
};
std::optional<ProcStat> ParseProcStat(std::string_view line, long ticks_per_s, long page_bytes);

// Which of `roots` each of `procs` belongs to (the rules above): pid -> root, for the
// attributed processes only. A root is its own. A process that both rules would give to
// different roots (a task's descendant that joined another task's session: it cannot, a
// session is joined only by its leader's descendants) goes to its nearest ancestor root.
// Roots are pids above 1: 0, which getsid() returns for a session whose leader lies
// outside the pid namespace (a container), names no process and matches nothing.
std::map<int, int> TasksOf(const std::vector<ProcStat>& procs, const std::set<int>& roots);

struct TaskProcesses {
  std::map<int, ProcUsage> usage;  // root -> summed usage; roots with no process left are absent
  std::map<int, int> task_of;      // pid -> root, every attributed process
};
// One pass over `proc_root`: every process's stat, attributed to `roots`.
TaskProcesses ReadTaskProcesses(const std::set<int>& roots, std::string_view proc_root = "/proc");

}  // namespace cohort::agent
