// Resource use of tasks, read from /proc.
//
// A task is named by its shim's pid. Its roots are its shim and, for a Docker task, its
// container's init (container_root.h). A process belongs to the task when
//  - its session is one of its roots: the shim calls setsid(), so the shim, the task and
//    what it starts share the session whose id is the shim's pid (a container's init leads
//    a session too); or
//  - one of its roots is among its ancestors (parent pids): the shim is a child subreaper
//    (task_shim.h), so every descendant of the task that leaves the session and is
//    orphaned is reparented to the shim and stays in its tree; a container's PID namespace
//    reparents its orphans to its init.
// The second rule is what measures container tasks (container.h): Podman's monitor
// (conmon) daemonizes into a session of its own and is reparented to the shim; the
// container's init is conmon's child and leads another session, and every process of the
// container descends from that init (the container's PID namespace reparents its orphans
// to it). The tree is exact for any runtime whose monitor the task starts, needs no
// runtime-specific flag, inspect call or pidfile, and does not depend on how the node's
// cgroups are set up (v1 or v2, cgroupfs or systemd, rootful or rootless: the cgroup path
// of a container differs in each). Docker's containers are children of the Docker
// daemon's containerd shim, not of the task: the shim learns the container's init and it
// becomes the task's second root (container_root.h), so one walk serves both runtimes.
// A root other than the shim carries its start time: a pid that the root left and another
// process took is no root (the shim, the agent's unreaped child, keeps its pid).
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
  int64_t start_ticks = 0;  // field 22: when the process started, clock ticks after boot
};
std::optional<ProcStat> ParseProcStat(std::string_view line, long ticks_per_s, long page_bytes);

// One root of a task: the process at some pid.
struct TaskRoot {
  int task = 0;             // the task it roots, named by its shim's pid
  int64_t start_ticks = 0;  // the root's ProcStat::start_ticks; 0: whatever process has the pid
};
using TaskRoots = std::map<int, TaskRoot>;  // root pid -> its root
// Each task rooted at its shim alone: {shim, {shim, 0}} for every shim.
TaskRoots ShimRoots(const std::set<int>& shims);

// Which task each of `procs` belongs to (the rules above): pid -> task, for the attributed
// processes only. A root is its task's. A root whose start_ticks differ from the process
// now at its pid, or whose pid is not in `procs`, roots nothing. A process that both rules
// would give to different tasks (a task's descendant that joined another task's session:
// it cannot, a session is joined only by its leader's descendants) goes to its nearest
// ancestor root's. Roots are pids above 1: 0, which getsid() returns for a session whose
// leader lies outside the pid namespace (a container), names no process and matches nothing.
std::map<int, int> TasksOf(const std::vector<ProcStat>& procs, const TaskRoots& roots);

struct TaskProcesses {
  std::map<int, ProcUsage> usage;  // task -> summed usage; tasks with no process left are absent
  std::map<int, int> task_of;      // pid -> task, every attributed process
};
// One pass over `proc_root`: every process's stat, attributed to the tasks of `roots`.
TaskProcesses ReadTaskProcesses(const TaskRoots& roots, std::string_view proc_root = "/proc");

// The start time (ProcStat::start_ticks) of the process `pid`; nullopt if there is none.
std::optional<int64_t> ProcStartTicks(int pid, std::string_view proc_root = "/proc");

}  // namespace cohort::agent
