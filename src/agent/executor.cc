#include "agent/executor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>

#include "agent/container.h"
#include "api/job_env.h"
#include "agent/task_shim.h"
#include "agent/task_identity.h"
#include "common/clock.h"
#include "common/cpu_set.h"
#include "common/file_modes.h"
#include "common/json.h"
#include "common/log.h"
#include "common/subprocess.h"

namespace cohort::agent {
namespace {

namespace fs = std::filesystem;

// Poll timeouts of the executor thread: pidfds wake it on exit, so the timeout is only a
// safety net; without pidfd_open every shim is polled with WNOHANG at this short period.
constexpr int kPollMsWithPidfd = 200;
constexpr int kPollMsWithoutPidfd = 10;
// Beyond kill_grace, how long the destructor waits for shims to exit.
constexpr Millis kShutdownExtraWait{35000};
constexpr int64_t kMaxStatusFileBytes = 64 * 1024;
// The most one ReadLog call returns, whatever max_bytes asks for.
constexpr int64_t kMaxLogChunkBytes = 16 << 20;

std::string KeyName(const TaskKey& k) {
  return fmt::format("job {} attempt {} rank {}", k.job_id, k.attempt, k.rank);
}

std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

void AppendLine(const std::string& path, std::string_view line) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  std::string text = fmt::format("cohort: {}\n", line);
  (void)!write(fd, text.data(), text.size());
  close(fd);
}

struct ShimResult {
  int exit_code = 0;
  int signal = 0;
  std::string error;
};

// Reads the shim's status file; nullopt if it is missing or malformed.
std::optional<ShimResult> ReadStatusFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text(kMaxStatusFileBytes, '\0');
  ssize_t n = read(fd, text.data(), text.size());
  close(fd);
  if (n <= 0) return std::nullopt;
  text.resize(static_cast<size_t>(n));
  auto j = ParseJson(text, "status file");
  if (!j || !j->is_object()) return std::nullopt;
  auto r = ObjectReader::Open(*j);
  if (!r) return std::nullopt;
  auto code = r->Int("exit_code", std::nullopt, 0, 255);
  auto sig = r->Int("signal", 0, 0, 255);
  auto err = r->String("error", std::string());
  if (!code || !sig || !err) return std::nullopt;
  return ShimResult{static_cast<int>(*code), static_cast<int>(*sig), *err};
}

// Creates `dir` (parents as this process) and gives it to the task's account (nullopt:
// this process) with mode 0700, never through a symbolic link. A directory that belongs to
// a third account stays as it is and fails the start: handing it over would give the task
// someone else's files.
Result<void> PrepareOwnedDir(const std::string& dir, const std::optional<TaskAccount>& account) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Errorf(ErrorCode::kInternal, "cannot create {}: {}", dir, ec.message());
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errorf(ErrorCode::kInternal, "cannot open directory {}: {}", dir, strerror(errno));
  const uid_t self = geteuid();
  const uid_t uid = account ? account->identity.uid : self;
  std::string error;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    error = fmt::format("stat {}: {}", dir, strerror(errno));
  } else if (st.st_uid != uid && st.st_uid != self) {
    error = fmt::format("{} belongs to uid {}, not to the task's user (uid {})", dir, st.st_uid, uid);
  } else if (st.st_uid != uid && fchown(fd, uid, account->identity.gid) != 0) {
    error = fmt::format("cannot give {} to uid {}: {}", dir, uid, strerror(errno));
  } else if ((st.st_mode & 07777) != 0700 && fchmod(fd, 0700) != 0) {
    error = fmt::format("chmod {}: {}", dir, strerror(errno));
  }
  close(fd);
  if (!error.empty()) return MakeError(ErrorCode::kInternal, std::move(error));
  return {};
}

Executor::Options Normalize(Executor::Options o) {
  if (o.kill_grace < Millis(0)) o.kill_grace = Millis(0);
  return o;
}

ShimCommand ResolveShim(const std::string& shim_path) {
  if (!shim_path.empty()) return ShimCommand{shim_path, true};
  const std::string self = SelfExePath();
  ShimCommand shim = FindTaskShim(self);
  if (shim.path == self) {
    LOG_WARN("executor: no {} next to {}; tasks start under `{} {}` instead, which loads all of cohort's "
             "libraries for every task",
             kTaskShimProgram, self, self, kTaskShimCommand);
  }
  return shim;
}

}  // namespace

ShimCommand FindTaskShim(const std::string& self_exe) {
  fs::path lean = fs::path(self_exe).parent_path() / kTaskShimProgram;
  std::error_code ec;
  if (fs::is_regular_file(lean, ec) && access(lean.c_str(), X_OK) == 0) return ShimCommand{lean.string(), false};
  return ShimCommand{self_exe, true};
}

Executor::Executor(Options options)
    : options_(Normalize(std::move(options))), shim_(ResolveShim(options_.shim_path)) {
  if (!options_.cpu_pool.empty()) {
    MutexLock lk(mu_);
    cpus_.emplace(options_.cpu_pool);
  }
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) LOG_WARN("executor: eventfd: {}; falling back to polling", strerror(errno));
  thread_ = std::thread(&Executor::Loop, this);
}

Executor::~Executor() {
  {
    MutexLock lk(mu_);
    shutting_down_ = true;
  }
  StopAll(/*immediate=*/true);
  if (!WaitAllExited(options_.kill_grace + kShutdownExtraWait)) {
    LOG_WARN("executor: some task shims did not exit; leaving them");
  }
  {
    MutexLock lk(mu_);
    quit_ = true;
  }
  Wake();
  thread_.join();
  for (auto& [key, t] : tasks_) {
    if (t.pidfd >= 0) close(t.pidfd);
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::string Executor::LogPath(const TaskKey& k) const {
  return fmt::format("{}/jobs/{}/attempt-{}/rank-{}.log", options_.work_dir, k.job_id,
                     k.attempt, k.rank);
}

std::string Executor::StatusPath(const TaskKey& k) const {
  return fmt::format("{}/jobs/{}/attempt-{}/rank-{}.status.json", options_.work_dir, k.job_id,
                     k.attempt, k.rank);
}

std::string Executor::ContainerRootPath(const TaskKey& k) const {
  return fmt::format("{}/jobs/{}/attempt-{}/rank-{}.container-root", options_.work_dir, k.job_id, k.attempt,
                     k.rank);
}

std::string Executor::ScriptPath(const TaskKey& k) const {
  return fmt::format("{}/jobs/{}/attempt-{}/rank-{}.script", options_.work_dir, k.job_id, k.attempt, k.rank);
}

void Executor::Wake() {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

Result<void> Executor::Launch(const TaskSpec& spec) {
  MutexLock lk(mu_);
  if (shutting_down_) {
    return Errorf(ErrorCode::kFailedPrecondition, "executor is shutting down; not starting {}",
                  KeyName(spec.key));
  }
  if (tasks_.contains(spec.key)) {
    return Errorf(ErrorCode::kAlreadyExists, "task {} already exists", KeyName(spec.key));
  }
  Task t;
  t.spec = spec;
  t.status.key = spec.key;
  t.status.running = true;
  t.status.log_path = LogPath(spec.key);
  t.status.gpus = spec.gpus;
  t.status.cpus = spec.cpus;
  // Chosen here, under the lock, so tasks launched together get distinct CPUs whatever
  // order their shims start in.
  if (cpus_ && spec.cpus > 0) t.status.cpu_list = cpus_->Allocate(spec.cpus);
  // Every container's init is found by name and its PID namespace is the task's
  // (container_root.h, proc_usage.h).
  if (!spec.container_image.empty()) {
    t.status.container_root_path = ContainerRootPath(spec.key);
  }
  tasks_.emplace(spec.key, std::move(t));
  if (std::this_thread::get_id() == thread_.get_id()) {  // from on_task_exit
    lk.Unlock();
    StartShim(spec.key);
    return {};
  }
  // The executor thread forks the shim. The caller does not wait for it: the agent's
  // heartbeat loop launches whole gangs, and forking dozens of shims on a loaded node takes
  // longer than a fence timeout (tasks would die of their own unrenewed leases).
  start_queue_.push_back(spec.key);
  lk.Unlock();
  Wake();
  return {};
}

void Executor::StartShim(const TaskKey& key) {
  TaskSpec spec;
  std::vector<int> cpu_list;
  {
    MutexLock lk(mu_);
    auto it = tasks_.find(key);
    if (it == tasks_.end()) return;
    spec = std::move(it->second.spec);
    it->second.spec = TaskSpec{};
    cpu_list = it->second.status.cpu_list;
  }
  const std::string log = LogPath(key);
  std::optional<TaskAccount> account;
  bool have_log = false;
  std::string error = PrepareTask(key, spec, account, have_log);
  pid_t pid = -1;
  int pidfd = -1;
  ExecTarget exec;
  if (error.empty() && !spec.hold && spec.script.empty() && (spec.command.empty() || spec.command[0].empty())) {
    error = "empty command";
  }
  if (error.empty() && spec.hold && (!spec.command.empty() || !spec.container_image.empty())) {
    error = "an allocation's task runs no command and no container";
  }
  if (error.empty()) {
    SpawnOptions so;
    // The agent's own credentials stay with it: a task inherits the agent's environment,
    // and with it a join token would let the task register nodes, an operator's token act
    // as them. The task's own (its job's token, what its spec sets) come from spec.env.
    // The CPU variables are this agent's word about this task (set below when it binds):
    // an agent that itself runs as a bound task (nested, or a test under a bound agent)
    // must not pass its own on, or an unbound rank would take its mask for its share
    // (engine/trainer/threads.h).
    so.unset_env = {"COHORT_JOIN_TOKEN", "COHORT_TOKEN", "COHORT_CPU_BIND", "COHORT_CPUS_PER_TASK"};
    so.env = spec.env;
    if (account) AddUserEnvironment(*account, so.env);
    // GPU indices are NVML's, which count in PCI bus order; CUDA must count the same way.
    so.env.try_emplace("CUDA_VISIBLE_DEVICES", JoinInts(spec.gpus));
    so.env.try_emplace("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    if (spec.cpus > 0) {
      // Slurm's SLURM_CPUS_PER_TASK and SLURM_CPU_BIND_LIST under our names; the
      // OpenMP/BLAS thread count follows the CPUs the task has (Slurm's documented
      // OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK, set for the user as torchrun sets its
      // own), unless the job chose one.
      so.env["COHORT_CPUS_PER_TASK"] = std::to_string(spec.cpus);
      if (!cpu_list.empty()) so.env["COHORT_CPU_BIND"] = FormatCpuList(cpu_list);
      // Only for a bound task: an unbound one may use every CPU of the agent, and its
      // thread count stays the job's (or its runtime's) choice, as before binding.
      if (!cpu_list.empty()) so.env.try_emplace("OMP_NUM_THREADS", std::to_string(cpu_list.size()));
    }
    if (auto argv = ShimArgv(key, spec, account, so.env, cpu_list)) {
      so.argv = std::move(*argv);
    } else {
      error = argv.error().message;
    }
    so.stdout_path = log;            // the shim's own messages land in the log too
    so.new_process_group = false;    // the shim calls setsid(), which a group leader cannot
    so.parent_death_signal = SIGUSR1;
    // The signals the shim acts on stay blocked from its first instruction: one sent
    // right after the spawn (a stop, a checkpoint signal) waits for its signalfd instead
    // of killing it by the default action.
    so.blocked_signals = {SIGTERM, SIGUSR1, SIGUSR2};
    exec.key = key;
    exec.env = so.env;
    exec.unset_env = so.unset_env;
    if (!spec.script.empty()) {
      for (const char* name : api::kRankVariables) {
        so.env.erase(name);
        so.unset_env.emplace_back(name);
      }
    }
    exec.workdir = spec.workdir;
    exec.cpus = cpu_list;
    if (account) exec.identity = account->identity;
    if (!spec.container_image.empty()) {
      auto runtime = options_.container_runtimes.find(spec.container_runtime);
      if (runtime != options_.container_runtimes.end()) exec.container_runtime_command = runtime->second;
      exec.container_runtime = spec.container_runtime;
      exec.container_name = ContainerName(options_.work_dir, key.job_id, key.attempt, key.rank);
    }
    if (error.empty()) {
      auto child = Subprocess::Spawn(so);
      if (!child) {
        error = "cannot start the task shim: " + child.error().message;
      } else {
        pid = child->pid();
        pidfd = PidfdOpen(pid);
      }
    }
  }
  if (!error.empty()) {
    if (have_log) AppendLine(log, error);
    LOG_WARN("executor: {}: {}", KeyName(key), error);
  } else {
    LOG_INFO("executor: started {} (shim pid {})", KeyName(key), pid);
  }

  const bool failed = !error.empty();
  {
    MutexLock lk(mu_);
    Task& t = tasks_.at(key);  // a running task cannot be forgotten
    t.spawned = true;
    t.status.started_ms = NowUnixMs();
    if (failed) {
      t.status.exit_code = 127;
      t.status.error = error;
      Finish(t);
      t.status.finished_ms = t.status.started_ms;
    } else {
      t.status.pid = pid;
      t.pidfd = pidfd;
      t.exec = std::move(exec);
      if (t.pending_signal) kill(pid, t.pending_signal);
    }
  }
  cv_.NotifyAll();
  if (failed && options_.on_task_exit) options_.on_task_exit();
}

std::string Executor::PrepareTask(const TaskKey& key, const TaskSpec& spec, std::optional<TaskAccount>& account,
                                  bool& have_log) const {
  const std::string log = LogPath(key);
  const std::string status = StatusPath(key);
  have_log = false;
  if (auto r = MakePrivateDir(fs::path(log).parent_path().string()); !r) return r.error().message;
  std::error_code ec;
  fs::remove(status, ec);
  fs::remove(status + ".tmp", ec);
  fs::remove(ContainerRootPath(key), ec);  // an earlier run's container is no root of this one
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return fmt::format("cannot create {}: {}", log, strerror(errno));
  have_log = true;
  auto resolved = ResolveTaskUser(spec.user, options_.task_user, geteuid(), options_.node_name,
                                  options_.lookup_user ? options_.lookup_user : UserLookup(LookupSystemUser));
  std::string error;
  if (!resolved) {
    error = resolved.error().message;
  } else {
    account = std::move(*resolved);
    // The task writes its log through the descriptor the shim hands it; the file is its
    // account's, and no one else's to read (the agent reads it as root, or as its owner).
    if (fchmod(fd, 0600) != 0 ||
        (account && fchown(fd, account->identity.uid, account->identity.gid) != 0)) {
      error = fmt::format("cannot give {} to user '{}': {}", log, spec.user, strerror(errno));
    }
  }
  close(fd);
  if (error.empty() && !spec.script.empty()) {
    // Only the shim (this process's account) reads it: it hands the task a copy (--script).
    if (auto r = WritePrivateFileAtomically(ScriptPath(key), spec.script); !r) {
      error = "cannot keep the batch script: " + r.error().message;
    }
  }
  for (const auto& dir : spec.owned_dirs) {
    if (!error.empty()) break;
    if (auto r = PrepareOwnedDir(dir, account); !r) error = r.error().message;
  }
  return error;
}

void Executor::Finish(Task& t) {
  t.status.running = false;
  t.status.finished_ms = NowUnixMs();
  if (cpus_) cpus_->Release(t.status.cpu_list);
}

// The shim's --output/--error flags for spec's files (task_shim.h).
static void AddOutputArgs(const TaskSpec& spec, std::vector<std::string>& argv) {
  if ((spec.truncate_output || spec.truncate_error) && !spec.truncate_marker.empty()) {
    argv.insert(argv.end(), {"--truncate-marker", spec.truncate_marker});
  }
  if (!spec.output.empty()) {
    argv.insert(argv.end(), {"--output", spec.output});
    if (spec.truncate_output) argv.push_back("--truncate-output");
  }
  if (!spec.error.empty()) {
    argv.insert(argv.end(), {"--error", spec.error});
    if (spec.truncate_error) argv.push_back("--truncate-error");
  }
}

Result<std::vector<std::string>> Executor::ShimArgv(const TaskKey& key, const TaskSpec& spec,
                                                    const std::optional<TaskAccount>& account,
                                                    const std::map<std::string, std::string>& env,
                                                    const std::vector<int>& cpu_list) const {
  std::vector<std::string> argv = {shim_.path};
  if (shim_.subcommand) argv.push_back(kTaskShimCommand);
  argv.insert(argv.end(), {"--log", LogPath(key), "--status", StatusPath(key), "--grace-ms",
                           std::to_string(options_.kill_grace.count()), "--parent-pid", std::to_string(getpid())});
  if (!options_.lease_path.empty()) argv.insert(argv.end(), {"--lease", options_.lease_path});
  // The shim binds its child (the command, or a container runtime's client, whose
  // monitor and container then inherit the mask: Podman's); the shim itself stays unbound.
  if (!cpu_list.empty()) argv.insert(argv.end(), {"--cpus", FormatCpuList(cpu_list)});
  if (!spec.container_image.empty()) {
    // The runtime runs as this process and enters the job's identity and directories
    // inside the container (container.h); the shim only supervises it.
    auto runtime = options_.container_runtimes.find(spec.container_runtime);
    if (runtime == options_.container_runtimes.end()) {
      std::vector<std::string> kinds;
      for (const auto& [kind, command] : options_.container_runtimes) kinds.push_back(kind);
      return Errorf(ErrorCode::kFailedPrecondition, "the job asks for container runtime '{}'; node {} offers {}",
                    spec.container_runtime, options_.node_name,
                    kinds.empty() ? std::string("none") : fmt::format("{}", fmt::join(kinds, ", ")));
    }
    ContainerLaunch c;
    c.runtime_command = runtime->second;
    c.runtime = spec.container_runtime;
    c.image = spec.container_image;
    c.name = ContainerName(options_.work_dir, key.job_id, key.attempt, key.rank);
    for (const auto& [name, value] : env) c.env_names.push_back(name);
    if (!spec.workdir.empty()) c.mounts.push_back(spec.workdir);
    for (const auto& dir : spec.owned_dirs) {
      if (dir != spec.workdir) c.mounts.push_back(dir);
    }
    c.workdir = spec.workdir;
    if (account) c.identity = account->identity;
    if (options_.container_devices) c.devices = options_.container_devices(spec.gpus);
    // A Docker container is the daemon's child and inherits nothing from the client.
    // Podman's inherits the client's mask, and its --cpuset-cpus would need the cpuset
    // controller, which rootless Podman on cgroup v1 lacks: binding must not fail the task.
    if (c.runtime == "docker" && !cpu_list.empty()) c.cpuset = FormatCpuList(cpu_list);
    c.command = spec.command;
    argv.insert(argv.end(), {"--container-runtime", c.runtime_command, "--container-name", c.name,
                             "--container-image", c.image});
    argv.insert(argv.end(), {"--container-root", ContainerRootPath(key)});
    if (c.runtime == "docker") argv.push_back("--container-detached");
    // The output files are on the host, as Slurm's: the shim's copier opens them as the
    // job's account in its working directory (the runtime itself runs as this process).
    if (!spec.output.empty() || !spec.error.empty()) {
      if (!spec.workdir.empty()) argv.insert(argv.end(), {"--io-cwd", spec.workdir});
      if (account) argv.insert(argv.end(), {"--io-user", FormatTaskIdentity(account->identity)});
      AddOutputArgs(spec, argv);
    }
    argv.push_back("--");
    auto run = ContainerRunArgv(c);
    argv.insert(argv.end(), run.begin(), run.end());
    return argv;
  }
  if (!spec.workdir.empty()) argv.insert(argv.end(), {"--cwd", spec.workdir});
  if (account) argv.insert(argv.end(), {"--user", FormatTaskIdentity(account->identity)});
  AddOutputArgs(spec, argv);
  if (spec.hold) {
    argv.push_back("--hold");
    return argv;
  }
  if (!spec.script.empty()) argv.insert(argv.end(), {"--script", ScriptPath(key)});
  argv.push_back("--");
  argv.insert(argv.end(), spec.command.begin(), spec.command.end());
  return argv;
}

Result<ExecTarget> Executor::ExecTargetOf(const TaskKey& key, std::chrono::milliseconds start_wait) {
  MutexLock lk(mu_);
  // A task the head already counts as running may still be spawning its shim here (a
  // step or an exec right after the job started, on a busy node): wait for it a while.
  // (The task is looked up again after every wake-up: it may be forgotten meanwhile.)
  cv_.WaitFor(mu_, start_wait, [&] {
    mu_.AssertHeld();
    auto t = tasks_.find(key);
    return t == tasks_.end() || !t->second.status.running || t->second.exec.has_value();
  });
  auto it = tasks_.find(key);
  if (it == tasks_.end()) return Errorf(ErrorCode::kNotFound, "node {} runs no {}", options_.node_name, KeyName(key));
  if (!it->second.status.running) {
    return Errorf(ErrorCode::kFailedPrecondition, "{} has ended on node {}", KeyName(key), options_.node_name);
  }
  if (!it->second.exec) {
    return Errorf(ErrorCode::kFailedPrecondition, "{} is still starting on node {}", KeyName(key), options_.node_name);
  }
  return *it->second.exec;
}

bool Executor::IsRunning(const TaskKey& key) const {
  MutexLock lk(mu_);
  auto it = tasks_.find(key);
  return it != tasks_.end() && it->second.status.running;
}

void Executor::TryReap(const TaskKey& key) {
  bool finished = false;
  {
    MutexLock lk(mu_);
    auto it = tasks_.find(key);
    if (it == tasks_.end()) return;
    Task& t = it->second;
    if (!t.status.running || !t.spawned || t.status.pid <= 0) return;
    // Reaped under the lock: while `running` is true the pid cannot be reused, so Stop
    // never signals a stranger.
    int st = 0;
    pid_t r = waitpid(t.status.pid, &st, WNOHANG);
    if (r == 0 || (r < 0 && errno != ECHILD)) return;
    auto result = ReadStatusFile(StatusPath(key));
    if (result) {
      t.status.exit_code = result->exit_code;
      t.status.signal = result->signal;
      t.status.error = result->error;
    } else if (r == t.status.pid) {
      ExitStatus es = DecodeWaitStatus(st);
      t.status.exit_code = es.Code();
      t.status.signal = es.signal;
      t.status.error =
          fmt::format("task shim ended ({}) without writing a status file", es.ToString());
    } else {  // ECHILD: someone else reaped our shim
      t.status.exit_code = 128 + SIGKILL;
      t.status.signal = 0;
      t.status.error = "task shim was reaped elsewhere; exit status unknown";
    }
    if (!t.stop_reason.empty()) {
      t.status.error = t.status.error.empty() ? t.stop_reason : t.stop_reason + "; " + t.status.error;
    }
    Finish(t);
    if (t.pidfd >= 0) close(t.pidfd);
    t.pidfd = -1;
    finished = true;
    LOG_INFO("executor: {} finished: exit_code {} signal {}{}", KeyName(key),
             t.status.exit_code, t.status.signal,
             t.status.error.empty() ? "" : " (" + t.status.error + ")");
  }
  cv_.NotifyAll();
  if (finished && options_.on_task_exit) options_.on_task_exit();
}

void Executor::Loop() {
  std::vector<pollfd> fds;
  std::vector<TaskKey> polled;  // key of fds[i + 1]
  std::vector<TaskKey> running;
  while (true) {
    std::deque<TaskKey> to_start;
    bool any_unpolled = false;
    fds.clear();
    polled.clear();
    running.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    {
      MutexLock lk(mu_);
      if (quit_) break;
      to_start.swap(start_queue_);
      for (const auto& [key, t] : tasks_) {
        if (!t.status.running || !t.spawned) continue;
        running.push_back(key);
        if (t.pidfd >= 0) {
          fds.push_back({t.pidfd, POLLIN, 0});
          polled.push_back(key);
        } else {
          any_unpolled = true;
        }
      }
    }
    if (!to_start.empty()) {
      for (const auto& key : to_start) StartShim(key);
      continue;
    }
    int timeout = (any_unpolled || wake_fd_ < 0) ? kPollMsWithoutPidfd : kPollMsWithPidfd;
    int r = poll(fds.data(), fds.size(), timeout);
    if (wake_fd_ >= 0 && r > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
    if (r > 0) {
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents) TryReap(polled[i - 1]);
      }
    }
    if (r == 0 || any_unpolled) {
      for (const auto& key : running) TryReap(key);  // safety net; cheap WNOHANG
    }
  }
}

void Executor::Stop(const TaskKey& key, bool immediate, std::string reason) {
  MutexLock lk(mu_);
  auto it = tasks_.find(key);
  if (it == tasks_.end() || !it->second.status.running) return;
  Task& t = it->second;
  if (t.stop_reason.empty()) t.stop_reason = std::move(reason);
  int sig = immediate ? SIGUSR1 : SIGTERM;
  if (!t.spawned) {
    if (t.pending_signal != SIGUSR1) t.pending_signal = sig;
    return;
  }
  kill(t.status.pid, sig);
}

bool Executor::Signal(const TaskKey& key, int signo) {
  MutexLock lk(mu_);
  auto it = tasks_.find(key);
  if (it == tasks_.end() || !it->second.status.running || !it->second.spawned || it->second.status.pid <= 0) {
    return false;
  }
  // While `running` is true the shim is not reaped, so the pid is still ours.
  sigval value{};
  value.sival_int = signo;
  if (sigqueue(it->second.status.pid, SIGUSR2, value) != 0) {
    LOG_WARN("executor: cannot signal {}: {}", KeyName(key), strerror(errno));
    return false;
  }
  return true;
}

void Executor::StopAll(bool immediate) {
  std::vector<TaskKey> keys;
  {
    MutexLock lk(mu_);
    for (const auto& [key, t] : tasks_) {
      if (t.status.running) keys.push_back(key);
    }
  }
  for (const auto& key : keys) Stop(key, immediate);
}

bool Executor::WaitAllExited(std::chrono::milliseconds timeout) {
  MutexLock lk(mu_);
  return cv_.WaitFor(mu_, timeout, [this] {
    mu_.AssertHeld();
    for (const auto& [key, t] : tasks_) {
      if (t.status.running) return false;
    }
    return true;
  });
}

std::vector<TaskStatus> Executor::Snapshot() const {
  MutexLock lk(mu_);
  std::vector<TaskStatus> out;
  out.reserve(tasks_.size());
  for (const auto& [key, t] : tasks_) out.push_back(t.status);
  return out;
}

void Executor::Forget(const TaskKey& key) {
  MutexLock lk(mu_);
  auto it = tasks_.find(key);
  if (it == tasks_.end() || it->second.status.running) return;
  if (it->second.pidfd >= 0) close(it->second.pidfd);
  tasks_.erase(it);
}

Result<LogChunk> Executor::ReadLog(const TaskKey& key, int64_t offset, int64_t max_bytes) const {
  if (max_bytes <= 0) {
    return Errorf(ErrorCode::kInvalidArgument, "max_bytes must be positive, got {}", max_bytes);
  }
  // Whether the task runs is read before the file, so `done` never claims a final size
  // that a still-running task could grow.
  bool known = false;
  bool running = false;
  {
    MutexLock lk(mu_);
    auto it = tasks_.find(key);
    if (it != tasks_.end()) {
      known = true;
      running = it->second.status.running;
    }
  }
  const std::string path = LogPath(key);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (!known) return Errorf(ErrorCode::kNotFound, "no task {} and no log at {}", KeyName(key), path);
    LogChunk empty;
    empty.done = !running;
    return empty;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return Errorf(ErrorCode::kInternal, "stat {}: {}", path, strerror(e));
  }
  LogChunk c;
  c.size = st.st_size;
  if (offset < 0) offset = std::max<int64_t>(0, c.size + offset);
  c.offset = std::min(offset, c.size);
  int64_t want = std::min({max_bytes, kMaxLogChunkBytes, c.size - c.offset});
  c.data.resize(static_cast<size_t>(want));
  int64_t got = 0;
  while (got < want) {
    ssize_t n = pread(fd, c.data.data() + got, static_cast<size_t>(want - got), c.offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  close(fd);
  c.data.resize(static_cast<size_t>(got));
  c.next_offset = c.offset + got;
  c.done = !running && c.next_offset == c.size;
  return c;
}

}  // namespace cohort::agent
