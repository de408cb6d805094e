// Resource use of tasks, read from /proc.
//
// Every task runs in its own session: its task shim calls setsid(), so the shim's pid is
// the session id of the shim, the task and everything the task starts. A task's use is
// the sum over the processes of that session of CPU time (utime + stime, plus the
// children's cutime + cstime, so processes that have already been reaped still count)
// and resident memory. Plain functions over /proc; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>

namespace cohort::agent {

struct ProcUsage {
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
};

// One line of /proc/PID/stat: the process's session and its usage. std::nullopt when the
// line is malformed. `ticks_per_s` is sysconf(_SC_CLK_TCK), `page_bytes` the page size.
struct ProcStat {
  int session = 0;
  ProcUsage usage;
};
std::optional<ProcStat> ParseProcStat(std::string_view line, long ticks_per_s, long page_bytes);

// The summed usage of every process in each of `sessions` (by session id); sessions
// with no process left are absent. One pass over /proc.
std::map<int, ProcUsage> UsageBySession(const std::set<int>& sessions, std::string_view proc_root = "/proc");

// The session of each of `pids` (from /proc/PID/stat); pids that are gone are absent.
// How GPU processes (NVML reports pids) are mapped to tasks.
std::map<int, int> SessionsOf(const std::set<int>& pids, std::string_view proc_root = "/proc");

}  // namespace cohort::agent
