#include "common/file_modes.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

namespace cohort {
namespace {

constexpr mode_t kPrivateDirMode = 0700;
constexpr mode_t kPrivateFileMode = 0600;

// fchmod `fd` (at `path`, for messages) to `mode` unless it has it already.
Result<void> SetMode(int fd, const std::string& path, mode_t mode) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Errorf(ErrorCode::kInternal, "stat {}: {}", path, strerror(errno));
  if ((st.st_mode & 07777) == mode) return {};
  if (S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "{} is a shared directory (sticky bit, like /tmp); give Cohort a directory of its own", path);
  }
  if (fchmod(fd, mode) != 0) return Errorf(ErrorCode::kInternal, "chmod {}: {}", path, strerror(errno));
  return {};
}

// Opens `path` with `flags` (and O_CLOEXEC) and gives it `mode`. `missing_ok`: a path
// that does not exist is left alone.
Result<void> OpenAndSetMode(const std::string& path, int flags, mode_t mode, bool missing_ok) {
  int fd = open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) {
    if (missing_ok && errno == ENOENT) return {};
    return Errorf(ErrorCode::kInternal, "cannot open {}: {}", path, strerror(errno));
  }
  auto r = SetMode(fd, path, mode);
  close(fd);
  return r;
}

}  // namespace

Result<void> MakePrivateDir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Errorf(ErrorCode::kInternal, "cannot create directory {}: {}", path, ec.message());
  return OpenAndSetMode(path, O_RDONLY | O_DIRECTORY, kPrivateDirMode, /*missing_ok=*/false);
}

Result<void> MakePrivateFile(const std::string& path) {
  return OpenAndSetMode(path, O_RDONLY | O_CREAT | O_NOFOLLOW, kPrivateFileMode, /*missing_ok=*/false);
}

Result<void> RestrictFileIfPresent(const std::string& path) {
  return OpenAndSetMode(path, O_RDONLY | O_NOFOLLOW, kPrivateFileMode, /*missing_ok=*/true);
}

Result<void> WritePrivateFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errorf(ErrorCode::kUnavailable, "cannot write {}: {}", tmp, strerror(errno));
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = strerror(errno);
    unlink(tmp.c_str());
    return Errorf(ErrorCode::kUnavailable, "cannot write {}: {}", path, why);
  }
  return {};
}

}  // namespace cohort
