#include "agent/exec_cgroup.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "agent/proc_usage.h"
#include "common/clock.h"

namespace cohort::agent {

namespace {

constexpr long kCgroup2Magic = 0x63677270;  // CGROUP2_SUPER_MAGIC

// A mountinfo path field: "\040" and the like are octal escapes.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 4, v, 8);
      if (ec == std::errc() && p == s.data() + i + 4) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// Whether the leaf of `events` (its open cgroup.events) still has a member. Read through
// the fd that is polled: reading it is what re-arms its poll.
bool Populated(int events) {
  char buf[256];
  const ssize_t n = pread(events, buf, sizeof buf - 1, 0);
  if (n <= 0) return false;  // the leaf is gone
  return std::string_view(buf, static_cast<size_t>(n)).find("populated 0") == std::string_view::npos;
}

}  // namespace

Result<std::string> CgroupParent(std::string_view self) {
  // The agent's cgroup v2 path: "0::/PATH".
  std::string path;
  {
    std::ifstream in(std::string(self) + "/cgroup");
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("0::")) path = line.substr(3);
    }
  }
  if (path.empty()) return MakeError(ErrorCode::kUnavailable, "no cgroup v2 hierarchy (no 0:: line in /proc/self/cgroup)");
  // The cgroup2 mount: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - cgroup2 SOURCE ...".
  std::ifstream in(std::string(self) + "/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || !std::string_view(line).substr(dash + 3).starts_with("cgroup2 ")) continue;
    std::istringstream f(line.substr(0, dash));
    std::string id, parent, dev, root, mount;
    if (!(f >> id >> parent >> dev >> root >> mount)) continue;
    root = Unescape(root);
    mount = Unescape(mount);
    // The path is relative to the mount's root (a cgroup namespace's, a bind mount's).
    std::string rel;
    if (root == "/") {
      rel = path;
    } else if (path == root || path.starts_with(root + "/")) {
      rel = path.substr(root.size());
    } else {
      continue;
    }
    const std::string dir = rel == "/" || rel.empty() ? mount : mount + rel;
    struct statfs fs {};
    if (statfs(dir.c_str(), &fs) != 0) {
      return Errorf(ErrorCode::kUnavailable, "the agent's cgroup {}: {}", dir, strerror(errno));
    }
    if (static_cast<long>(fs.f_type) != kCgroup2Magic) {
      return Errorf(ErrorCode::kUnavailable, "{} is not a cgroup v2 directory", dir);
    }
    if (access(dir.c_str(), W_OK) != 0) {
      return Errorf(ErrorCode::kUnavailable, "the agent's cgroup {} is not writable: {}", dir, strerror(errno));
    }
    return dir;
  }
  return Errorf(ErrorCode::kUnavailable, "no cgroup2 mount holds the agent's cgroup {}", path);
}

Result<CgroupLeaf> MakeCgroupLeaf(const std::string& parent, const std::string& name) {
  CgroupLeaf leaf{parent + "/" + name, -1};
  if (mkdir(leaf.dir.c_str(), 0755) != 0) {
    return Errorf(ErrorCode::kUnavailable, "cannot make cgroup {}: {}", leaf.dir, strerror(errno));
  }
  leaf.procs_fd = open((leaf.dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (leaf.procs_fd < 0) {
    const int err = errno;
    rmdir(leaf.dir.c_str());
    return Errorf(ErrorCode::kUnavailable, "{} is not a cgroup (cgroup.procs: {})", leaf.dir, strerror(err));
  }
  return leaf;
}

int JoinCgroupLeaf(int procs_fd) {
  if (procs_fd < 0) return EBADF;
  return write(procs_fd, "0", 1) == 1 ? 0 : errno;
}

std::vector<int> CgroupMembers(const std::string& dir) {
  std::vector<int> out;
  std::ifstream in(dir + "/cgroup.procs");
  for (int pid = 0; in >> pid;) {
    if (pid > 0) out.push_back(pid);
  }
  return out;
}

void KillCgroupMembers(const std::string& dir) {
  // Opened without O_CREAT: a kernel before 5.14 has no cgroup.kill, and none is made.
  if (const int fd = open((dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC); fd >= 0) {
    const bool killed = write(fd, "1", 1) == 1;
    close(fd);
    if (killed) return;
  }
  // Before 5.14: a few rounds, for processes forked while the first were being killed.
  for (int round = 0; round < 5; ++round) {
    const std::vector<int> members = CgroupMembers(dir);
    if (members.empty()) return;
    for (int pid : members) kill(pid, SIGKILL);
    poll(nullptr, 0, 10);
  }
}

bool RemoveCgroupLeaf(CgroupLeaf& leaf, int wait_ms) {
  if (leaf.dir.empty()) return true;
  KillCgroupMembers(leaf.dir);
  if (leaf.procs_fd >= 0) close(leaf.procs_fd);
  leaf.procs_fd = -1;
  // cgroup.events reads "populated 0" once the last member has exited; a change of it
  // wakes a poll on it (POLLPRI).
  const int events = open((leaf.dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
  const SteadyTime deadline = SteadyClock::now() + Millis(wait_ms);
  while (events >= 0 && Populated(events) && SteadyClock::now() < deadline) {
    pollfd p{events, POLLPRI, 0};
    const auto left = std::chrono::duration_cast<Millis>(deadline - SteadyClock::now()).count();
    poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 1, 100)));
  }
  if (events >= 0) close(events);
  if (rmdir(leaf.dir.c_str()) != 0 && errno != ENOENT) return false;
  leaf.dir.clear();
  return true;
}

namespace {

constexpr std::string_view kLeafPrefix = "cohort-exec-";

// The leading decimal fields of a leaf's name after the prefix, each followed by '-' (the
// session id, last, is not a number).
std::vector<uint64_t> LeadingNumbers(std::string_view rest) {
  std::vector<uint64_t> out;
  for (;;) {
    uint64_t v = 0;
    auto [p, err] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (err != std::errc() || p == rest.data() || p == rest.data() + rest.size() || *p != '-') return out;
    out.push_back(v);
    rest.remove_prefix(static_cast<size_t>(p - rest.data()) + 1);
  }
}

// Whether the agent that named a leaf `name` is gone (above); `own_ns` is this process's
// PID namespace (nullopt: unreadable, so no leaf of the newer form is judged).
bool LeafAgentGone(std::string_view name, const std::optional<uint64_t>& own_ns, std::string_view proc_root) {
  const std::vector<uint64_t> n = LeadingNumbers(name.substr(kLeafPrefix.size()));
  if (n.size() >= 3) {  // NS-PID-START
    if (!own_ns || *own_ns != n[0] || n[1] == 0 || n[1] > static_cast<uint64_t>(INT32_MAX)) return false;
    const auto start = ProcStartTicks(static_cast<int>(n[1]), proc_root);
    return !start || static_cast<uint64_t>(*start) != n[2];
  }
  if (n.size() == 1 && n[0] > 0 && n[0] <= static_cast<uint64_t>(INT32_MAX)) {  // PID (older agents)
    return kill(static_cast<pid_t>(n[0]), 0) != 0 && errno == ESRCH;
  }
  return false;
}

}  // namespace

std::string LeafName(std::string_view id, std::string_view proc_root) {
  const int pid = getpid();
  const auto ns = ReadPidNamespace("self", proc_root);
  const auto start = ProcStartTicks(pid, proc_root);
  if (!ns || !start) return fmt::format("{}{}-{}", kLeafPrefix, pid, id);  // the older form
  return fmt::format("{}{}-{}-{}-{}", kLeafPrefix, *ns, pid, *start, id);
}

int RemoveLeftoverLeaves(const std::string& parent, std::string_view proc_root) {
  int removed = 0;
  const auto own_ns = ReadPidNamespace("self", proc_root);
  std::error_code ec;
  for (std::filesystem::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(kLeafPrefix) || !it->is_directory(ec)) continue;
    if (!LeafAgentGone(name, own_ns, proc_root)) continue;
    CgroupLeaf leaf{it->path().string(), -1};
    removed += RemoveCgroupLeaf(leaf) ? 1 : 0;
  }
  return removed;
}

}  // namespace cohort::agent
