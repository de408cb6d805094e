#include "agent/output_file.h"

#include <fcntl.h>
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
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666);
  if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string TruncationSidecarPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t name = slash == std::string::npos ? 0 : slash + 1;
  return fmt::format("{}.{}.cohort-truncated", path.substr(0, name), path.substr(name));
}

std::string TruncateOncePerAttempt(int fd, const std::string& path, std::string_view attempt, bool use_xattr) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "";  // a FIFO, a terminal, /dev/null: nothing to empty
  int locked;
  do {
    locked = flock(fd, LOCK_EX);  // on NFS, a POSIX lock of the whole file, seen by every client
  } while (locked != 0 && errno == EINTR);
  const std::string lock_note =
      locked == 0 ? ""
                  : fmt::format("cannot lock output file '{}' ({}): tasks that share it may empty it more than once",
                                path, strerror(errno));
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
