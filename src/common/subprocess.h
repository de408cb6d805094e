// Subprocess: fork/exec of one child with a chosen environment, working directory,
// output files and process group. Used by the agent (task shims), `cohort up` (head and
// agents) and tests.
//
// Spawn prepares every buffer before fork, so the child only makes async-signal-safe
// calls; an exec failure is reported back through a close-on-exec pipe and returned as
// an Error ("cannot execute 'foo': No such file or directory"). A Subprocess object owns
// the pid until Wait reaps it; it is movable, not copyable, and not thread-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"

namespace cohort {

struct SpawnOptions {
  std::vector<std::string> argv;             // argv[0] is looked up in PATH when it has no '/'
  bool inherit_env = true;                   // start from this process's environment
  std::map<std::string, std::string> env;    // set (override) these variables
  std::vector<std::string> unset_env;        // remove these variables
  std::string cwd;                           // empty: inherit
  std::string stdout_path;                   // empty: inherit; otherwise opened for append
  std::string stderr_path;                   // empty: same as stdout (when stdout_path set)
  bool inherit_stdin = false;                // true: this process's stdin (an interactive command); else /dev/null
  bool new_process_group = true;             // setpgid(0, 0): the child leads its own group
  int parent_death_signal = 0;               // prctl(PR_SET_PDEATHSIG) when non-zero
  // Signals the child starts with blocked (every other signal is unblocked and default):
  // a child that reads these from a signalfd cannot be killed by one that arrives before
  // it has blocked them itself (they stay pending across exec).
  std::vector<int> blocked_signals;
};

struct ExitStatus {
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the terminating signal, or 0

  // Shell convention: the exit code, or 128 + signal.
  int Code() const { return signal ? 128 + signal : exit_code; }
  bool Success() const { return signal == 0 && exit_code == 0; }
  std::string ToString() const;  // "exit 0", "killed by SIGKILL"
};

class Subprocess {
 public:
  static Result<Subprocess> Spawn(const SpawnOptions& opts);

  Subprocess() = default;
  Subprocess(Subprocess&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  Subprocess& operator=(Subprocess&& o) noexcept;
  ~Subprocess() = default;  // does not kill or reap: call Wait, or hand the pid off

  pid_t pid() const { return pid_; }
  bool valid() const { return pid_ > 0; }

  // Sends `sig` to the child, or to its whole process group when `group` is true.
  void Signal(int sig, bool group = false) const;

  // Reaps the child if it has exited; nullopt while it runs.
  std::optional<ExitStatus> TryWait();
  // Blocks until the child exits.
  Result<ExitStatus> Wait();
  // Waits up to `timeout`; kDeadlineExceeded if the child is still running.
  Result<ExitStatus> WaitFor(Millis timeout);

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// A pidfd (pidfd_open, close-on-exec) for process `pid`, which names that process even
// after its pid is reused; -1 where the kernel (before 5.3) or the build has none.
int PidfdOpen(pid_t pid);

// Converts a waitpid status word into an ExitStatus.
ExitStatus DecodeWaitStatus(int status);

// "SIGKILL" for 9; "signal 77" for unknown numbers.
std::string SignalName(int sig);

// Absolute path of the running executable (/proc/self/exe).
std::string SelfExePath();

}  // namespace cohort
