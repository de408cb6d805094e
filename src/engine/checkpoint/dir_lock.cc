#include "engine/checkpoint/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

namespace cohort::engine {
namespace {

namespace fs = std::filesystem;

// What the holder wrote into LOCK (its first line), or a placeholder.
std::string Holder(int fd) {
  char buf[512];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  std::string text(buf, n > 0 ? static_cast<size_t>(n) : 0);
  text = text.substr(0, text.find('\n'));
  return text.empty() ? std::string("a process that has not said who it is yet") : text;
}

}  // namespace

Result<CheckpointDirLock> CheckpointDirLock::Acquire(const std::string& dir,
                                                     const std::string& owner,
                                                     std::chrono::milliseconds wait) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    return Errorf(ErrorCode::kInvalidArgument, "{} is a file, not a directory", dir);
  }
  fs::create_directories(dir, ec);
  if (ec) return Errorf(ErrorCode::kInvalidArgument, "cannot create {}: {}", dir, ec.message());
  const std::string path = (fs::path(dir) / "LOCK").string();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return Errorf(ErrorCode::kInvalidArgument, "cannot write in {}: creating {}: {}", dir, path,
                    std::strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // A holder removes LOCK as it releases it: the file this process opened may be gone
      // by now, and another process may lock the new one. Hold only the file that is there.
      struct stat held {}, named {};
      if (fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
          held.st_ino == named.st_ino) {
        const std::string text = owner + "\n";
        // Best effort: the description only improves another run's refusal message.
        if (ftruncate(fd, 0) == 0) (void)!pwrite(fd, text.data(), text.size(), 0);
        return CheckpointDirLock(fd, path);
      }
      close(fd);
      continue;
    }
    const int err = errno;
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS) {
      // A file system without locks (some network mounts): run unguarded, as before.
      close(fd);
      return CheckpointDirLock(-1, std::string());
    }
    const std::string holder = Holder(fd);
    close(fd);
    if (err != EWOULDBLOCK) {
      return Errorf(ErrorCode::kUnavailable, "locking {}: {}", path, std::strerror(err));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Errorf(ErrorCode::kFailedPrecondition,
                    "{} is in use by another run ({}); two runs writing one checkpoint directory "
                    "delete and overwrite each other's checkpoints: give this run its own "
                    "checkpoint.dir, or stop the other run first",
                    dir, holder);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

CheckpointDirLock::CheckpointDirLock(CheckpointDirLock&& o) noexcept
    : fd_(o.fd_), path_(std::move(o.path_)) {
  o.fd_ = -1;
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ < 0) return;
  // Removed while still held, so that no process can lock this file after the release.
  unlink(path_.c_str());
  close(fd_);
}

}  // namespace cohort::engine
