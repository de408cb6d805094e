#include "engine/data/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

namespace cohort::engine {

Error IoError(std::string_view what, const std::string& path, int err) {
  std::string msg;
  if (err == ENOSPC) {
    msg = fmt::format("{} {}: no space left on device (ENOSPC)", what, path);
  } else if (err == EDQUOT) {
    msg = fmt::format("{} {}: disk quota exceeded (EDQUOT)", what, path);
  } else {
    msg = fmt::format("{} {}: {}", what, path, std::strerror(err));
  }
  return Error(ErrorCode::kUnavailable, std::move(msg));
}

Result<FileWriter> FileWriter::Create(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::unexpected(IoError("creating", path, errno));
  return FileWriter(fd, path);
}

FileWriter::FileWriter(FileWriter&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) {
  o.fd_ = -1;
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) close(fd_);
}

Result<void> FileWriter::Write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(IoError("writing", path_, errno));
    }
    if (n == 0) return std::unexpected(IoError("writing", path_, EIO));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return {};
}

Result<void> FileWriter::SyncAndClose() {
  if (fsync(fd_) != 0) {
    int err = errno;
    close(fd_);
    fd_ = -1;
    return std::unexpected(IoError("fsync", path_, err));
  }
  int rc = close(fd_);
  fd_ = -1;
  if (rc != 0) return std::unexpected(IoError("closing", path_, errno));
  return {};
}

Result<void> FsyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return std::unexpected(IoError("opening directory", dir, errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  // Some filesystems refuse fsync on directories; that is not a write failure.
  if (rc != 0 && err != EINVAL && err != EROFS) {
    return std::unexpected(IoError("fsync directory", dir, err));
  }
  return {};
}

std::string TempSiblingPath(const std::string& path) {
  std::filesystem::path p(path);
  std::random_device rd;
  std::string name = fmt::format(".{}.tmp-{}-{:08x}", p.filename().string(), getpid(), rd());
  return (p.parent_path() / name).string();
}

Result<void> WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes) {
  std::string tmp = TempSiblingPath(path);
  auto attempt = [&]() -> Result<void> {
    FileWriter w = COHORT_TRY(FileWriter::Create(tmp));
    COHORT_TRY_VOID(w.Write(bytes.data(), bytes.size()));
    COHORT_TRY_VOID(w.SyncAndClose());
    if (rename(tmp.c_str(), path.c_str()) != 0) {
      return std::unexpected(IoError("renaming " + tmp + " to", path, errno));
    }
    return {};
  };
  Result<void> r = attempt();
  if (!r) {
    unlink(tmp.c_str());
    return r;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  return FsyncDir(dir.empty() ? "." : dir);
}

}  // namespace cohort::engine
