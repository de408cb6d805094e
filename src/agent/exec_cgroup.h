// Cgroup v2 leaves for `cohort exec` commands (issue 18): a process can leave its session
// and its parent (setsid, a double fork that reparents it to init), never its cgroup.
//
// A command exec'd into a bare task is the agent's child, not the shim's, so the shim's
// child-subreaper (task_shim.h) does not catch what it orphans, and its session and tree
// (proc_usage.h, rules 1 and 2) lose a descendant that calls setsid and double-forks: it
// would run on outside the task's usage and outlive the session's kill. Slurm's answer is
// proctrack/cgroup, and it is this one: each session's command joins a leaf cgroup of its
// own, made beside the agent in the agent's own cgroup v2 (PARENT/LeafName(ID), below),
// before it calls setsid or execs, so everything it ever starts is a member. The agent
// attributes the leaf's members to the task (proc_usage.h, rule 4) and kills them when
// the session ends (cgroup.kill where the kernel has it, 5.14 on; else SIGKILL rounds over
// cgroup.procs until it is empty), then removes the leaf. No controller is enabled: the
// leaf only groups, so it works under any cgroup v2 layout that lets the agent write its
// own cgroup (root, or a systemd unit with Delegate=yes), a hybrid one's unified mount
// included. Chosen over making the agent a child subreaper: a process reparented to the
// agent has lost the ancestry that names its task, while a cgroup keeps naming it.
//
// Fallback: where no cgroup v2 is mounted or the agent's cgroup is not writable (not
// root, an undelegated systemd unit, a read-only /sys/fs/cgroup in a container),
// CgroupParent says why and sessions run without a leaf, as before: a command's session
// and tree still count and are killed, but what leaves both (setsid plus a double fork)
// escapes the usage and the kill. A container task's command needs no leaf: what
// `docker exec` starts lives in the container's PID namespace (rule 3).
//
// Plain functions; any thread. JoinCgroupLeaf is async-signal-safe (a forked child).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cohort::agent {

// Where leaves go: the cgroup v2 directory of process `self` (the agent: "/proc/self"),
// its "0::PATH" line of cgroup under the first cgroup2 mount of its mountinfo, checked
// to be a writable cgroup2 directory. kUnavailable saying why not (the fallback above).
Result<std::string> CgroupParent(std::string_view self = "/proc/self");

// A leaf made for one command: its directory and an open cgroup.procs to join it by.
struct CgroupLeaf {
  std::string dir;
  int procs_fd = -1;  // close-on-exec; closed by RemoveCgroupLeaf
};
// Makes PARENT/NAME (a new directory; kUnavailable naming it when it cannot, or when it is
// not a cgroup: no cgroup.procs to open).
Result<CgroupLeaf> MakeCgroupLeaf(const std::string& parent, const std::string& name);

// Moves the calling process into the leaf of `procs_fd` (writes "0"); 0 or an errno.
// Async-signal-safe.
int JoinCgroupLeaf(int procs_fd);

// The pids in DIR/cgroup.procs (as the reader's PID namespace sees them; those outside it,
// listed as 0, are left out). Empty when the leaf is empty or gone.
std::vector<int> CgroupMembers(const std::string& dir);

// SIGKILLs every member of DIR (cgroup.kill, else rounds over cgroup.procs), waits up to
// `wait_ms` for it to empty, removes it and closes leaf.procs_fd. false (the directory
// left behind) when it did not empty or cannot be removed.
bool RemoveCgroupLeaf(CgroupLeaf& leaf, int wait_ms = 2000);

// Only kills, as RemoveCgroupLeaf does first: for a session being ended.
void KillCgroupMembers(const std::string& dir);

// The name of the leaf of this agent's session `id`: cohort-exec-NS-PID-START-ID, where NS
// is the inode of the agent's PID namespace and PID and START its pid and start time
// (/proc/PID/stat field 22) as that namespace sees them. Agents in several PID namespaces
// may share one cgroup (containers, `unshare --pid`), and a pid is reused: the three name
// the agent exactly. `proc_root` is for tests.
std::string LeafName(std::string_view id, std::string_view proc_root = "/proc");

// The leaves under `parent` of agents that are gone: an agent killed outright leaves its
// sessions' leaves, and in them what had left the commands' sessions (a parent-death
// signal reaches only the commands). An agent is gone when its leaf names this reader's
// PID namespace and no process there has its pid and start time; a leaf of another
// namespace is left alone (its pid means nothing here), and so is one whose namespace or
// pid cannot be read. An older agent's leaf (cohort-exec-PID-ID) is judged by its pid
// alone. Each leaf judged gone is emptied (its members killed) and removed; returns how
// many.
int RemoveLeftoverLeaves(const std::string& parent, std::string_view proc_root = "/proc");

}  // namespace cohort::agent
