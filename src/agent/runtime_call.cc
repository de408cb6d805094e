#include "agent/runtime_call.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/subprocess.h"

namespace cohort::agent {

RuntimeCalls::~RuntimeCalls() {
  MutexLock lock(mu_);
  for (int fd : pidfds_) close(fd);
}

void RuntimeCalls::CancelAll() {
  MutexLock lock(mu_);
  cancelled_ = true;
#ifdef SYS_pidfd_send_signal
  for (int fd : pidfds_) syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
#endif
}

bool RuntimeCalls::cancelled() const {
  MutexLock lock(mu_);
  return cancelled_;
}

bool RuntimeCalls::Add(int pidfd) {
  MutexLock lock(mu_);
  if (cancelled_) return false;
  if (pidfd >= 0) pidfds_.insert(pidfd);
  return true;
}

void RuntimeCalls::Remove(int pidfd) {
  if (pidfd < 0) return;
  MutexLock lock(mu_);
  pidfds_.erase(pidfd);
  close(pidfd);
}

Result<std::string> RunRuntimeCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                                      Millis timeout, RuntimeCalls* calls) {
  auto cancelled = [&] {
    return Errorf(ErrorCode::kUnavailable, "`{}` cancelled: the agent is stopping", fmt::join(argv, " "));
  };
  if (calls && calls->cancelled()) return cancelled();
  std::error_code ec;
  std::filesystem::create_directories(scratch_dir, ec);
  static std::atomic<uint64_t> seq{0};
  const std::string path = fmt::format("{}/runtime-{}-{}.out", scratch_dir, getpid(), seq++);
  SpawnOptions o;
  o.argv = argv;
  o.stdout_path = path;
  o.stderr_path = path + ".err";
  auto p = Subprocess::Spawn(o);
  if (!p) {  // not installed here
    std::filesystem::remove(path, ec);
    std::filesystem::remove(path + ".err", ec);
    return Errorf(ErrorCode::kNotFound, "{}", p.error().message);
  }
  // The child is ours and unreaped: its pid names it until the wait below.
  int pidfd = calls ? PidfdOpen(p->pid()) : -1;
  if (calls && !calls->Add(pidfd)) {  // cancelled since the check above
    if (pidfd >= 0) close(pidfd);
    pidfd = -1;
    p->Signal(SIGKILL);
  }
  auto st = p->WaitFor(timeout);
  if (calls) calls->Remove(pidfd);
  auto read = [](const std::string& f) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string out = read(path), err = read(path + ".err");
  std::filesystem::remove(path, ec);
  std::filesystem::remove(path + ".err", ec);
  if (calls && calls->cancelled() && (!st || !st->Success())) {
    if (!st) {
      p->Signal(SIGKILL);
      (void)p->Wait();
    }
    return cancelled();
  }
  if (!st) {
    p->Signal(SIGKILL);
    (void)p->Wait();
    return Errorf(ErrorCode::kUnavailable, "`{}` did not finish within {}", fmt::join(argv, " "), FormatDuration(timeout.count()));
  }
  if (!st->Success()) {
    std::string line = err.substr(0, err.find('\n'));
    return Errorf(ErrorCode::kUnavailable, "`{}` failed ({}): {}", fmt::join(argv, " "), st->ToString(),
                  line.empty() ? "no message" : line.substr(0, 500));
  }
  return out;
}

}  // namespace cohort::agent
