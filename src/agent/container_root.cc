#include "agent/container_root.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "agent/container.h"
#include "agent/proc_usage.h"
#include "common/subprocess.h"

namespace cohort::agent {
namespace {

constexpr Millis kFirstInspect{100};
constexpr Millis kMaxBackoff{1000};
constexpr Millis kLivenessCheck{1000};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

template <typename T>
bool ParseWhole(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// The NSpid line of PROC/PID/status: the pid in each PID namespace from the reader's down.
std::vector<std::string> NsPids(int pid, std::string_view proc_root) {
  std::ifstream in(fmt::format("{}/{}/status", proc_root, pid));
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("NSpid:")) continue;
    std::istringstream fields(line.substr(6));
    std::vector<std::string> out;
    for (std::string f; fields >> f;) out.push_back(f);
    return out;
  }
  return {};
}

}  // namespace

std::optional<int> ParseInspectPid(std::string_view output) {
  int pid = 0;
  if (!ParseWhole(Trim(output), pid) || pid <= 0) return std::nullopt;
  return pid;
}

std::optional<ContainerRoot> CheckContainerInit(int pid, std::string_view proc_root) {
  // The start time before and after the NSpid read: the same process throughout.
  auto start = ProcStartTicks(pid, proc_root);
  if (!start) return std::nullopt;
  const auto ns = NsPids(pid, proc_root);
  if (ns.size() < 2 || ns.back() != "1") return std::nullopt;
  if (ProcStartTicks(pid, proc_root) != start) return std::nullopt;
  return ContainerRoot{pid, *start};
}

bool WriteContainerRoot(const std::string& path, const ContainerRoot& root) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  const std::string line = fmt::format("{} {}\n", root.pid, root.start_ticks);
  const bool written = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

std::optional<ContainerRoot> ReadContainerRoot(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  std::string_view s = Trim(line);
  const size_t space = s.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  ContainerRoot root;
  if (!ParseWhole(s.substr(0, space), root.pid) || !ParseWhole(s.substr(space + 1), root.start_ticks) ||
      root.pid <= 1 || root.start_ticks <= 0) {
    return std::nullopt;
  }
  return root;
}

ContainerRootFinder::ContainerRootFinder(std::string runtime_command, std::string container_name,
                                         std::string root_path)
    : runtime_command_(std::move(runtime_command)),
      name_(std::move(container_name)),
      root_path_(std::move(root_path)),
      out_path_(root_path_ + ".inspect") {}

void ContainerRootFinder::Start(SteadyTime now) {
  started_ = true;
  due_ = now + kFirstInspect;
  backoff_ = kFirstInspect;
}

int64_t ContainerRootFinder::MsUntilDue(SteadyTime now) const {
  if (!started_ || inspect_ > 0) return -1;
  return std::max<int64_t>(0, std::chrono::ceil<Millis>(due_ - now).count());
}

void ContainerRootFinder::Backoff(SteadyTime now) {
  due_ = now + backoff_;
  backoff_ = std::min(kMaxBackoff, backoff_ * 2);
}

void ContainerRootFinder::Poll(SteadyTime now) {
  if (!started_ || inspect_ > 0 || now < due_) return;
  if (root_) {
    // The published init still lives: nothing to ask. Gone while the task runs: the
    // container restarted (or is ending); find its init again.
    if (ProcStartTicks(root_->pid) == root_->start_ticks) {
      due_ = now + kLivenessCheck;
      return;
    }
    root_.reset();
    backoff_ = kFirstInspect;
  }
  unlink(out_path_.c_str());  // the child appends
  SpawnOptions so;
  so.argv = ContainerInitPidArgv(runtime_command_, name_);
  so.stdout_path = out_path_;
  auto child = Subprocess::Spawn(so);
  if (!child) {
    Backoff(now);
    return;
  }
  inspect_ = child->pid();  // reaped by the caller, handed back through OnChildExit
}

void ContainerRootFinder::Clear() {
  started_ = false;
  inspect_ = -1;
  unlink(root_path_.c_str());
  unlink(out_path_.c_str());
}

bool ContainerRootFinder::OnChildExit(pid_t pid, int status, SteadyTime now) {
  if (pid != inspect_ || inspect_ <= 0) return false;
  inspect_ = -1;
  std::optional<ContainerRoot> found;
  if (DecodeWaitStatus(status).Success()) {
    std::ifstream in(out_path_);
    std::stringstream text;
    text << in.rdbuf();
    if (auto p = ParseInspectPid(text.str())) found = CheckContainerInit(*p);
  }
  unlink(out_path_.c_str());
  if (found && WriteContainerRoot(root_path_, *found)) {
    root_ = found;
    due_ = now + kLivenessCheck;
  } else {
    Backoff(now);
  }
  return true;
}

}  // namespace cohort::agent
