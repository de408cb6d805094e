// CpuAllocator: which CPUs of the node each running task is bound to (`cohort agent
// --cpu-bind cores`; the default is none).
//
// The pool is the CPUs the agent may use: its own affinity mask at start (AffinityCpus),
// cut to the first `--cpus` of them when the agent advertises fewer. A task with cpus > 0
// gets that many distinct CPUs for its life, chosen among the least-used CPUs of the pool
// and, among those, close together: inside one NUMA node when one has room, then one
// package, then whole cores (hyper-thread siblings) before single threads of half-used
// cores, each time the smallest group that holds the rest (best fit, as Kubernetes' static
// CPU manager takes whole sockets, then cores, then threads). So tasks that the head
// placed within the node's CPU count never share a CPU.
//
// Over-subscription never fails a task: when the running tasks hold more CPUs than the
// pool (a gang restart whose previous attempt is still dying) a task gets min(cpus, pool
// size) distinct CPUs, the least-used first, so the load stays even. An agent that
// advertises more `--cpus` than its mask has (simulated nodes sharing a machine, as
// `cohort up` and the tests run them) binds nothing (CpuPoolOf) and says so once.
//
// Topology comes from /sys/devices/system/cpu (ReadCpuTopology): each CPU's core_id,
// physical_package_id and NUMA node (its nodeN entry); a CPU whose files are missing is
// a core of its own in package 0, node 0, which only loses the preference.
//
// Not thread-safe: the executor holds one under its lock.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cohort::agent {

// `cohort agent --cpu-bind`: bind each task to its CPUs (cores) or leave every task on
// all of the agent's CPUs (none, the default).
enum class CpuBind { kCores, kNone };
// kInvalidArgument naming the flag and its values for anything but "cores" and "none".
Result<CpuBind> ParseCpuBind(std::string_view s);

// The CPUs an agent that advertises `advertised` CPUs binds tasks to, out of `usable`
// (its affinity mask, ascending): the first `advertised` of them; none (tasks unbound)
// when it advertises more than it has. Such an agent is a simulated node sharing the
// machine with others (`cohort up`, the tests): it cannot know which CPUs the others
// bind, and each would put its first task on the same first CPU.
std::vector<int> CpuPoolOf(const std::vector<int>& usable, int advertised);

struct CpuPlace {
  int cpu = 0;      // the kernel's CPU number
  int core = 0;     // unique per physical core on the node (package and core_id together)
  int package = 0;  // physical_package_id
  int node = 0;     // NUMA node
};

// The places of `cpus` read from `sys_cpu_dir` (/sys/devices/system/cpu, or a fake tree
// in tests), in the order given.
std::vector<CpuPlace> ReadCpuTopology(const std::vector<int>& cpus,
                                      const std::string& sys_cpu_dir = "/sys/devices/system/cpu");

class CpuAllocator {
 public:
  // `pool`: the CPUs tasks may be bound to (not empty).
  explicit CpuAllocator(std::vector<CpuPlace> pool);

  // min(count, pool size) distinct CPUs (none for count <= 0), ascending, now counted as
  // used until Release.
  std::vector<int> Allocate(int count);
  // Gives back what Allocate returned. CPUs outside the pool are ignored.
  void Release(const std::vector<int>& cpus);

  int pool_size() const { return static_cast<int>(pool_.size()); }
  // CPUs no task holds.
  int idle() const;

 private:
  std::vector<CpuPlace> pool_;  // ascending by cpu
  std::vector<int> users_;      // per pool_ entry: tasks bound to it now
};

}  // namespace cohort::agent
