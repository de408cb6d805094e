#include "comm/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "comm/store_util.h"

namespace cohort::comm {
namespace {

constexpr size_t kChunk = 200;  // characters of the encoded key per path component

Error IoError(std::string_view what, const std::string& path, int err) {
  return Error{ErrorCode::kUnavailable, fmt::format("file store: {} {}: {}", what, path, std::strerror(err))};
}

// A name for a temporary file that no other writer (any process, any host) picks.
std::string TempName() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format(".tmp.{}.{:016x}", getpid(), rng());
}

// Closes a file descriptor when it goes out of scope.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

Result<std::unique_ptr<FileStore>> FileStore::Open(const std::string& dir) {
  if (dir.empty() || dir[0] != '/') {
    return Errorf(ErrorCode::kInvalidArgument, "file store: directory '{}' must be an absolute path", dir);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) {
    return Errorf(ErrorCode::kUnavailable, "file store: cannot create directory {}: {}", dir,
                  ec ? ec.message() : std::string("not a directory"));
  }
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return std::unique_ptr<FileStore>(new FileStore(std::move(d)));
}

Result<std::string> FileStore::PathFor(const std::string& key, const char* prefix, bool create_dirs) const {
  std::string enc = PercentEncode(key);
  std::string path = dir_;
  size_t pos = 0;
  while (enc.size() - pos > kChunk) {
    path += "/d_";
    path.append(enc, pos, kChunk);
    pos += kChunk;
  }
  if (create_dirs && pos > 0) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return Errorf(ErrorCode::kUnavailable, "file store: cannot create directory {}: {}", path, ec.message());
  }
  path += '/';
  path += prefix;
  path.append(enc, pos, std::string::npos);
  return path;
}

Result<std::optional<std::string>> FileStore::ReadIfPresent(const std::string& path) const {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::optional<std::string>();
    return std::unexpected(IoError("cannot open", path, errno));
  }
  FdCloser closer{fd};
  std::string out;
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(IoError("cannot read", path, errno));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return std::optional<std::string>(std::move(out));
}

Result<void> FileStore::WriteAtomically(const std::string& path, const std::string& value) const {
  std::string tmp = path.substr(0, path.rfind('/') + 1) + TempName();
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return std::unexpected(IoError("cannot create", tmp, errno));
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return std::unexpected(IoError("cannot write", tmp, err));
    }
    done += static_cast<size_t>(n);
  }
  // On NFS, close() is where a failed write is reported.
  if (close(fd) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return std::unexpected(IoError("cannot write", tmp, err));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return std::unexpected(IoError("cannot rename into", path, err));
  }
  return {};
}

Result<void> FileStore::Set(const std::string& key, const std::string& value) {
  COHORT_TRY_VOID(CheckKey(key));
  std::string path = COHORT_TRY(PathFor(key, "k_", /*create_dirs=*/true));
  return WriteAtomically(path, value);
}

Result<std::string> FileStore::Get(const std::string& key, Millis timeout) {
  COHORT_TRY_VOID(CheckKey(key));
  std::string path = COHORT_TRY(PathFor(key, "k_", /*create_dirs=*/false));
  SteadyTime deadline = SteadyClock::now() + timeout;
  Backoff backoff(Millis(1), Millis(50));
  for (;;) {
    auto value = COHORT_TRY(ReadIfPresent(path));
    if (value) return std::move(*value);
    if (SteadyClock::now() >= deadline) return std::unexpected(TimeoutError(timeout, {key}));
    std::this_thread::sleep_for(backoff.Next(deadline));
  }
}

Result<void> FileStore::Wait(const std::vector<std::string>& keys, Millis timeout) {
  std::vector<std::string> missing;
  std::vector<std::string> paths;
  for (const auto& key : keys) {
    COHORT_TRY_VOID(CheckKey(key));
    missing.push_back(key);
    paths.push_back(COHORT_TRY(PathFor(key, "k_", /*create_dirs=*/false)));
  }
  SteadyTime deadline = SteadyClock::now() + timeout;
  Backoff backoff(Millis(1), Millis(50));
  for (;;) {
    std::vector<std::string> still, still_paths;
    for (size_t i = 0; i < missing.size(); ++i) {
      // Presence is all Wait needs; access() avoids reading large values.
      if (access(paths[i].c_str(), F_OK) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) return std::unexpected(IoError("cannot check", paths[i], errno));
        still.push_back(missing[i]);
        still_paths.push_back(paths[i]);
      }
    }
    missing = std::move(still);
    paths = std::move(still_paths);
    if (missing.empty()) return {};
    if (SteadyClock::now() >= deadline) return std::unexpected(TimeoutError(timeout, missing));
    std::this_thread::sleep_for(backoff.Next(deadline));
  }
}

Result<int64_t> FileStore::Add(const std::string& key, int64_t delta) {
  COHORT_TRY_VOID(CheckKey(key));
  std::string path = COHORT_TRY(PathFor(key, "k_", /*create_dirs=*/true));
  std::string lock_path = COHORT_TRY(PathFor(key, "l_", /*create_dirs=*/false));
  int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return std::unexpected(IoError("cannot open lock file", lock_path, errno));
  FdCloser closer{fd};  // closing the descriptor releases the lock
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) return std::unexpected(IoError("cannot lock", lock_path, errno));
  }
  auto current = COHORT_TRY(ReadIfPresent(path));
  int64_t value = 0;
  if (current) {
    auto parsed = ParseInt64(*current);
    if (!parsed) {
      return Errorf(ErrorCode::kFailedPrecondition, "store: key '{}' holds a value that is not an integer",
                    PrintableKey(key));
    }
    value = *parsed;
  }
  int64_t sum = COHORT_TRY(CheckedAdd(key, value, delta));
  COHORT_TRY_VOID(WriteAtomically(path, std::to_string(sum)));
  return sum;
}

}  // namespace cohort::comm
