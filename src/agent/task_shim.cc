#include "agent/task_shim.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/container.h"
#include "agent/container_root.h"
#include "agent/lease.h"
#include "agent/output_file.h"
#include "agent/task_identity.h"
#include "agent/task_umask.h"
#include "agent/wakeup_lateness.h"
#include "common/clock.h"
#include "common/cpu_set.h"
#include "common/json.h"
#include "common/subprocess.h"

namespace cohort::agent {
namespace {

// How long the shim waits for the task's processes to die after SIGKILL before it gives
// up and reports anyway (a process stuck in uninterruptible sleep can take a while).
constexpr Millis kReapTimeout{30000};
// How often the cleanup loop rescans for orphans when no SIGCHLD arrives.
constexpr int kReapPollMs = 20;
// Under a lease, the shim wakes this often to measure how late its wake-ups are (the
// node's scheduling delay, wakeup_lateness.h), and remembers a lateness this long.
constexpr Millis kLeaseTick{100};
constexpr Millis kLatenessWindow{10'000};

struct ShimArgs {
  std::string log_path;
  std::string status_path;
  std::string cwd;
  int64_t grace_ms = 5000;
  pid_t parent_pid = 0;  // 0: compare against the parent seen at start
  std::string lease_path;  // empty: no lease
  // --user: the task's account, entered in the task's child before exec; the shim stays
  // as it was started.
  std::optional<TaskIdentity> identity;
  // --container-runtime/-name/-image: the command is `RUNTIME run ... IMAGE ...`
  // (container.h); the shim removes the container after the task and explains the
  // runtime's own failures.
  std::string container_runtime;
  std::string container_name;
  std::string container_image;
  // --container-root: the shim publishes the container's init there (container_root.h),
  // so that every process of its PID namespace counts for the task (proc_usage.h).
  std::string container_root;
  // --container-detached: the container is not the client's child (Docker): SIGTERM and
  // the checkpoint signal reach it by its name, and a client killed before the container
  // was seen running has its container looked for again (RemoveContainer).
  bool container_detached = false;
  // --hold: an allocation's task (no command): the child enters the task's account and
  // directory and then only waits, until a signal ends it.
  bool hold = false;
  // --script FILE: a batch script's task (api::JobSpec::script): the shim (whose account
  // alone can read FILE) copies it into an anonymous file the task child executes, with
  // `command` as the script's arguments (ScriptFd).
  std::string script;
  // --cpus: the CPUs the task is bound to (cpu_set.h), set in the child before exec; empty:
  // the shim's own mask.
  std::vector<int> cpus;
  // --output/--error: files the task's stdout and stderr are also copied to (the job's
  // output and error), opened by the copier child as the task's account in its working
  // directory; --io-user/--io-cwd give those for a container task, whose runtime runs as
  // the shim. --truncate-*: emptied at open unless the attempt --truncate-marker names
  // already has (output_file.h; without a marker: emptied), else appended to.
  std::string output;
  std::string error;
  bool truncate_output = false;
  bool truncate_error = false;
  std::string truncate_marker;
  std::optional<TaskIdentity> io_identity;
  std::string io_cwd;
  std::vector<std::string> command;

  // The account and working directory the output files are opened in: --io-user/--io-cwd
  // when given (a container task), else the task's own.
  const std::optional<TaskIdentity>& io_account() const { return io_identity ? io_identity : identity; }
  const std::string& io_dir() const { return io_cwd.empty() ? cwd : io_cwd; }
};

// What the task child reports through the close-on-exec pipe when it cannot start.
struct ChildFailure {
  int stage = 0;  // kStageChdir, kStageExec or kStageIdentity
  int err = 0;
};
constexpr int kStageChdir = 1;
constexpr int kStageExec = 2;
constexpr int kStageIdentity = 3;
// The copier's (RunCopier) further stages: the output or the error file cannot be opened.
constexpr int kStageOpenOutput = 4;
constexpr int kStageOpenError = 5;

Result<int64_t> ParseInt(std::string_view flag, std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) {
    return Errorf(ErrorCode::kInvalidArgument, "{} needs a non-negative integer, got '{}'", flag,
                  s);
  }
  return v;
}

Result<ShimArgs> ParseArgs(int argc, char** argv) {
  ShimArgs a;
  int i = 1;
  if (i < argc && std::string_view(argv[i]) == kTaskShimCommand) ++i;
  bool grace_set = false;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) a.command.emplace_back(argv[i]);
      break;
    }
    if (arg == "--hold") {
      a.hold = true;
      continue;
    }
    if (arg == "--container-detached") {
      a.container_detached = true;
      continue;
    }
    if (arg == "--truncate-output" || arg == "--truncate-error") {
      (arg == "--truncate-output" ? a.truncate_output : a.truncate_error) = true;
      continue;
    }
    if (i + 1 >= argc) return Errorf(ErrorCode::kInvalidArgument, "{} needs a value", arg);
    std::string_view value = argv[++i];
    if (arg == "--log") {
      a.log_path = value;
    } else if (arg == "--status") {
      a.status_path = value;
    } else if (arg == "--cwd") {
      a.cwd = value;
    } else if (arg == "--grace-ms") {
      a.grace_ms = COHORT_TRY(ParseInt(arg, value));
      grace_set = true;
    } else if (arg == "--lease") {
      a.lease_path = value;
    } else if (arg == "--user") {
      a.identity = COHORT_TRY(ParseTaskIdentity(value));
    } else if (arg == "--output") {
      a.output = value;
    } else if (arg == "--error") {
      a.error = value;
    } else if (arg == "--io-user") {
      a.io_identity = COHORT_TRY(ParseTaskIdentity(value));
    } else if (arg == "--io-cwd") {
      a.io_cwd = value;
    } else if (arg == "--truncate-marker") {
      a.truncate_marker = value;
    } else if (arg == "--script") {
      a.script = value;
    } else if (arg == "--cpus") {
      a.cpus = COHORT_TRY(ParseCpuList(value));
    } else if (arg == "--container-runtime") {
      a.container_runtime = value;
    } else if (arg == "--container-name") {
      a.container_name = value;
    } else if (arg == "--container-image") {
      a.container_image = value;
    } else if (arg == "--container-root") {
      a.container_root = value;
    } else if (arg == "--parent-pid") {
      a.parent_pid = static_cast<pid_t>(COHORT_TRY(ParseInt(arg, value)));
    } else {
      return Errorf(ErrorCode::kInvalidArgument, "unknown flag '{}'", arg);
    }
  }
  if (a.log_path.empty()) return MakeError(ErrorCode::kInvalidArgument, "--log is required");
  if (a.status_path.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "--status is required");
  }
  if (!grace_set) return MakeError(ErrorCode::kInvalidArgument, "--grace-ms is required");
  if (a.hold && (!a.command.empty() || !a.container_runtime.empty())) {
    return MakeError(ErrorCode::kInvalidArgument, "--hold runs no command and no container");
  }
  if (!a.script.empty() && (a.hold || !a.container_runtime.empty())) {
    return MakeError(ErrorCode::kInvalidArgument, "--script goes with neither --hold nor a container");
  }
  if (a.command.empty() && !a.hold && a.script.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "no command after '--'");
  }
  if (a.container_runtime.empty() != a.container_name.empty() ||
      a.container_runtime.empty() != a.container_image.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--container-runtime, --container-name and --container-image go together");
  }
  if (!a.container_root.empty() && a.container_runtime.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "--container-root needs --container-runtime");
  }
  if (a.hold && (!a.output.empty() || !a.error.empty())) {
    return MakeError(ErrorCode::kInvalidArgument, "--hold has no output to write to --output or --error");
  }
  if (a.container_detached && a.container_root.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "--container-detached needs --container-root");
  }
  return a;
}

void WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// One line for the person reading the task's log.
void LogLine(int fd, std::string_view msg) { WriteAll(fd, fmt::format("cohort: {}\n", msg)); }

// Writes the status JSON to `path` atomically. Failures go to `log_fd`.
void WriteStatus(const std::string& path, int exit_code, int sig, const std::string& error,
                 int log_fd) {
  json j = {{"exit_code", exit_code}, {"signal", sig}, {"error", error}};
  std::string text = j.dump() + "\n";
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    LogLine(log_fd, fmt::format("cannot write status file {}: {}", tmp, strerror(errno)));
    return;
  }
  WriteAll(fd, text);
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    LogLine(log_fd, fmt::format("cannot rename {} to {}: {}", tmp, path, strerror(errno)));
  }
}

// SIGKILLs every live child of this process except `spare` (the output copier; -1: none)
// (orphans of the task that left its process
// group and were reparented to us, the subreaper). Zombies are left for waitpid. The shim
// is single-threaded, so /proc/self/task/<pid>/children lists them all: reading it costs
// the same however many processes the node runs (a scan of /proc read every process's
// stat file at every task's exit, most of a short task's cost on a busy node). Falls back
// to the scan on a kernel without that file (CONFIG_PROC_CHILDREN).
void KillOwnChildren(pid_t spare) {
  const pid_t self = getpid();
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/children", self);
  if (int fd = open(path, O_RDONLY | O_CLOEXEC); fd >= 0) {
    std::string list;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) list.append(buf, static_cast<size_t>(n));
    close(fd);
    if (n == 0) {
      const char* p = list.data();
      const char* end = p + list.size();
      while (p < end) {
        pid_t pid = 0;
        auto [next, ec] = std::from_chars(p, end, pid);
        if (ec == std::errc() && pid > 0) {
          // A zombie child ignores SIGKILL; a live one dies (the listed pid is ours until
          // we reap it, so it cannot be a stranger's).
          if (pid != spare) kill(pid, SIGKILL);
          p = next;
        }
        while (p < end && (*p == ' ' || *p == '\n')) ++p;
        if (ec != std::errc()) break;
      }
      return;
    }
  }
  DIR* d = opendir("/proc");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    pid_t pid = 0;
    std::string_view name = e->d_name;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (ec != std::errc() || p != name.data() + name.size() || pid <= 0) continue;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    // "pid (comm) S ppid ...": comm may contain anything, so parse after the last ')'.
    const char* rp = strrchr(buf, ')');
    if (!rp) continue;
    char state = 0;
    int ppid = 0;
    if (sscanf(rp + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == self && state != 'Z' && pid != spare) kill(pid, SIGKILL);
  }
  closedir(d);
}

void DrainSignalFd(int sfd) {
  signalfd_siginfo si;
  while (read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
  }
}

std::string IdentityError(const TaskIdentity& id, int err) {
  return fmt::format("cannot run the task as user '{}' (uid {}, gid {}): {}", id.user, id.uid, id.gid, strerror(err));
}

// Runs in the forked task child (the shim is single-threaded, so ordinary calls are safe
// here). Never returns.
[[noreturn]] void ExecTask(const ShimArgs& args, std::vector<char*>& argv, int stdout_fd, int stderr_fd,
                           int err_fd, pid_t shim_pid) {
  setpgid(0, 0);
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0 && null_fd != 0) {
    dup2(null_fd, 0);
    close(null_fd);
  }
  dup2(stdout_fd, 1);
  dup2(stderr_fd, 2);
  ChildFailure f;
  std::string msg;
  // Bound before exec, so the command and all it starts inherit the mask. A mask the kernel
  // refuses (the agent's own cpuset shrank since it chose) leaves the task running
  // unbound: binding must never fail a task.
  if (!args.cpus.empty()) {
    if (const int err = BindToCpus(args.cpus); err != 0) {
      WriteAll(2, fmt::format("cohort: cannot bind the task to CPUs {}: {}; it runs unbound\n",
                              FormatCpuList(args.cpus), strerror(err)));
    }
  }
  // The job's account, here and not in the shim: the shim keeps the agent's identity, so
  // the task cannot signal, stop or trace the process that enforces its lease and reaps it.
  const int id_err = args.identity ? AssumeTaskIdentity(*args.identity) : 0;
  if (const int mask = TaskUmaskFrom(getenv("COHORT_UMASK")); mask >= 0) umask(static_cast<mode_t>(mask));
  // A backstop: if the shim itself is killed (OOM killer), the leader goes with it. Set
  // after the identity change, which clears it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != shim_pid) _exit(127);
  if (id_err != 0) {
    f = {kStageIdentity, id_err};
    msg = fmt::format("cohort: {}\n", IdentityError(*args.identity, id_err));
  } else if (!args.cwd.empty() && chdir(args.cwd.c_str()) != 0) {
    f = {kStageChdir, errno};
    msg = fmt::format("cohort: cannot enter working directory '{}': {}\n", args.cwd,
                      strerror(f.err));
  } else if (args.hold) {
    // An allocation's task: nothing runs but this, which holds the task (its session,
    // account, directory and GPUs) for the allocation's steps until a signal ends it.
    WriteAll(1, "cohort: holding the allocation's resources; its steps run beside this task\n");
    close(err_fd);  // close-on-exec never comes: the shim reads EOF, which means started
    for (;;) pause();
  } else {
    execvp(argv[0], argv.data());
    f = {kStageExec, errno};
    msg = args.script.empty()
              ? fmt::format("cohort: cannot execute '{}': {}\n", args.command[0], strerror(f.err))
              : fmt::format("cohort: cannot execute the batch script: {} (is its #! interpreter installed on "
                            "this node?)\n",
                            strerror(f.err));
  }
  WriteAll(2, msg);
  WriteAll(err_fd, std::string_view(reinterpret_cast<const char*>(&f), sizeof f));
  _exit(127);
}

// An output or error file opened as a shell's `>>` would (output_file.h), then, when
// `truncate`, emptied once per attempt: with --truncate-marker, unless that attempt has
// emptied it already (another task that shares it came first), so that no task's lines
// are cut. -1 with errno set when it cannot be opened; what could not be emptied is a
// line in the log.
int OpenOutputFileOnce(const ShimArgs& args, const std::string& path, bool truncate, int log_fd) {
  const int fd = OpenOutputFile(path);
  if (fd < 0 || !truncate) return fd;
  std::string note;
  if (!args.truncate_marker.empty()) {
    note = TruncateOncePerAttempt(fd, path, args.truncate_marker);
  } else {
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0) {
      note = fmt::format("cannot empty output file '{}': {}; appending to it", path, strerror(errno));
    }
  }
  if (!note.empty()) LogLine(log_fd, note);
  return fd;
}

// The output copier, a forked child of the shim (the shim is single-threaded, so ordinary
// calls are safe here). Enters the task's account and working directory as the task child
// does, opens the output and error files there, reports through `report_fd` (a
// ChildFailure: stage 0 when both opened), then copies the task's stdout pipe (`out_rd`,
// -1: none) to the log and the output file and its stderr pipe (`err_rd`) to the log and
// the error file, until both pipes reach EOF (every process of the task has closed them).
// Never returns.
[[noreturn]] void RunCopier(const ShimArgs& args, int log_fd, int out_rd, int err_rd, int report_fd,
                            pid_t shim_pid) {
  const std::optional<TaskIdentity>& id = args.io_account();
  const std::string& cwd = args.io_dir();
  auto report = [&](int stage, int err) {
    ChildFailure f{stage, err};
    WriteAll(report_fd, std::string_view(reinterpret_cast<const char*>(&f), sizeof f));
    if (stage != 0) _exit(127);
    close(report_fd);
  };
  if (id) {
    if (const int err = AssumeTaskIdentity(*id); err != 0) report(kStageIdentity, err);
  }
  // The files are made as the task would make them.
  if (const int mask = TaskUmaskFrom(getenv("COHORT_UMASK")); mask >= 0) umask(static_cast<mode_t>(mask));
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // after the identity change, which clears it
  if (getppid() != shim_pid) _exit(127);
  if (!cwd.empty() && chdir(cwd.c_str()) != 0) report(kStageChdir, errno);
  int out_file = -1;
  int err_file = -1;
  if (!args.output.empty()) {
    out_file = OpenOutputFileOnce(args, args.output, args.truncate_output, log_fd);
    if (out_file < 0) report(kStageOpenOutput, errno);
  }
  if (!args.error.empty()) {
    err_file =
        args.error == args.output ? out_file : OpenOutputFileOnce(args, args.error, args.truncate_error, log_fd);
    if (err_file < 0) report(kStageOpenError, errno);
  }
  report(0, 0);

  struct Stream {
    int rd;
    int file;
    const std::string* path;
    const char* what;
  };
  std::vector<Stream> streams;
  if (out_rd >= 0) streams.push_back({out_rd, out_file, &args.output, "output"});
  if (err_rd >= 0) streams.push_back({err_rd, err_file, &args.error, "error"});
  std::vector<char> buf(64 * 1024);
  while (!streams.empty()) {
    std::vector<pollfd> fds;
    for (const Stream& st : streams) fds.push_back({st.rd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      LogLine(log_fd, fmt::format("output copier: poll: {}", strerror(errno)));
      _exit(1);
    }
    for (size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      Stream& st = streams[i];
      const ssize_t n = read(st.rd, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        close(st.rd);
        streams.erase(streams.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const std::string_view chunk(buf.data(), static_cast<size_t>(n));
      WriteAll(log_fd, chunk);
      if (st.file < 0) continue;
      for (std::string_view rest = chunk; !rest.empty();) {
        const ssize_t w = write(st.file, rest.data(), rest.size());
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          // The file is full or gone (ENOSPC, EIO): the task runs on, its output kept in
          // the log, which says so once.
          LogLine(log_fd, fmt::format("cannot write {} file '{}': {}; the task's {} goes on to this log only",
                                      st.what, *st.path, w < 0 ? strerror(errno) : "short write", st.what));
          for (Stream& other : streams) {
            if (other.file == st.file) other.file = -1;
          }
          break;
        }
        rest.remove_prefix(static_cast<size_t>(w));
      }
    }
  }
  _exit(0);
}

// The shim's life after its command line is parsed, one step per method. The shim is a
// single-threaded process: every method runs on its only thread.
class TaskShim {
 public:
  explicit TaskShim(ShimArgs args)
      : args_(std::move(args)), expected_parent_(args_.parent_pid ? args_.parent_pid : getppid()) {}
  TaskShim(const TaskShim&) = delete;
  TaskShim& operator=(const TaskShim&) = delete;

  // Blocks the signals the shim acts on, ignores the ones that could kill it by accident,
  // leaves the agent's session and asks for SIGUSR1 when the agent dies. False if the
  // agent is already gone.
  bool LeaveAgentSession();
  // Becomes the subreaper of the task's descendants and opens the signalfd.
  Result<void> BecomeSupervisor();
  // Opens the task's log for appending; from here on the shim's messages go there.
  Result<void> OpenTaskLog();
  // With --output or --error: forks the output copier (RunCopier) and waits until it has
  // opened the files; an error naming the file when it cannot ("cannot open output file
  // 'x': Permission denied"), which fails the task's start.
  Result<void> StartCopier();
  // StartCopier's part: forks the copier and reads its report.
  Result<void> StartCopierAndOpen();
  // Forks the task as the leader of its own process group and execs it (ExecTask).
  Result<void> SpawnTask();
  // Forwards signals, enforces the SIGTERM grace and watches the lease until the task
  // leader exits.
  void Supervise();
  // SIGKILLs and reaps everything the leader left behind, in its group or not (bounded).
  void ReapDescendants();
  // A container task: explains a failure of the runtime itself (exit 125) in the task's
  // error, then removes the container (bounded).
  void FinishContainer();
  // A container whose init could not exec the command: exit 127 (126) and the reason.
  void ExplainContainerExec(const ExitStatus& runtime);
  // Writes the status file and returns the shim's exit code (the task's).
  int ReportExit();

  // Records a failure before the task ran: exit code 127 with `error` in the status file
  // (and in the log when `log_it`). Returns 127.
  int FailStart(const std::string& error, bool log_it = true);

 private:
  // Supervise's parts.
  int PollTimeoutMs() const;        // until the SIGKILL deadline or the lease's next check; -1: none
  void ReadChildFailure();          // the exec child's report, if any; closes the pipe
  void Tick();                      // records how late the lease tick was, if it was due
  void CheckLease();                // SIGKILLs the task once the lease has run out unrenewed
  void FenceTask(Millis allowance); // the SIGKILL of CheckLease, and why
  void CheckKillDeadline();         // SIGKILLs the task once its SIGTERM grace has passed
  void HandleSignals();             // SIGTERM, SIGUSR1 and queued SIGUSR2 from the agent
  void SendTerm();                  // SIGTERM to the group once; arms the SIGKILL deadline
  // Reaps every exited child without blocking, the leader's status kept and the runtime
  // calls' handed to their owners. False once no child is left.
  bool ReapAvailable();
  // A Docker task (--container-detached): SIGTERM reaches the container by its name, retried
  // while the container does not exist yet, never by killing the client that may be
  // creating it (which could leave it created or running with no one attached).
  void SignalContainerIfDue();
  // The runtime's `kill --signal SIG NAME`, not waited for; its pid, or -1.
  pid_t SpawnContainerSignal(const std::string& sig);
  // After a Docker task: removes its container, and when the client was killed before the
  // container was seen running (its create may still be in flight), again if it appears.
  void RemoveContainer();

  const ShimArgs args_;
  const pid_t expected_parent_;
  sigset_t mask_{};
  int log_fd_ = 2;  // until the task runs, our own stderr (the agent points it at the log)
  int sfd_ = -1;
  pid_t task_ = -1;
  int err_rd_ = -1;  // read end of the exec child's close-on-exec error pipe
  // The output copier (StartCopier; -1: none, or reaped) and the task's stdout and stderr:
  // the log, or the write ends of the copier's pipes (closed once the task is forked).
  pid_t copier_ = -1;
  int task_stdout_ = -1;
  int task_stderr_ = -1;
  std::string start_error_;
  std::optional<int> leader_status_;
  bool kill_armed_ = false;  // SIGKILL is due at kill_at_ (a SIGTERM grace is running)
  SteadyTime kill_at_{};
  bool term_sent_ = false;
  // The lease: checked when the expiry last read comes due; the file is re-read then, so a
  // renewed lease costs one read per renewal period. Past the expiry the task lives on
  // while the shim's own lateness explains the lapse (Lease::KillAt), re-reading the file
  // at every tick.
  bool lease_watch_ = false;
  Lease lease_{};
  SteadyTime lease_check_at_{};  // the expiry, or once it has passed, the kill time
  SteadyTime tick_due_{};
  WakeupLateness lateness_{kLatenessWindow};
  std::string fence_error_;
  std::string runtime_error_;  // a container runtime's own failure (FinishContainer)
  std::optional<int> exit_override_;  // the exit code a container's failed exec stands for
  // A container task's init, found and published (container_root.h), and, for a Docker
  // task, the SIGTERM due to its container by name.
  std::optional<ContainerRootFinder> root_finder_;
  bool container_seen_ = false;     // the finder has published an init at some point
  bool container_term_due_ = false;
  SteadyTime container_term_at_{};
  pid_t container_signal_ = -1;     // the running `kill --signal TERM`, or -1
};

bool TaskShim::LeaveAgentSession() {
  // Signals we act on are blocked and read from a signalfd; the rest that could kill us
  // by accident are ignored. The task child restores everything before exec.
  sigemptyset(&mask_);
  sigaddset(&mask_, SIGTERM);
  sigaddset(&mask_, SIGUSR1);
  sigaddset(&mask_, SIGUSR2);  // sigqueue'd by the agent: forward the value's signal
  sigaddset(&mask_, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask_, nullptr);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  // Fails with EPERM if we already lead a process group; we still have our own group then.
  setsid();
  prctl(PR_SET_PDEATHSIG, SIGUSR1);
  return getppid() == expected_parent_;
}

Result<void> TaskShim::BecomeSupervisor() {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sfd_ = signalfd(-1, &mask_, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd_ < 0) return Errorf(ErrorCode::kInternal, "signalfd: {}", strerror(errno));
  return {};
}

Result<void> TaskShim::OpenTaskLog() {
  int task_log = open(args_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (task_log < 0) {
    return Errorf(ErrorCode::kInternal, "cannot open log {}: {}", args_.log_path, strerror(errno));
  }
  log_fd_ = task_log;
  return {};
}

Result<void> TaskShim::StartCopier() {
  task_stdout_ = task_stderr_ = log_fd_;
  if (args_.output.empty() && args_.error.empty()) return {};
  return StartCopierAndOpen();
}

Result<void> TaskShim::StartCopierAndOpen() {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int rep[2] = {-1, -1};
  // stderr that goes to the output file (no --error, or the same name) shares stdout's
  // pipe, as a shell's `>f 2>&1` shares one file: the file (and the log) get the lines in
  // the order the task wrote them, which two pipes read in turn would not keep.
  const bool own_err = !args_.error.empty() && args_.error != args_.output;
  if ((!args_.output.empty() && pipe2(out, O_CLOEXEC) != 0) || (own_err && pipe2(err, O_CLOEXEC) != 0) ||
      pipe2(rep, O_CLOEXEC) != 0) {
    return Errorf(ErrorCode::kInternal, "pipe: {}", strerror(errno));
  }
  const pid_t self = getpid();
  copier_ = fork();
  if (copier_ < 0) return Errorf(ErrorCode::kInternal, "fork: {}", strerror(errno));
  if (copier_ == 0) {
    close(sfd_);
    close(rep[0]);
    if (out[1] >= 0) close(out[1]);
    if (err[1] >= 0) close(err[1]);
    RunCopier(args_, log_fd_, out[0], err[0], rep[1], self);
  }
  close(rep[1]);
  if (out[0] >= 0) close(out[0]);
  if (err[0] >= 0) close(err[0]);
  // Without --error (or with the output's name), stderr goes where stdout goes (Slurm's);
  // without --output, stdout goes to the log only.
  task_stdout_ = out[1] >= 0 ? out[1] : log_fd_;
  task_stderr_ = err[1] >= 0 ? err[1] : task_stdout_;
  ChildFailure f;
  ssize_t n;
  do {
    n = read(rep[0], &f, sizeof f);
  } while (n < 0 && errno == EINTR);
  close(rep[0]);
  if (n == static_cast<ssize_t>(sizeof f) && f.stage == 0) return {};
  const std::optional<TaskIdentity>& id = args_.io_account();
  const std::string& cwd = args_.io_dir();
  auto where = [&](const std::string& path) {
    return path.starts_with('/') || cwd.empty() ? std::string() : fmt::format(" (in '{}')", cwd);
  };
  if (n != static_cast<ssize_t>(sizeof f)) {
    return MakeError(ErrorCode::kInternal, "the output copier exited before opening the output files");
  }
  if (f.stage == kStageIdentity) return MakeError(ErrorCode::kInternal, IdentityError(*id, f.err));
  if (f.stage == kStageChdir) {
    return Errorf(ErrorCode::kInternal, "cannot enter working directory '{}': {}", cwd, strerror(f.err));
  }
  const bool output = f.stage == kStageOpenOutput;
  const std::string& path = output ? args_.output : args_.error;
  return Errorf(ErrorCode::kInternal, "cannot open {} file '{}'{}: {}", output ? "output" : "error", path, where(path),
                OutputOpenError(f.err));
}

// The batch script at `path` (readable by this process only) as an anonymous executable
// file the task child can run as any account: a memfd, its contents sealed. The descriptor
// stays open (not close-on-exec) through the task's exec.
static Result<int> ScriptFd(const std::string& path) {
  int in = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (in < 0) return Errorf(ErrorCode::kInternal, "cannot read the batch script {}: {}", path, strerror(errno));
  int fd = memfd_create("cohort-batch-script", MFD_ALLOW_SEALING);
  if (fd < 0) {
    const int err = errno;
    close(in);
    return Errorf(ErrorCode::kInternal, "memfd_create for the batch script: {}", strerror(err));
  }
  char buf[65536];
  for (;;) {
    ssize_t n = read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(in);
      close(fd);
      return Errorf(ErrorCode::kInternal, "cannot read the batch script {}: {}", path, strerror(err));
    }
    if (n == 0) break;
    WriteAll(fd, std::string_view(buf, static_cast<size_t>(n)));
  }
  close(in);
  // Sealed, and handed on read-only: the task cannot change the script it runs (a program
  // it starts again by $0 runs the same text), and no writer blocks the exec (ETXTBSY).
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  const int ro = open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_RDONLY);
  const int err = errno;
  close(fd);
  if (ro < 0) return Errorf(ErrorCode::kInternal, "cannot reopen the batch script's copy: {}", strerror(err));
  return ro;
}

Result<void> TaskShim::SpawnTask() {
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) return Errorf(ErrorCode::kInternal, "pipe: {}", strerror(errno));
  std::vector<std::string> cmd = args_.command;
  int script_fd = -1;
  if (!args_.script.empty()) {
    script_fd = COHORT_TRY(ScriptFd(args_.script));
    // Not close-on-exec: the kernel hands "/proc/self/fd/N" to the #! interpreter, which
    // opens it. $0 is therefore that name, as sbatch's is a spool file's.
    cmd.insert(cmd.begin(), fmt::format("/proc/self/fd/{}", script_fd));
  }
  std::vector<char*> cargv;
  for (auto& s : cmd) cargv.push_back(s.data());
  cargv.push_back(nullptr);

  const pid_t self = getpid();
  task_ = fork();
  const int fork_err = errno;
  if (task_ == 0) ExecTask(args_, cargv, task_stdout_, task_stderr_, errpipe[1], self);
  if (script_fd >= 0) close(script_fd);
  if (task_ < 0) return Errorf(ErrorCode::kInternal, "fork: {}", strerror(fork_err));
  setpgid(task_, task_);  // also here, so killpg never races the child's own setpgid
  close(errpipe[1]);
  // Only the task holds the copier's pipes now: their EOF means every process of it is gone.
  if (task_stderr_ != log_fd_ && task_stderr_ != task_stdout_) close(task_stderr_);
  if (task_stdout_ != log_fd_) close(task_stdout_);
  err_rd_ = errpipe[0];
  if (!args_.container_root.empty()) {
    root_finder_.emplace(args_.container_runtime, args_.container_name, args_.container_root);
    root_finder_->Start(SteadyClock::now());
  }
  return {};
}

bool TaskShim::ReapAvailable() {
  while (true) {
    int st = 0;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      const SteadyTime now = SteadyClock::now();
      if (p == task_) {
        leader_status_ = st;
      } else if (p == copier_) {
        copier_ = -1;
      } else if (p == container_signal_) {
        container_signal_ = -1;
        // Delivered; otherwise the container is not there yet (or no longer): try again.
        if (DecodeWaitStatus(st).Success()) {
          container_term_due_ = false;
        } else {
          container_term_at_ = now + Millis(200);
        }
      } else if (root_finder_) {
        root_finder_->OnChildExit(p, st, now);
      }
      continue;
    }
    if (p < 0 && errno == EINTR) continue;
    return !(p < 0 && errno == ECHILD);
  }
}

pid_t TaskShim::SpawnContainerSignal(const std::string& sig) {
  SpawnOptions so;
  so.argv = ContainerSignalArgv(args_.container_runtime, args_.container_name, sig);
  so.stdout_path = "/dev/null";
  auto child = Subprocess::Spawn(so);
  return child ? child->pid() : -1;
}

void TaskShim::SignalContainerIfDue() {
  if (!container_term_due_ || container_signal_ > 0 || leader_status_ || SteadyClock::now() < container_term_at_) {
    return;
  }
  container_signal_ = SpawnContainerSignal("TERM");
  if (container_signal_ < 0) container_term_at_ = SteadyClock::now() + Millis(200);
}

int TaskShim::FailStart(const std::string& error, bool log_it) {
  if (log_it) LogLine(log_fd_, error);
  WriteStatus(args_.status_path, 127, 0, error, log_fd_);
  return 127;
}

void TaskShim::ReadChildFailure() {
  ChildFailure f;
  ssize_t n;
  do {
    n = read(err_rd_, &f, sizeof f);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof f)) {
    start_error_ = f.stage == kStageChdir      ? fmt::format("cannot enter working directory '{}': {}", args_.cwd,
                                                             strerror(f.err))
                   : f.stage == kStageIdentity ? IdentityError(*args_.identity, f.err)
                                               : fmt::format("cannot execute '{}': {}", args_.command[0], strerror(f.err));
  }
  close(err_rd_);
  err_rd_ = -1;
}

void TaskShim::SendTerm() {
  if (term_sent_) return;
  term_sent_ = true;
  if (args_.container_detached) {
    container_term_due_ = true;
    container_term_at_ = SteadyClock::now();
    SignalContainerIfDue();
  } else {
    killpg(task_, SIGTERM);
    killpg(task_, SIGCONT);  // a stopped task must run to see SIGTERM
  }
  if (args_.grace_ms == 0) {
    killpg(task_, SIGKILL);
  } else {
    kill_at_ = SteadyClock::now() + Millis(args_.grace_ms);
    kill_armed_ = true;
  }
}

int TaskShim::PollTimeoutMs() const {
  int timeout = -1;
  if (kill_armed_) {
    auto left = std::chrono::ceil<Millis>(kill_at_ - SteadyClock::now()).count();
    timeout = static_cast<int>(std::max<int64_t>(0, left));
  }
  if (lease_watch_) {
    auto next = std::min(lease_check_at_, tick_due_);
    auto left = std::max<int64_t>(0, std::chrono::ceil<Millis>(next - SteadyClock::now()).count());
    timeout = timeout < 0 ? static_cast<int>(left) : std::min(timeout, static_cast<int>(left));
  }
  auto sooner = [&timeout](int64_t left) {
    if (left >= 0) timeout = timeout < 0 ? static_cast<int>(left) : std::min(timeout, static_cast<int>(left));
  };
  if (root_finder_) sooner(root_finder_->MsUntilDue(SteadyClock::now()));
  if (container_term_due_ && container_signal_ < 0) {
    sooner(std::max<int64_t>(0, std::chrono::ceil<Millis>(container_term_at_ - SteadyClock::now()).count()));
  }
  return timeout;
}

void TaskShim::Tick() {
  const SteadyTime now = SteadyClock::now();
  if (!lease_watch_ || now < tick_due_) return;
  lateness_.Record(tick_due_, now);
  tick_due_ = now + kLeaseTick;
}

void TaskShim::CheckLease() {
  if (!lease_watch_) return;
  const SteadyTime now = SteadyClock::now();
  if (now >= lease_.expires) {
    if (auto l = ReadLeaseFile(args_.lease_path); l && l->expires > lease_.expires) lease_ = *l;
  }
  if (now < lease_.expires) {
    lease_check_at_ = lease_.expires;
    return;
  }
  // The lease ran out. A lapse that the shim's own late wake-ups explain (the node is
  // loaded, so the agent's renewal is late too) is forgiven, never past the lease's
  // deadline: the head cannot place the gang elsewhere before it (lease.h).
  lease_check_at_ = lease_.KillAt(lateness_.Recent(now));
  if (now < lease_check_at_) return;
  FenceTask(std::chrono::duration_cast<Millis>(lease_check_at_ - lease_.expires));
}

void TaskShim::FenceTask(Millis allowance) {
  lease_watch_ = false;
  std::string forgiven =
      allowance > Millis(0)
          ? fmt::format(", nor in the {} more that this node's scheduling delay explains", FormatDuration(allowance.count()))
          : "";
  fence_error_ = fmt::format(
      "stopped by its task shim: the agent did not renew the task's lease for {}{} (the "
      "agent is stopped, hung or cut off from the head, so the head may run the job "
      "elsewhere)",
      FormatDuration(lease_.granted.count()), forgiven);
  LogLine(log_fd_, fence_error_);
  // SIGKILL at once, as the agent's own fence does: the head places the gang elsewhere
  // one failure timeout after the last heartbeat, and a SIGTERM grace would overlap it.
  killpg(task_, SIGKILL);
  kill_armed_ = false;
}

void TaskShim::CheckKillDeadline() {
  if (!kill_armed_ || SteadyClock::now() < kill_at_) return;
  LogLine(log_fd_, fmt::format("task did not exit within {} ms of SIGTERM; sending SIGKILL", args_.grace_ms));
  killpg(task_, SIGKILL);
  kill_armed_ = false;
}

void TaskShim::HandleSignals() {
  signalfd_siginfo si;
  while (read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    if (si.ssi_signo == SIGTERM) {
      SendTerm();
    } else if (si.ssi_signo == SIGUSR1) {
      killpg(task_, SIGKILL);
      kill_armed_ = false;
    } else if (si.ssi_signo == SIGUSR2 && si.ssi_code == SI_QUEUE) {
      // The job's checkpoint signal (Executor::Signal); only the ones a spec may name.
      const int forward = si.ssi_int;
      if (forward == SIGUSR1 || forward == SIGUSR2 || forward == SIGHUP || forward == SIGINT ||
          forward == SIGTERM) {
        LogLine(log_fd_, fmt::format("delivering SIG{} to the task: the head asked it to checkpoint",
                                     sigabbrev_np(forward)));
        // A Docker client not yet attached would die of it (its signals are proxied only
        // once the container exists): the container gets it by name.
        if (args_.container_detached) {
          SpawnContainerSignal(sigabbrev_np(forward));
        } else {
          killpg(task_, forward);
        }
      }
    }
  }
}

void TaskShim::Supervise() {
  lease_watch_ = !args_.lease_path.empty();
  const SteadyTime start = SteadyClock::now();
  lease_ = Lease{start, start, Millis(0)};  // an unreadable lease at start counts as expired
  if (lease_watch_) {
    if (auto l = ReadLeaseFile(args_.lease_path)) lease_ = *l;
  }
  lease_check_at_ = lease_.expires;
  tick_due_ = start + kLeaseTick;
  while (!leader_status_) {
    pollfd fds[2] = {{sfd_, POLLIN, 0}, {err_rd_, POLLIN, 0}};
    int r = poll(fds, err_rd_ >= 0 ? 2 : 1, PollTimeoutMs());
    if (r < 0 && errno != EINTR) {
      LogLine(log_fd_, fmt::format("poll: {}", strerror(errno)));
      killpg(task_, SIGKILL);
    }
    if (err_rd_ >= 0 && r > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) ReadChildFailure();
    Tick();
    CheckLease();
    CheckKillDeadline();
    HandleSignals();
    ReapAvailable();
    if (root_finder_) {
      if (!leader_status_) root_finder_->Poll(SteadyClock::now());
      container_seen_ = container_seen_ || root_finder_->root().has_value();
    }
    SignalContainerIfDue();
  }
  if (err_rd_ >= 0) ReadChildFailure();  // the child is gone, so this cannot block
}

void TaskShim::ReapDescendants() {
  const auto deadline = SteadyClock::now() + kReapTimeout;
  while (true) {
    killpg(task_, SIGKILL);
    // The copier is spared: it exits by itself at the EOF of the task's output, once every
    // process that held it is gone, after copying all of it.
    KillOwnChildren(copier_);
    if (!ReapAvailable()) break;
    if (SteadyClock::now() >= deadline) {
      LogLine(log_fd_, fmt::format("some processes of the task did not exit within {} ms of "
                                   "SIGKILL; reporting the task as finished anyway",
                                   kReapTimeout.count()));
      if (copier_ > 0) {
        kill(copier_, SIGKILL);
        waitpid(copier_, nullptr, 0);
        copier_ = -1;
      }
      break;
    }
    pollfd pfd = {sfd_, POLLIN, 0};
    poll(&pfd, 1, kReapPollMs);
    DrainSignalFd(sfd_);
  }
}

namespace {

// Runs a runtime command with no output kept; its exit code, or -1 when it cannot run or
// takes longer than `timeout`.
int RunQuietly(const std::vector<std::string>& argv, Millis timeout) {
  SpawnOptions so;
  so.argv = argv;
  so.stdout_path = "/dev/null";
  auto child = Subprocess::Spawn(so);
  if (!child) return -1;
  auto status = child->WaitFor(timeout);
  if (!status) {
    child->Signal(SIGKILL, /*group=*/true);
    (void)child->Wait();
    return -1;
  }
  return status->Code();
}

// The last 8 KiB of `path`; empty if it cannot be read.
std::string LogTail(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return {};
  std::string tail(8192, '\0');
  off_t size = lseek(fd, 0, SEEK_END);
  off_t from = size > static_cast<off_t>(tail.size()) ? size - static_cast<off_t>(tail.size()) : 0;
  ssize_t n = pread(fd, tail.data(), tail.size(), from);
  close(fd);
  tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return tail;
}

// The last line of `path` that starts with "Error: " (Podman's and Docker's own failure
// messages), from the last 8 KiB; empty if none.
std::string LastRuntimeError(const std::string& path) {
  const std::string tail = LogTail(path);
  std::string found;
  size_t pos = 0;
  while (pos < tail.size()) {
    size_t end = tail.find('\n', pos);
    std::string_view line(tail.data() + pos, (end == std::string::npos ? tail.size() : end) - pos);
    if (line.starts_with("Error: ")) found = line.substr(7);
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return found;
}

// The last non-empty line of `path`'s last 8 KiB; empty if none.
std::string LastLogLine(const std::string& path) {
  std::string tail = LogTail(path);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  const size_t nl = tail.rfind('\n');
  return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

}  // namespace

void TaskShim::ExplainContainerExec(const ExitStatus& runtime) {
  // The container's init (--init: Podman's catatonit, Docker's tini) could not exec the
  // command: it exits 1 (catatonit) or 127 with one line, where a bare process would have
  // been exit 127 "not found" (126: not executable) from the shell's convention.
  if (runtime.signal != 0 || (runtime.exit_code != 1 && runtime.exit_code != 127)) return;
  const std::string line = LastLogLine(args_.log_path);
  const bool init_exec = line.find("failed to exec pid1") != std::string::npos ||
                         (line.find("tini") != std::string::npos && line.find("exec ") != std::string::npos);
  if (!init_exec) return;
  const bool missing = line.find("No such file or directory") != std::string::npos;
  const bool denied = line.find("Permission denied") != std::string::npos;
  if (!missing && !denied) return;
  std::string program;
  for (size_t i = 0; i + 1 < args_.command.size(); ++i) {
    if (args_.command[i] == args_.container_image) program = args_.command[i + 1];
  }
  exit_override_ = missing ? 127 : 126;
  runtime_error_ = fmt::format("image '{}' has no program '{}' it can run ({}; the command runs inside the image: "
                               "give a program the image has, by its path there)",
                               args_.container_image, program, missing ? "not found" : "permission denied");
  LogLine(log_fd_, runtime_error_);
}

void TaskShim::FinishContainer() {
  if (root_finder_) root_finder_->Clear();  // no root left to read
  if (args_.container_name.empty() || !leader_status_ || !start_error_.empty()) return;
  constexpr Millis kRuntimeTimeout{30000};
  const ExitStatus runtime = DecodeWaitStatus(*leader_status_);
  // 125 is the runtime's own failure in Podman's and Docker's convention (the command's
  // codes pass through); the image may be missing, or the runtime misconfigured.
  if (runtime.Code() == 125 && fence_error_.empty()) {
    const std::string why = LastRuntimeError(args_.log_path);
    const bool have_image = RunQuietly(ContainerImageExistsArgv(args_.container_runtime, args_.container_image),
                                       kRuntimeTimeout) == 0;
    runtime_error_ = have_image ? fmt::format("{} could not run image '{}': {}", args_.container_runtime,
                                            args_.container_image, why.empty() ? "exit code 125" : why)
                              : fmt::format("container image '{}' is not on this node and could not be pulled: {}",
                                            args_.container_image, why.empty() ? "exit code 125" : why);
    LogLine(log_fd_, runtime_error_);
  } else if (fence_error_.empty() && !term_sent_) {
    ExplainContainerExec(runtime);
  }
  // A runtime that ran its container to the end removed it (--rm). One that was stopped
  // (a SIGTERM reaching it while it was still creating the container makes it exit
  // without its clean-up), killed or failed may have left it.
  const bool stopped = term_sent_ || !fence_error_.empty();
  if (!stopped && runtime.signal == 0 && runtime.exit_code != 125) return;
  RemoveContainer();
}

void TaskShim::RemoveContainer() {
  constexpr Millis kRuntimeTimeout{30000};
  auto remove = [&] {
    if (RunQuietly(ContainerRemoveArgv(args_.container_runtime, args_.container_name), kRuntimeTimeout) < 0) {
      LogLine(log_fd_, fmt::format("could not remove container {} with {} within {} ms", args_.container_name,
                                   args_.container_runtime, kRuntimeTimeout.count()));
    }
  };
  remove();
  // A Docker client killed while its create request was in flight: the daemon finishes
  // the create after the removal above found nothing (measured on this VM: 1 leftover
  // "Created" container in 20 kills within 150 ms of `docker run`). Its request was sent
  // before the kill, so it lands within the daemon's latency: look again, bounded.
  if (!args_.container_detached || container_seen_ || DecodeWaitStatus(*leader_status_).signal == 0) return;
  constexpr Millis kLookAgain{500};
  constexpr int kLooks = 4;
  for (int i = 0; i < kLooks; ++i) {
    poll(nullptr, 0, static_cast<int>(kLookAgain.count()));
    if (RunQuietly(ContainerInitPidArgv(args_.container_runtime, args_.container_name), kRuntimeTimeout) == 0) {
      remove();
    }
  }
}

int TaskShim::ReportExit() {
  ExitStatus es = DecodeWaitStatus(*leader_status_);
  int exit_code = es.Code();
  int sig = es.signal;
  if (!start_error_.empty()) {
    exit_code = 127;
    sig = 0;
  } else if (exit_override_) {
    exit_code = *exit_override_;
  }
  const std::string& error = !start_error_.empty() ? start_error_ : !fence_error_.empty() ? fence_error_ : runtime_error_;
  WriteStatus(args_.status_path, exit_code, sig, error, log_fd_);
  close(log_fd_);
  close(sfd_);
  return exit_code;
}

// A command line the shim cannot parse: the reason and the usage on stderr; exit code 2.
int ReportUsage(const Error& error) {
  fprintf(stderr, "cohort task-shim: %s\n", error.message.c_str());
  fprintf(stderr,
          "usage: cohort task-shim --log FILE --status FILE --grace-ms N [--cwd DIR] "
          "[--parent-pid PID] [--lease FILE] [--user NAME:UID:GID:GROUP,...] [--cpus LIST] "
          "[--container-runtime CMD --container-name NAME --container-image IMAGE [--container-root FILE "
          "[--container-detached]]] [--output FILE [--truncate-output]] [--error FILE [--truncate-error]] "
          "[--io-user NAME:UID:GID:GROUP,...] [--io-cwd DIR] [--truncate-marker ID] "
          "(-- command [args...] | --hold)\n");
  return 2;
}

}  // namespace

int RunTaskShim(int argc, char** argv) {
  auto parsed = ParseArgs(argc, argv);
  if (!parsed) return ReportUsage(parsed.error());
  TaskShim shim(std::move(*parsed));
  if (!shim.LeaveAgentSession()) {
    return shim.FailStart("the agent exited before the task started", /*log_it=*/false);
  }
  if (auto r = shim.BecomeSupervisor(); !r) return shim.FailStart(r.error().message);
  if (auto r = shim.OpenTaskLog(); !r) return shim.FailStart(r.error().message);
  if (auto r = shim.StartCopier(); !r) return shim.FailStart(r.error().message);
  if (auto r = shim.SpawnTask(); !r) return shim.FailStart(r.error().message);
  shim.Supervise();
  shim.ReapDescendants();
  shim.FinishContainer();
  return shim.ReportExit();
}

}  // namespace cohort::agent
