// Token datasets on disk and in memory.
//
// On disk a dataset is one or more shards, read in the order given (a glob is sorted):
//  - llm.c's .bin format: a 1024-byte header of 256 little-endian int32 (magic 20240520,
//    version 1, token count), then the tokens as uint16;
//  - raw little-endian uint16 tokens (any file that does not start with the magic).
// Shards are memory-mapped and a reader touches only the ranges it reads, so each rank of
// a data-parallel job reads only its part. Thread-safe for concurrent reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"

namespace cohort::engine {

class TokenDataset {
 public:
  // Opens the files matching `pattern` (a path or a glob, sorted). kNotFound when nothing
  // matches; kInvalidArgument naming the file for a bad header (wrong magic with a .bin
  // name, unknown version), a size that disagrees with the header's count (truncated), an
  // odd byte count, or an empty shard.
  static Result<TokenDataset> Open(const std::string& pattern);
  // A dataset over tokens held in memory (tokenized text).
  static TokenDataset FromTokens(std::vector<int32_t> tokens);

  TokenDataset(TokenDataset&&) noexcept;
  TokenDataset& operator=(TokenDataset&&) noexcept;
  ~TokenDataset();

  // Total tokens over all shards.
  size_t size() const;
  // Copies tokens [offset, offset + out.size()) into out, across shard boundaries.
  // kInvalidArgument when the range exceeds size().
  Result<void> Read(size_t offset, std::span<int32_t> out) const;
  // kInvalidArgument naming the shard and position of the first id >= vocab_size.
  Result<void> CheckVocab(int vocab_size) const;
  // The files, in order (empty for an in-memory dataset).
  std::vector<std::string> files() const;

 private:
  struct Impl;
  explicit TokenDataset(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes `tokens` as an llm.c .bin shard: to a temporary name in the same directory,
// fsynced, then renamed over `path`. kInvalidArgument if an id is outside [0, 65535];
// kUnavailable if the file cannot be written (the message says why; `path` is untouched).
Result<void> WriteTokenShard(const std::string& path, std::span<const int32_t> tokens);

}  // namespace cohort::engine
