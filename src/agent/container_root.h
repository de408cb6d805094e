// Container task roots (issue 18): how a container's processes are found to be its task's,
// so that their CPU, RSS and GPU memory count for it (proc_usage.h) and gpu_memory_enforce
// sees them (gpu/task_memory.h).
//
// The task shim learns the container's init and publishes it as its task's second root
// (task_shim.h, --container-root), for Podman and Docker alike; the agent gives the task
// every process of the init's PID namespace (proc_usage.h, rule 3), so processes started
// with `docker exec` or `podman exec` (children of containerd's shim or of an exec conmon,
// not of the init) count too. Docker needs the root for the container's own processes as
// well: `docker run` is only a client, and the container's init is a child of the Docker
// daemon's containerd shim. The shim finds the init:
//  - it asks the runtime (`RUNTIME container inspect --format '{{.State.Pid}}' NAME`, by the name the
//    agent gave the container: container.h) in a child process, so its poll loop never
//    waits on the daemon: 100 ms after the task starts, then backing off to every second,
//    until an answer names a pid, and again whenever the init it published is gone while
//    the task runs (the container restarted: `--rm` containers are not restarted by
//    Docker, an operator's `docker restart` still may);
//  - an error or a pid of 0 is the inspect racing the start (the container is not created
//    or not started yet), or the container's exit: no answer, ask again later;
//  - the pid is checked in /proc before it is published: it must be the init of a PID
//    namespace (its last NSpid in /proc/PID/status is 1), which refuses a pid that the
//    init left between the answer and the check and another process took; its start time
//    is recorded with it;
//  - the root file (one line "PID START_TICKS", replaced atomically) is read by the agent
//    with /proc once a second, and TasksOf takes the root only while the process at PID
//    started at START_TICKS (proc_usage.h): a pid reused after the container exited
//    counts for nobody, however late the agent reads.
// Chosen over the container's cgroup (exact, but its path depends on the cgroup driver and
// version, `/docker/ID` with cgroupfs and `docker-ID.scope` with systemd, and on rootless
// mode), over matching containerd's shim by its command line (`-id ID`) and over reading
// every process's /proc/PID/cgroup (another file per process per second on every node):
// it costs one runtime call per container start, and it makes no copy of the walk: the
// set of roots per task grows by one.
//
// ContainerRootFinder is driven by the shim's single thread; the other functions are plain
// and any thread may call them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"

namespace cohort::agent {

struct ContainerRoot {
  int pid = 0;
  int64_t start_ticks = 0;  // ProcStat::start_ticks of pid
  bool operator==(const ContainerRoot&) const = default;
};

// `RUNTIME inspect --format '{{.State.Pid}}' NAME`'s output: the pid, or nullopt for 0
// (not running), an empty answer or anything that is not one positive number.
std::optional<int> ParseInspectPid(std::string_view output);

// The process `pid` as a container's root: nullopt unless it is the init of a PID
// namespace below this one (the NSpid line of PROC/PID/status ends in 1) and its start
// time can be read.
std::optional<ContainerRoot> CheckContainerInit(int pid, std::string_view proc_root = "/proc");

// Writes "PID START_TICKS\n" to `path` atomically (path.tmp, then rename; 0600, never
// through a symbolic link). False when it cannot.
bool WriteContainerRoot(const std::string& path, const ContainerRoot& root);
// The root in `path`; nullopt when the file is missing or malformed.
std::optional<ContainerRoot> ReadContainerRoot(const std::string& path);

// The shim's search for its container's init (above). It starts one inspect at a
// time as a child of the calling process, which reaps it and hands its status to
// OnChildExit; its output goes to `root_path`.inspect.
class ContainerRootFinder {
 public:
  ContainerRootFinder(std::string runtime_command, std::string container_name, std::string root_path);
  ContainerRootFinder(const ContainerRootFinder&) = delete;
  ContainerRootFinder& operator=(const ContainerRootFinder&) = delete;

  // The task started at `now`: the first inspect is due 100 ms later.
  void Start(SteadyTime now);
  // Does what is due at `now`: checks that the published init still lives (once a
  // second), starts an inspect.
  void Poll(SteadyTime now);
  // Milliseconds until Poll has something to do; -1 when nothing is due (not started, or
  // an inspect is running: its exit wakes the caller).
  int64_t MsUntilDue(SteadyTime now) const;
  // `pid` exited with wait status `status`: true when it was this finder's inspect (its
  // answer is then taken), false for any other child.
  bool OnChildExit(pid_t pid, int status, SteadyTime now);
  // The task is over: removes the root file and the inspect's output; nothing more is
  // published (the caller has reaped or killed a running inspect).
  void Clear();
  // The init published last, if any (it may have exited since).
  const std::optional<ContainerRoot>& root() const { return root_; }

 private:
  void Backoff(SteadyTime now);

  const std::string runtime_command_;
  const std::string name_;
  const std::string root_path_;
  const std::string out_path_;
  bool started_ = false;
  pid_t inspect_ = -1;           // the running inspect, or -1
  SteadyTime due_{};             // the next inspect (no root) or liveness check (a root)
  Millis backoff_{100};
  std::optional<ContainerRoot> root_;
};

}  // namespace cohort::agent
