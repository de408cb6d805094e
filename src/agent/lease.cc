#include "agent/lease.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include <fmt/format.h>
#include <linux/magic.h>

#include "agent/wakeup_lateness.h"
#include "common/json.h"
#include "common/log.h"

namespace cohort::agent {
namespace {

// Bounds of the lease's numbers (~285 years in ms; steady-clock nanoseconds must not overflow).
constexpr int64_t kMaxLeaseMs = 9'000'000'000'000;

int64_t ToMs(SteadyTime t) { return std::chrono::duration_cast<Millis>(t.time_since_epoch()).count(); }

}  // namespace

SteadyTime Lease::KillAt(Millis recent_lateness) const {
  auto margin = std::chrono::duration_cast<Millis>(deadline - expires);
  return expires + LapseAllowance(recent_lateness, margin);
}

Result<void> WriteLeaseFile(const std::string& path, const Lease& lease) {
  const std::string tmp = path + ".tmp";
  std::string text = json{{"expires_ms", ToMs(lease.expires)},
                          {"deadline_ms", ToMs(lease.deadline)},
                          {"timeout_ms", lease.granted.count()}}.dump() + "\n";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int err = errno;
  if (fd >= 0) close(fd);
  if (ok && rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) return Errorf(ErrorCode::kInternal, "cannot write lease {}: {}", path, strerror(err));
  return {};
}

std::optional<Lease> ReadLeaseFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return std::nullopt;
  auto j = ParseJson(std::string_view(buf, static_cast<size_t>(n)), "lease file");
  if (!j || !j->is_object()) return std::nullopt;
  auto r = ObjectReader::Open(*j);
  if (!r) return std::nullopt;
  auto expires = r->Int("expires_ms", std::nullopt, 0, kMaxLeaseMs);
  auto timeout = r->Int("timeout_ms", 0, 0, kMaxLeaseMs);
  if (!expires || !timeout) return std::nullopt;
  auto deadline = r->Int("deadline_ms", *expires, *expires, kMaxLeaseMs);
  if (!deadline) return std::nullopt;
  return Lease{SteadyTime(Millis(*expires)), SteadyTime(Millis(*deadline)), Millis(*timeout)};
}

std::string LeaseDirectory(const std::string& work_dir, const std::string& memory_root) {
  if (memory_root.empty()) return work_dir;
  const uid_t uid = geteuid();
  const std::string dir = LeaseDirectoryName(work_dir, memory_root);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    LOG_WARN("the tasks' lease stays in {}: cannot create {}: {}", work_dir, dir, strerror(errno));
    return work_dir;
  }
  // The root is shared (/dev/shm is world-writable): the name may have been taken first.
  // Only a real directory of this user's that nobody else can write is used.
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 0077) != 0) {
    LOG_WARN("the tasks' lease stays in {}: {} is not a private directory of user {}", work_dir, dir, uid);
    return work_dir;
  }
  return dir;
}

bool OnTmpfs(const std::string& path) {
  struct statfs fs {};
  return statfs(path.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

std::string AgentLeasePath(const std::string& work_dir) {
  return LeaseDirectory(work_dir, OnTmpfs("/dev/shm") ? "/dev/shm" : "") + "/tasks.lease";
}

}  // namespace cohort::agent
