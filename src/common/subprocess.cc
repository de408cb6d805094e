#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
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

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  pid_ = o.pid_;
  o.pid_ = -1;
  return *this;
}

Result<Subprocess> Subprocess::Spawn(const SpawnOptions& opts) {
  if (opts.argv.empty() || opts.argv[0].empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "empty command");
  }
  // Everything the child needs is built here, before fork.
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

  int out_fd = -1, err_fd = -1;
  if (!opts.stdout_path.empty()) {
    out_fd = open(opts.stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) {
      return Errorf(ErrorCode::kUnavailable, "cannot open {}: {}", opts.stdout_path,
                    strerror(errno));
    }
  }
  if (!opts.stderr_path.empty()) {
    err_fd = open(opts.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      if (out_fd >= 0) close(out_fd);
      return Errorf(ErrorCode::kUnavailable, "cannot open {}: {}", opts.stderr_path,
                    strerror(errno));
    }
  }
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    int e = errno;
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    if (null_fd >= 0) close(null_fd);
    return Errorf(ErrorCode::kInternal, "pipe: {}", strerror(e));
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(errpipe[0]);
    close(errpipe[1]);
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    if (null_fd >= 0) close(null_fd);
    return Errorf(ErrorCode::kUnavailable, "fork: {}", strerror(e));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    if (opts.new_process_group) setpgid(0, 0);
    if (opts.parent_death_signal) {
      prctl(PR_SET_PDEATHSIG, opts.parent_death_signal);
      if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    }
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : opts.blocked_signals) sigaddset(&mask, s);
    sigprocmask(SIG_SETMASK, &mask, nullptr);
    for (int s = 1; s < NSIG; ++s) {
      if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
    }
    // dup2(fd, fd) is a no-op that leaves close-on-exec set (the parent had that
    // standard fd closed, so open() returned it): clear the flag instead.
    auto redirect = [](int from, int to) {
      if (from == to) {
        fcntl(to, F_SETFD, 0);
      } else {
        dup2(from, to);
      }
    };
    if (null_fd >= 0) redirect(null_fd, 0);
    if (out_fd >= 0) redirect(out_fd, 1);
    if (err_fd >= 0) {
      redirect(err_fd, 2);
    } else if (out_fd >= 0) {
      redirect(out_fd, 2);
    }
    if (!opts.cwd.empty() && chdir(opts.cwd.c_str()) != 0) {
      int e = errno;
      (void)!write(errpipe[1], &e, sizeof e);
      _exit(127);
    }
    execve(exe.c_str(), argv.data(), envp.data());
    int e = errno;
    (void)!write(errpipe[1], &e, sizeof e);
    _exit(127);
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
