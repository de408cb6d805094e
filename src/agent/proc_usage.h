// Resource use of tasks, read from /proc.
//
// A task is named by its shim's pid. Its roots are its shim, the init of its container
// (container_root.h: the shim of a Podman or Docker task publishes it) and the command of
// each `cohort exec` session into it (exec_session.h). A process belongs to the task when
//  1. one of its roots is among its ancestors (parent pids): the shim is a child subreaper
//     (task_shim.h), so every descendant of the task that leaves the session and is
//     orphaned is reparented to the shim and stays in its tree; a container's PID
//     namespace reparents its orphans to its init; or
//  2. its session is one of its roots: the shim calls setsid(), so the shim, the task and
//     what it starts share the session whose id is the shim's pid (a container's init and
//     an exec session's command lead sessions too); or
//  3. it lives in the PID namespace of one of the task's container inits: every process of
//     a container is in its PID namespace, whoever started it. `docker exec` and `podman
//     exec` start theirs as children of containerd's shim or of an exec conmon, neither
//     of them the task's nor below the container's init, so rules 1 and 2 miss them; they
//     join the container's PID namespace (and its cgroup) through setns. The namespace
//     is read as the inode of /proc/PID/ns/pid. Chosen over the container's cgroup, which
//     exec'd processes join too, because the cgroup does not name the container on every
//     node: rootless Podman on cgroup v1 (this development VM) runs containers in the
//     caller's own cgroup, and the path differs with the cgroup driver and version; a
//     container always has a PID namespace of its own (the executor never passes
//     --pid=host), Podman's and Docker's alike, so one rule serves both runtimes.
//  4. it is a member of one of its roots' cgroup v2 leaves (TaskRoot::cgroup): the leaf a
//     `cohort exec` command runs in (exec_cgroup.h), which whatever it starts stays in,
//     even a process that left the command's session and tree (setsid, a double fork).
// Rule 1 is what measures a Podman container's own processes without rule 3 (conmon
// daemonizes into a session of its own and is reparented to the shim; the container's
// init is conmon's child), Docker's need the published init (its container is a child of
// the Docker daemon's containerd shim).
//
// Races and reuse: a root other than the shim carries its start time, and a pid that the
// root left and another process took is no root (the shim, the agent's unreaped child,
// keeps its pid). A namespace is taken from a root only while the root lives: its start
// time is read again after its namespace, so the inode belongs to a namespace alive at
// that moment (an inode is reused only after its namespace is freed). A process is given
// to a task by rule 3 only if its start time, read again after its namespace, is the one
// its stat had: a pid that changed hands between the two reads is given to nobody. A
// namespace root whose namespace is the reader's own (a file naming a host process) roots
// nothing by rule 3. Rule 3 costs a readlink per process that rules 1 and 2 leave to no
// task, and only in passes where some task has a container init. Rule 4, like rule 3,
// gives a member only if its start time, read again after the leaf's cgroup.procs, is its
// stat's, and only what rules 1 and 2 leave; it reads one cgroup.procs per leaf. Rules 3
// and 4 give their processes directly, without a second walk of the tree: what a
// namespace's or a leaf's member starts is a member too (a nested PID namespace's
// processes excepted, which reach the task only through its tree).
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
#include <string>
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
  // The init of a container's PID namespace: every process of that namespace is the
  // task's (rule 3).
  bool namespace_init = false;
  // A cgroup v2 directory whose every member is the task's (rule 4); empty: none.
  std::string cgroup = {};
};
// Whether `root` names the process `p` at its pid: a pid above 1 and, when the root
// carries a start time, the same one.
bool RootNames(const TaskRoot& root, const ProcStat& p);
using TaskRoots = std::map<int, TaskRoot>;  // root pid -> its root
// Each task rooted at its shim alone: {shim, {shim, 0}} for every shim.
TaskRoots ShimRoots(const std::set<int>& shims);

// Which task each of `procs` belongs to (rules 1 and 2 above): pid -> task, for the attributed
// processes only. A root is its task's. A root whose start_ticks differ from the process
// now at its pid, or whose pid is not in `procs`, roots nothing. A process that rules 1
// and 2 would give to different tasks (a task's descendant that joined another task's
// session: it cannot, a session is joined only by its leader's descendants) goes to its
// nearest ancestor root's. Rules 1 and 2 only: rules 3 and 4 read the process's namespace
// or a leaf's members, which ReadTaskProcesses does for what this leaves. Roots are pids
// above 1: 0, which getsid() returns for a session whose leader lies outside the pid
// namespace (a container), names no process and matches nothing.
std::map<int, int> TasksOf(const std::vector<ProcStat>& procs, const TaskRoots& roots);

struct TaskProcesses {
  std::map<int, ProcUsage> usage;  // task -> summed usage; tasks with no process left are absent
  std::map<int, int> task_of;      // pid -> task, every attributed process
};
// One pass over `proc_root`: every process's stat, attributed to the tasks of `roots`; the
// PID namespaces of namespace roots and of the processes rules 1 and 2 leave are read
// (above) only when some namespace root lives, the cgroup.procs of the leaves of the
// roots that live (rule 4) only when some process is left.
TaskProcesses ReadTaskProcesses(const TaskRoots& roots, std::string_view proc_root = "/proc");

// The inode of the PID namespace of process `pid` ("self" too): the target of
// PROC/PID/ns/pid, "pid:[INODE]". nullopt when the process is gone, the link cannot be
// read (another user's process, for an agent that is not root) or is malformed.
std::optional<uint64_t> ReadPidNamespace(std::string_view pid, std::string_view proc_root = "/proc");

// The processes of `proc_root` whose session is `session` (> 1), its leader included if it
// lives; empty for any other session.
std::vector<int> SessionMembers(int session, std::string_view proc_root = "/proc");

// The start time (ProcStat::start_ticks) of the process `pid`; nullopt if there is none.
std::optional<int64_t> ProcStartTicks(int pid, std::string_view proc_root = "/proc");

}  // namespace cohort::agent
