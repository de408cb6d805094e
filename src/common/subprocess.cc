#include "common/subprocess.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <thread>

extern char** environ;

namespace cohort {

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev) return std::string("SIG") + abbrev;
  return fmt::format("signal {}", sig);
}

std::string ExitStatus::ToString() const {
  if (signal) return "killed by " + SignalName(signal);
  return fmt::format("exit {}", exit_code);
}

ExitStatus DecodeWaitStatus(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  }
  return s;
}

std::string SelfExePath() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "cohort";
  buf[n] = '\0';
  return buf;
}

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // always close-on-exec
#else
  (void)pid;
  return -1;
#endif
}

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  pid_ = o.pid_;
  o.pid_ = -1;
  return *this;
}

namespace {

// What the child of Spawn does between vfork and execve, all prepared by the parent.
struct ChildPlan {
  const char* exe;
  char* const* argv;
  char* const* envp;
  const char* cwd;  // nullptr: stay
  int null_fd, out_fd, err_fd, errpipe_w;
  pid_t parent;
  bool new_process_group;
  int parent_death_signal;
  const std::vector<int>* blocked_signals;
};

// The child: async-signal-safe calls only, no allocation, never returns. Reports a failure
// to start as its errno on `errpipe_w`.
[[noreturn]] void ExecChild(const ChildPlan& p) {
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
  }
  if (p.new_process_group) setpgid(0, 0);
  if (p.parent_death_signal) {
    prctl(PR_SET_PDEATHSIG, p.parent_death_signal);
    if (getppid() != p.parent) _exit(127);  // the parent died before prctl took effect
  }
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : *p.blocked_signals) sigaddset(&mask, s);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
  // dup2(fd, fd) is a no-op that leaves close-on-exec set (the parent had that standard
  // fd closed, so open() returned it): clear the flag instead.
  auto redirect = [](int from, int to) {
    if (from == to) {
      fcntl(to, F_SETFD, 0);
    } else {
      dup2(from, to);
    }
  };
  if (p.null_fd >= 0) redirect(p.null_fd, 0);
  if (p.out_fd >= 0) redirect(p.out_fd, 1);
  if (p.err_fd >= 0) {
    redirect(p.err_fd, 2);
  } else if (p.out_fd >= 0) {
    redirect(p.out_fd, 2);
  }
  if (p.cwd && chdir(p.cwd) != 0) {
    int e = errno;
    (void)!write(p.errpipe_w, &e, sizeof e);
    _exit(127);
  }
  execve(p.exe, p.argv, p.envp);
  int e = errno;
  (void)!write(p.errpipe_w, &e, sizeof e);
  _exit(127);
}

// vfork, not fork: the child shares the parent's memory until it calls execve, so starting
// it costs the same whatever the parent's size (fork copied the page tables of the
// CUDA-linked agent: ~6 ms per task, most of a short job's start). Every signal stays
// blocked in the calling thread meanwhile, so no handler of the parent runs in the child
// on the shared memory; the child resets its dispositions before it sets its own mask.
// Returns the child's pid, or -1 with `*error` set.
pid_t VforkExec(const ChildPlan& plan, int* error) {
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  pid_t pid = vfork();
  if (pid == 0) ExecChild(plan);
  *error = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return pid;
}

}  // namespace

Result<Subprocess> Subprocess::Spawn(const SpawnOptions& opts) {
  if (opts.argv.empty() || opts.argv[0].empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "empty command");
  }
  // Everything the child needs is built here, before vfork.
  std::map<std::string, std::string> envmap;
  if (opts.inherit_env) {
    for (char** e = environ; e && *e; ++e) {
      const char* eq = strchr(*e, '=');
      if (!eq) continue;
      envmap[std::string(*e, eq - *e)] = eq + 1;
    }
  }
  for (const auto& k : opts.unset_env) envmap.erase(k);
  for (const auto& [k, v] : opts.env) envmap[k] = v;
  std::vector<std::string> env_strings;
  env_strings.reserve(envmap.size());
  for (const auto& [k, v] : envmap) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = opts.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // PATH lookup with the child's PATH, done in the parent.
  std::string exe = args[0];
  if (exe.find('/') == std::string::npos) {
    auto it = envmap.find("PATH");
    std::string path = it != envmap.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
    size_t start = 0;
    std::string found;
    while (start <= path.size()) {
      size_t end = path.find(':', start);
      if (end == std::string::npos) end = path.size();
      std::string dir = path.substr(start, end - start);
      if (dir.empty()) dir = ".";
      std::string cand = dir + "/" + exe;
      if (access(cand.c_str(), X_OK) == 0) {
        found = cand;
        break;
      }
      start = end + 1;
    }
    if (found.empty()) {
      return Errorf(ErrorCode::kInvalidArgument, "cannot execute '{}': not found in PATH", exe);
    }
    exe = found;
  }

  const int out_fd = opts.stdout_path.empty()
                         ? -1
                         : open(opts.stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (!opts.stdout_path.empty() && out_fd < 0) {
    return Errorf(ErrorCode::kUnavailable, "cannot open {}: {}", opts.stdout_path, strerror(errno));
  }
  const int err_fd = opts.stderr_path.empty()
                         ? -1
                         : open(opts.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (!opts.stderr_path.empty()) {
    if (err_fd < 0) {
      if (out_fd >= 0) close(out_fd);
      return Errorf(ErrorCode::kUnavailable, "cannot open {}: {}", opts.stderr_path,
                    strerror(errno));
    }
  }
  const int null_fd = opts.inherit_stdin ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC);
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    int e = errno;
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    if (null_fd >= 0) close(null_fd);
    return Errorf(ErrorCode::kInternal, "pipe: {}", strerror(e));
  }
  const ChildPlan plan{exe.c_str(), argv.data(), envp.data(), opts.cwd.empty() ? nullptr : opts.cwd.c_str(),
                       null_fd, out_fd, err_fd, errpipe[1], getpid(), opts.new_process_group,
                       opts.parent_death_signal, &opts.blocked_signals};
  int fork_errno = 0;
  pid_t pid = VforkExec(plan, &fork_errno);
  if (pid < 0) {
    close(errpipe[0]);
    close(errpipe[1]);
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    if (null_fd >= 0) close(null_fd);
    return Errorf(ErrorCode::kUnavailable, "vfork: {}", strerror(fork_errno));
  }
  close(errpipe[1]);
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0) close(err_fd);
  if (null_fd >= 0) close(null_fd);
  if (opts.new_process_group) setpgid(pid, pid);  // also from the parent: no race on killpg
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(errpipe[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(errpipe[0]);
  if (n == sizeof child_errno) {
    int st;
    waitpid(pid, &st, 0);
    if (!opts.cwd.empty() && access(opts.cwd.c_str(), X_OK) != 0) {
      return Errorf(ErrorCode::kInvalidArgument, "cannot enter working directory '{}': {}",
                    opts.cwd, strerror(child_errno));
    }
    return Errorf(ErrorCode::kInvalidArgument, "cannot execute '{}': {}", args[0],
                  strerror(child_errno));
  }
  return Subprocess(pid);
}

void Subprocess::Signal(int sig, bool group) const {
  if (pid_ <= 0) return;
  if (group) {
    ::kill(-pid_, sig);
  } else {
    ::kill(pid_, sig);
  }
}

std::optional<ExitStatus> Subprocess::TryWait() {
  if (pid_ <= 0) return std::nullopt;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    pid_ = -1;
    return DecodeWaitStatus(st);
  }
  return std::nullopt;
}

Result<ExitStatus> Subprocess::Wait() {
  if (pid_ <= 0) return MakeError(ErrorCode::kFailedPrecondition, "no child to wait for");
  int st = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &st, 0);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return Errorf(ErrorCode::kInternal, "waitpid: {}", strerror(errno));
  pid_ = -1;
  return DecodeWaitStatus(st);
}

Result<ExitStatus> Subprocess::WaitFor(Millis timeout) {
  auto deadline = SteadyClock::now() + timeout;
  auto sleep = Millis(1);
  while (true) {
    if (auto s = TryWait()) return *s;
    if (pid_ <= 0) return MakeError(ErrorCode::kFailedPrecondition, "no child to wait for");
    if (SteadyClock::now() >= deadline) {
      return MakeError(ErrorCode::kDeadlineExceeded, "child still running");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, Millis(50));
  }
}

}  // namespace cohort
