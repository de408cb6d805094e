#include "agent/output_file.h"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace cohort::agent {
namespace {

// Markers are "<hash>:<job>:<attempt>" (api::OutputTruncationMarker): far shorter.
constexpr size_t kMaxMarkerBytes = 256;

// Empties `fd`; "" or why it could not.
std::string Empty(int fd, const std::string& path) {
  if (ftruncate(fd, 0) == 0) return "";
  return fmt::format("cannot empty output file '{}': {}; appending to it", path, strerror(errno));
}

// The sidecar's way (no user attributes on the file's filesystem, or none this account may
// read): the marker is the content of TruncationSidecarPath(path), never followed through
// a symbolic link.
std::string TruncateMarkedBySidecar(int fd, const std::string& path, std::string_view attempt, int xattr_err) {
  const std::string side = TruncationSidecarPath(path);
  const int sfd = open(side.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0666);
  struct stat st {};
  if (sfd < 0 || fstat(sfd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = sfd < 0 ? errno : EINVAL;
    if (sfd >= 0) close(sfd);
    return fmt::format("output file '{}' is kept as it was, not emptied: its extended attribute {} cannot be read "
                       "({}) and '{}' cannot be made to mark it emptied ({})",
                       path, kTruncatedXattr, strerror(xattr_err), side, strerror(err));
  }
  char buf[kMaxMarkerBytes];
  ssize_t n;
  do {
    n = pread(sfd, buf, sizeof buf, 0);
  } while (n < 0 && errno == EINTR);
  std::string note;
  if (n < 0 || std::string_view(buf, static_cast<size_t>(n)) != attempt) {
    // The marker first, as with the attribute (TruncateOncePerAttempt).
    if (ftruncate(sfd, 0) == 0 && pwrite(sfd, attempt.data(), attempt.size(), 0) == static_cast<ssize_t>(attempt.size())) {
      note = Empty(fd, path);
    } else {
      note = fmt::format("output file '{}' is kept as it was, not emptied: cannot write '{}' to mark it emptied ({})",
                         path, side, strerror(errno));
    }
  }
  close(sfd);
  return note;
}

}  // namespace

int OpenOutputFile(const std::string& path) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW;
  constexpr int kMaxLinks = 40;  // the kernel's own limit on a path's links
  int dir = AT_FDCWD;            // where `name` is resolved: the last link's directory
  auto fail = [&](int err) {
    if (dir != AT_FDCWD) close(dir);
    errno = err;
    return -1;
  };
  std::string name = path;
  for (int links = 0; links <= kMaxLinks; ++links) {
    const int fd = openat(dir, name.c_str(), kFlags, 0666);
    if (fd >= 0) {
      if (dir != AT_FDCWD) close(dir);
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    if (errno != ELOOP) return fail(errno);
    // The name is a symbolic link: its owner, then its target, from the one inode.
    const int link = openat(dir, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    if (link < 0) return fail(errno);
    if (fstat(link, &st) != 0 || !S_ISLNK(st.st_mode)) {
      close(link);
      return fail(ELOOP);
    }
    if (st.st_uid != geteuid() && st.st_uid != 0) {
      close(link);
      return fail(kForeignLinkErr);
    }
    char target[4096];
    const ssize_t n = readlinkat(link, "", target, sizeof target);
    close(link);
    if (n <= 0 || n == static_cast<ssize_t>(sizeof target)) return fail(n < 0 ? errno : ENAMETOOLONG);
    // A relative target is relative to the link's directory.
    const size_t slash = name.rfind('/');
    if (slash != std::string::npos) {
      const int up = openat(dir, slash == 0 ? "/" : name.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (up < 0) return fail(errno);
      if (dir != AT_FDCWD) close(dir);
      dir = up;
    }
    name.assign(target, static_cast<size_t>(n));
  }
  return fail(ELOOP);
}

std::string OutputOpenError(int err) {
  if (err != kForeignLinkErr) return strerror(err);
  return "it is a symbolic link that another user owns, which cohort does not follow (remove it, or give the "
         "file it points to)";
}

std::string TruncationSidecarPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t name = slash == std::string::npos ? 0 : slash + 1;
  return fmt::format("{}.{}.cohort-truncated", path.substr(0, name), path.substr(name));
}

std::string TruncateOncePerAttempt(int fd, const std::string& path, std::string_view attempt, bool use_xattr,
                                   std::chrono::milliseconds lock_wait) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "";  // a FIFO, a terminal, /dev/null: nothing to empty
  // On NFS, a POSIX lock of the whole file, seen by every client. Tasks hold it for a few
  // system calls; a holder that keeps it longer is someone else's (the user's own flock on
  // the file, a hung lock server), and must not keep the task from starting.
  const auto deadline = std::chrono::steady_clock::now() + lock_wait;
  int locked;
  while ((locked = flock(fd, LOCK_EX | LOCK_NB)) != 0 && (errno == EINTR || errno == EWOULDBLOCK) &&
         std::chrono::steady_clock::now() < deadline) {
    poll(nullptr, 0, 5);
  }
  const std::string lock_note =
      locked == 0 ? ""
                  : fmt::format("cannot lock output file '{}' ({}): tasks that share it may empty it more than once",
                                path, errno == EWOULDBLOCK ? fmt::format("another process has held it for {} ms",
                                                                         lock_wait.count())
                                                           : std::string(strerror(errno)));
  std::string note;
  char buf[kMaxMarkerBytes];
  const ssize_t n = use_xattr ? fgetxattr(fd, kTruncatedXattr, buf, sizeof buf) : -1;
  const int get_err = use_xattr ? errno : ENOTSUP;
  if (n >= 0 && std::string_view(buf, static_cast<size_t>(n)) == attempt) {
    // This attempt has emptied it already: another task's lines may be there.
  } else if (n >= 0 || get_err == ENODATA || get_err == ERANGE) {
    // The marker before the emptying: should the emptying fail, the file keeps older lines,
    // where the other order could leave it unmarked and let a later task empty it again
    // under this attempt's lines.
    if (fsetxattr(fd, kTruncatedXattr, attempt.data(), attempt.size(), 0) == 0) {
      note = Empty(fd, path);
    } else if (errno == ENOTSUP) {
      note = TruncateMarkedBySidecar(fd, path, attempt, errno);
    } else {
      note = fmt::format("output file '{}' is kept as it was, not emptied: cannot set its extended attribute {} to "
                         "mark it emptied ({})",
                         path, kTruncatedXattr, strerror(errno));
    }
  } else {
    note = TruncateMarkedBySidecar(fd, path, attempt, get_err);
  }
  if (locked == 0) flock(fd, LOCK_UN);
  if (lock_note.empty() || note.empty()) return lock_note + note;
  return lock_note + "; " + note;
}

}  // namespace cohort::agent
