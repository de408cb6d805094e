// FileStore: a Store kept in a directory, for ranks that share a file system (NFS, Lustre,
// a local disk for single-node jobs). URL: file:///abs/path.
//
// Each key is a file named after the percent-encoded key ("k_<encoded>"; long keys are
// split into "d_<chunk>/" directories of 200 characters so no name passes NAME_MAX). Set
// writes a temporary file and renames it over the key, so readers see the whole old
// value or the whole new one. Get and Wait poll for the file with a backoff from 1 ms to
// 50 ms. Add holds an flock on a lock file beside the key ("l_<encoded>") while it reads,
// adds and renames, so concurrent Adds from any process on any host that honours flock
// (Linux NFSv4 maps it to byte-range locks) are atomic.
//
// Keys stay after the job; use a fresh directory per job attempt. Thread-safe: the object
// holds only the directory name; every call opens its own files.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/store.h"

namespace cohort::comm {

class FileStore final : public Store {
 public:
  // Opens the store in `dir` (an absolute path), creating it and its parents if missing.
  // kInvalidArgument for a relative path; kUnavailable if the directory cannot be created.
  static Result<std::unique_ptr<FileStore>> Open(const std::string& dir);

  Result<void> Set(const std::string& key, const std::string& value) override;
  Result<std::string> Get(const std::string& key, Millis timeout) override;
  Result<void> Wait(const std::vector<std::string>& keys, Millis timeout) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;

  const std::string& dir() const { return dir_; }

 private:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}

  // Where `key` lives; `prefix` is "k_" for the value and "l_" for Add's lock file.
  // Creates the chunk directories of a long key when `create_dirs`.
  Result<std::string> PathFor(const std::string& key, const char* prefix, bool create_dirs) const;
  // The value at `path`: nullopt if the file does not exist; kUnavailable on I/O errors.
  Result<std::optional<std::string>> ReadIfPresent(const std::string& path) const;
  // Writes `value` to a temporary file in path's directory and renames it to `path`.
  Result<void> WriteAtomically(const std::string& path, const std::string& value) const;

  const std::string dir_;
};

}  // namespace cohort::comm
