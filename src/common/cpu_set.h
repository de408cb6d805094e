// CPU sets as the kernel writes them: the list format of /proc/PID/status's
// Cpus_allowed_list, cgroup cpusets and `taskset -c` ("0-3,8,10-11"), and the calls that
// read and set a process's affinity. The one reader of a process's affinity for both
// planes: the agent reads its own mask with AffinityCpus (its CPU pool, cpu_allocator.h)
// and the engine a rank's (its thread count, engine/trainer/threads.h); the task shim binds
// a task with BindToCpus in the forked child before exec (task_shim.h, --cpus). Plain
// functions, thread-safe; CPU numbers are the kernel's (0 ..).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cohort {

// The most CPUs a list may name (the kernel's NR_CPUS limit is 8192).
inline constexpr int kMaxCpuNumber = 8191;

// "0-3,8" -> {0, 1, 2, 3, 8}, sorted and without repeats. kInvalidArgument naming the piece
// that is wrong for anything else: an empty list, a reversed range, a number past
// kMaxCpuNumber, stray characters.
Result<std::vector<int>> ParseCpuList(std::string_view text);
// The inverse: ascending, consecutive CPUs as ranges ({0, 1, 2, 3, 8} -> "0-3,8"); "" for
// none. `cpus` need not be sorted.
std::string FormatCpuList(std::vector<int> cpus);

// The CPUs this process may run on (sched_getaffinity), ascending. An error when the
// kernel refuses, which callers treat as "no mask known".
Result<std::vector<int>> AffinityCpus();
// Restricts the calling thread (in a single-threaded child: the process, and what it
// execs) to `cpus`. Returns 0 or the errno of sched_setaffinity (EINVAL when none of them
// is allowed here, e.g. outside this process's cpuset). Calls only malloc-free code:
// meant for a forked child before exec.
int BindToCpus(const std::vector<int>& cpus);

}  // namespace cohort
