// Executor: owns the tasks running on this node.
//
// Each task runs under a task shim (see task_shim.h), a child of this process that puts
// the task in its own process group, writes its output to a log file and its result to a
// status file, and kills the whole group when asked or when this process dies. The
// executor starts shims, forwards stop requests to them, reaps them, and keeps a status
// record for every task until the caller forgets it (after the head has acknowledged the
// exit).
//
// Files, under Options::work_dir:
//   jobs/<job_id>/attempt-<attempt>/rank-<rank>.log          stdout + stderr of the task
//   jobs/<job_id>/attempt-<attempt>/rank-<rank>.status.json  written by the shim at exit
//   jobs/<job_id>/attempt-<attempt>/rank-<rank>.container-root  a Docker task's container
//                                                             init, while it runs
// Logs stay after Forget, so ReadLog keeps working for forgotten tasks.
//
// Users (task_user.h): a task whose spec names a user runs as the account
// ResolveTaskUser picks under Options::task_user; the shim enters it just before exec.
// Its log belongs to that account, mode 0600; the attempt directory (0700) and the status
// file (0600) stay this process's, so the task cannot replace them (with a link that would
// make a privileged agent write or serve another file). The spec's owned_dirs (the job's
// checkpoint directory) are created and given to the task's account with mode 0700.
//
// CPUs (when Options::cpu_pool is not empty): a task with cpus > 0 is bound to that many
// CPUs of the pool from its launch until it ends (CpuAllocator: distinct from the other
// running tasks' while they fit, least-used first when they do not), through the shim's
// --cpus and, for a Docker container, the runtime's --cpuset-cpus.
//
// Leases (when Options::lease_path is set): every task's shim watches that lease file
// (lease.h), which the owner keeps current (LeaseKeeper, lease_keeper.h), and kills its
// task by itself once the lease has run out; a process that is stopped or hung renews
// nothing, so its tasks end even though it cannot act.
//
// Threads: every public method may be called from any thread. One internal thread (the
// executor thread) starts every shim and reaps them: a shim is told of its parent's death
// by PR_SET_PDEATHSIG, which Linux ties to the thread that forked it, so shims are forked
// only from this long-lived thread. The thread waits on a pidfd per shim and reaps only
// its own shims' pids (never waitpid(-1)), so other children of the process are left
// alone. All state lives under one mutex.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <compare>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/cpu_allocator.h"
#include "agent/task_user.h"
#include "common/error.h"
#include "common/mutex.h"

namespace cohort::agent {

struct TaskKey {
  int64_t job_id = 0;
  int attempt = 0;
  int rank = 0;
  auto operator<=>(const TaskKey&) const = default;
};

struct TaskSpec {
  TaskKey key;
  std::vector<std::string> command;          // argv; command[0] is looked up in PATH
  // An allocation's task: no command; the shim holds it with a waiting process in the
  // task's account and directory (task_shim.h, --hold) until it is stopped.
  bool hold = false;
  // A batch script's task (api::JobSpec::script): the script's text, which the agent keeps
  // in the task's private directory (ScriptPath) and the shim runs (task_shim.h, --script)
  // with `command` as its arguments, in `env` less api::kRankVariables (steps beside it,
  // `cohort exec`, keep them). Empty: none.
  std::string script;
  std::map<std::string, std::string> env;    // added to (and overriding) the agent's env
  std::string workdir;                       // empty: the agent's working directory
  // Files the task's stdout and stderr are also written to (the job's output and error,
  // api/output_pattern.h, expanded; relative to workdir), opened by the shim's copier as the
  // task's account (task_shim.h); empty: the log only. Without `error`, stderr goes to
  // `output`. truncate_*: emptied when opened, unless the attempt `truncate_marker` names
  // (api::OutputTruncationMarker) has emptied it already: any task of it, on any node, that
  // shares the file (agent/output_file.h); else appended to.
  std::string output;
  std::string error;
  bool truncate_output = false;
  bool truncate_error = false;
  std::string truncate_marker;
  std::vector<int> gpus;                     // node-local GPU indices
  // CPUs reserved for the task (the job's cpus_per_task); with a CPU pool
  // (Options::cpu_pool) the task is bound to that many of them. 0: not bound.
  int cpus = 0;
  std::string user;                          // the job's user; empty: run as this process
  // Directories the task owns: created if missing (parents as this process), then given
  // to the task's account with mode 0700, never through a symbolic link. One that belongs
  // to a third account fails the start.
  std::vector<std::string> owned_dirs;
  // Non-empty: the task runs in this image under the runtime of that kind (container.h);
  // the working directory and owned_dirs are mounted into it.
  std::string container_image;
  std::string container_runtime = "podman";
};

struct TaskStatus {
  TaskKey key;
  int pid = 0;           // the shim's pid; 0 if it never started
  bool running = true;
  int exit_code = 0;     // exit status, 128 + signal when killed, 127 when it never started
  int signal = 0;        // the signal that ended the task leader, or 0
  std::string error;     // why the task could not be started or supervised; empty otherwise
  int64_t started_ms = 0;   // Unix ms
  int64_t finished_ms = 0;  // Unix ms; 0 while running
  std::string log_path;
  std::vector<int> gpus;
  int cpus = 0;
  // The CPUs the task is bound to (cpu_allocator.h), ascending; empty when it is not bound
  // (cpus 0, or no CPU pool). Kept after the task ends, when they are free again.
  std::vector<int> cpu_list;
  // A container task: the file where its shim publishes the container's init, the task's
  // second root, whose PID namespace is the task's (container_root.h); empty for a bare
  // task.
  std::string container_root_path;
};

// What a command run beside a running task needs to run in its environment (exec
// sessions, exec_session.h): the task's environment as the shim got it (added to this
// process's, less unset_env), its working directory, its account (nullopt: this
// process's), its CPUs, and for a container task the runtime and the container's name.
struct ExecTarget {
  TaskKey key;
  std::map<std::string, std::string> env;
  std::vector<std::string> unset_env;
  std::string workdir;
  std::optional<TaskIdentity> identity;
  std::string container_runtime_command;  // non-empty: `RUNTIME exec` into container_name
  std::string container_runtime;          // podman or docker
  std::string container_name;
  std::vector<int> cpus;  // the CPUs the task is bound to (TaskStatus::cpu_list); empty: none
};

struct LogChunk {
  std::string data;
  int64_t offset = 0;       // where `data` starts
  int64_t next_offset = 0;  // offset + data.size(): pass it to the next ReadLog
  int64_t size = 0;         // size of the log file when read
  bool done = false;        // the task has finished and next_offset == size
};

// How to start a task shim: `path [task-shim] --log ...`.
struct ShimCommand {
  std::string path;
  bool subcommand = true;  // put kTaskShimCommand after the path (the cohort binary needs it)
};

// The lean kTaskShimProgram in the directory of `self_exe` (the running cohort binary) if
// it is an executable file there; else `self_exe task-shim`, the same shim inside the
// whole cohort binary (correct, but every task start then loads all of cohort's libraries).
ShimCommand FindTaskShim(const std::string& self_exe);

class Executor {
 public:
  struct Options {
    std::string work_dir;     // root of the jobs/ tree; created as needed
    // A program that runs RunTaskShim, started as `<shim_path> task-shim ...`; empty:
    // FindTaskShim(SelfExePath()).
    std::string shim_path;
    std::chrono::milliseconds kill_grace{5000};  // SIGTERM → SIGKILL delay of a graceful stop
    // Non-empty: every task runs under this lease file (above); empty: no lease, the
    // shims run until stopped.
    std::string lease_path;
    // Who runs a task whose spec names a user (task_user.h), the node's name for the
    // errors, and how accounts are found (null: LookupSystemUser).
    TaskUserPolicy task_user = TaskUserPolicy::kJobUser;
    std::string node_name;
    UserLookup lookup_user;
    // Called on the executor thread, without the lock held, after a task's status flips
    // to finished (including tasks that could not be started). It may call any method
    // except that it must not block on a task (WaitAllExited).
    std::function<void()> on_task_exit;
    // Container tasks (container.h): the command of each runtime kind this node offers
    // ("podman" → "podman"); a task asking for another kind fails to start, saying which
    // the node has. And the --device values for a task's GPUs (the agent's CDI names);
    // null: none (simulated GPUs pass only the environment).
    std::map<std::string, std::string> container_runtimes = {{"podman", "podman"}, {"docker", "docker"}};
    std::function<std::vector<std::string>(const std::vector<int>& gpus)> container_devices;
    // The CPUs tasks are bound to (`cohort agent --cpu-bind cores`); empty: tasks are not
    // bound (`--cpu-bind none`).
    std::vector<CpuPlace> cpu_pool;
  };

  explicit Executor(Options options);
  // Stops every task immediately (SIGKILL of each group), waits for the shims to exit
  // (bounded), and joins the executor thread. on_task_exit may run until it returns.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Starts a task. Returns kAlreadyExists if `spec.key` is known (running, or finished
  // and not yet forgotten), kFailedPrecondition while the executor is shutting down.
  // Any other failure (empty command, directories that cannot be created, a user with no
  // account here or one this process cannot become, a shim that cannot be executed) still
  // returns success: the task is recorded as finished with
  // exit_code 127 and the reason in `error` (and in the log when it can be written), so
  // the head learns of it the same way as of any other exit. The task's environment is
  // this process's environment plus spec.env, plus HOME, USER, LOGNAME and SHELL of the
  // task's account when it is not this process's (unless spec.env sets them);
  // CUDA_VISIBLE_DEVICES is set to spec.gpus (comma-separated, empty for none) and
  // CUDA_DEVICE_ORDER to PCI_BUS_ID (so CUDA numbers GPUs as NVML does), unless spec.env
  // sets them. A task with cpus > 0 also gets COHORT_CPUS_PER_TASK (spec.cpus),
  // COHORT_CPU_BIND (the list it is bound to, "0-3"; only when bound) and OMP_NUM_THREADS
  // (the number of CPUs bound, else spec.cpus) unless spec.env sets it. A relaunch of a
  // forgotten key truncates its log. Returns at once: the
  // executor thread starts the shim (the status shows the task running, pid 0 until then);
  // a Stop before the shim starts is delivered when it does.
  Result<void> Launch(const TaskSpec& spec) EXCLUDES(mu_);

  // Stops a running task: graceful sends SIGTERM to the group and SIGKILL after
  // kill_grace; immediate sends SIGKILL to the group at once. No-op for unknown or
  // finished tasks. Returns without waiting; the exit shows up in Snapshot, with `reason`
  // (when given; the first one given) leading its `error`, so that the head learns why
  // the agent stopped it ("task 0 used 23.1 GiB of GPU 2, over its share of 20 GiB ...").
  void Stop(const TaskKey& key, bool immediate, std::string reason = "") EXCLUDES(mu_);
  void StopAll(bool immediate) EXCLUDES(mu_);
  // Has the shim deliver signal `signo` to the task's process group (the job's
  // checkpoint_signal): sigqueue(SIGUSR2) to the shim with the number as its value.
  // False when the task is unknown, finished or not yet spawned (try again later).
  bool Signal(const TaskKey& key, int signo) EXCLUDES(mu_);

  // Blocks until no task is running or `timeout` passes; true when none is running.
  bool WaitAllExited(std::chrono::milliseconds timeout) EXCLUDES(mu_);

  // Every known task, running and finished-but-not-forgotten, ordered by key.
  std::vector<TaskStatus> Snapshot() const EXCLUDES(mu_);

  // Drops a finished task's record (its files stay). No-op if unknown or still running.
  void Forget(const TaskKey& key) EXCLUDES(mu_);

  // Reads up to `max_bytes` (at most 16 MiB) of a task's log from `offset`; a negative
  // offset counts from the end (-4096: the last 4 KiB); an offset past the end reads
  // nothing, at the end. Returns kNotFound if the key is unknown and has no log file (a
  // forgotten task's log is still readable), kInvalidArgument if max_bytes <= 0.
  Result<LogChunk> ReadLog(const TaskKey& key, int64_t offset, int64_t max_bytes) const EXCLUDES(mu_);

  // How to run a command beside a running task (ExecTarget). kNotFound naming the task when
  // this node has no such task, kFailedPrecondition when it has ended or is still starting
  // after `start_wait` (its shim is being spawned).
  Result<ExecTarget> ExecTargetOf(const TaskKey& key,
                                  std::chrono::milliseconds start_wait = std::chrono::seconds(10)) EXCLUDES(mu_);
  // True while `key` runs here.
  bool IsRunning(const TaskKey& key) const EXCLUDES(mu_);

  // Paths of a task's files (whether or not the task exists).
  std::string LogPath(const TaskKey& key) const;
  std::string StatusPath(const TaskKey& key) const;
  std::string ContainerRootPath(const TaskKey& key) const;
  // A batch script's text, private to the agent (TaskSpec::script).
  std::string ScriptPath(const TaskKey& key) const;

 private:
  struct Task {
    TaskStatus status;
    TaskSpec spec;
    bool spawned = false;   // the shim was started (or failed to start); pid is final
    int pidfd = -1;         // -1 when pidfd_open is unavailable (polled with WNOHANG)
    int pending_signal = 0; // a stop that arrived before the shim was started
    std::string stop_reason; // why this process stopped it (Stop's reason); empty: not given
    std::optional<ExecTarget> exec;  // set once the shim runs
  };

  // Marks `t` finished now and gives its CPUs back to the pool.
  void Finish(Task& t) REQUIRES(mu_);

  void Loop() EXCLUDES(mu_);                         // the executor thread
  void StartShim(const TaskKey& key) EXCLUDES(mu_);  // executor thread
  void TryReap(const TaskKey& key) EXCLUDES(mu_);    // executor thread
  void Wake();                                       // any thread; lock-free (eventfd)
  // The shim's command line for a task whose environment is `env`, bound to `cpu_list`
  // (empty: unbound); an error when the task cannot be started here (a container runtime
  // this node does not offer).
  Result<std::vector<std::string>> ShimArgv(const TaskKey& key, const TaskSpec& spec,
                                            const std::optional<TaskAccount>& account,
                                            const std::map<std::string, std::string>& env,
                                            const std::vector<int>& cpu_list) const;
  // StartShim's files, before the shim runs: the account (from spec.user), the attempt
  // directory, the log (truncated, owned by the account), the owned directories. Returns
  // the error that fails the start, or "" with `account` set (nullopt: this process).
  std::string PrepareTask(const TaskKey& key, const TaskSpec& spec, std::optional<TaskAccount>& account,
                          bool& have_log) const;

  const Options options_;
  const ShimCommand shim_;  // from options_.shim_path, or found next to this executable
  int wake_fd_ = -1;  // eventfd that interrupts the executor thread's poll

  mutable Mutex mu_;
  CondVar cv_;                                        // signalled on spawn and on exit
  std::map<TaskKey, Task> tasks_ GUARDED_BY(mu_);
  std::deque<TaskKey> start_queue_ GUARDED_BY(mu_);
  std::optional<CpuAllocator> cpus_ GUARDED_BY(mu_);  // from options_.cpu_pool; nullopt: no binding
  bool shutting_down_ GUARDED_BY(mu_) = false;        // Launch refuses when set
  bool quit_ GUARDED_BY(mu_) = false;                 // ends the executor thread
  std::thread thread_;                                // started last in the constructor
};

}  // namespace cohort::agent
