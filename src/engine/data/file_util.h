// Small POSIX file helpers shared by the data and checkpoint code: a writer that reports
// errno clearly (ENOSPC says "no space left on device"), atomic replace-by-rename, and
// directory fsync. Free functions and a move-only writer; one thread per writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/error.h"

namespace cohort::engine {

// kUnavailable "<what> <path>: <strerror>"; ENOSPC reads "no space left on device (ENOSPC)".
Error IoError(std::string_view what, const std::string& path, int err);

// Writes a new file (created or truncated, mode 0644). Close() fsyncs before closing.
// The destructor closes without fsync (for error paths).
class FileWriter {
 public:
  static Result<FileWriter> Create(const std::string& path);
  FileWriter(FileWriter&& o) noexcept;
  FileWriter& operator=(FileWriter&&) = delete;
  ~FileWriter();

  Result<void> Write(const void* data, size_t bytes);
  // fsync + close; kUnavailable naming the file on failure.
  Result<void> SyncAndClose();
  const std::string& path() const { return path_; }

 private:
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// fsyncs a directory so a rename or create inside it is durable.
Result<void> FsyncDir(const std::string& dir);

// A unique name for a temporary sibling of `path`: "<dir>/.<base>.tmp-<pid>-<random>".
std::string TempSiblingPath(const std::string& path);

// Writes bytes to a temporary sibling, fsyncs it, renames it over `path` and fsyncs the
// directory. On failure the temporary file is removed and `path` is untouched.
Result<void> WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace cohort::engine
