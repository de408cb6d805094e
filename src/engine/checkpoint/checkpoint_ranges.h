// The ranges of a checkpoint's tensor files (checkpoint.h): how one rank writes its ranges
// into params.bin and optim.bin with their checksums, how the ranges are recorded in the
// MANIFEST, and the checks that they tile the files and that each one's bytes still match
// its checksum. Internal to the checkpoint library (checkpoint.cc); pure functions but for
// WriteRanges, which writes and fsyncs the files it touches.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/checkpoint/checkpoint.h"

namespace cohort::engine::ckpt {

// One range as the MANIFEST records it, in bytes of its file: `runs` runs of `bytes`, the
// first at `offset` and each next one `stride` further; `crc` is the CRC-32 of the runs in
// order, `rank` the rank that wrote it.
struct RangeRecord {
  std::string file;
  uint64_t offset = 0, bytes = 0, stride = 0, runs = 1;
  int rank = 0;
  uint32_t crc = 0;
};

// zlib's CRC-32, continued from `crc` (start from Crc32(0, nullptr, 0)).
uint32_t Crc32(uint32_t crc, const void* data, size_t bytes);
std::string CrcHex(uint32_t crc);

// "params.bin bytes [4096, 8192) written by rank 2", with "in 16 runs of 256 every 1024"
// for a strided range.
std::string Describe(const RangeRecord& r);

nlohmann::json ToJson(const RangeRecord& r);
// kInvalidArgument naming what is wrong with the entry.
Result<RangeRecord> RangeFromJson(const nlohmann::json& j);

// The file of a logical array and the byte offset of its first value there (`n` floats per
// array): params.bin at 0, optim.bin with m at 0 and v at n floats.
const char* FileOf(CheckpointArray a);
uint64_t FileByteOffset(CheckpointArray a, size_t n);

// Writes this rank's ranges into `dir`/params.bin and optim.bin (which exist, at their full
// size), fsyncs the files it wrote and returns one record per range. kInvalidArgument for
// a range that does not fit its array of `n` floats or whose values are not runs × width;
// kUnavailable (IoError: ENOSPC says so) for I/O.
Result<std::vector<RangeRecord>> WriteRanges(const std::string& dir, size_t n, int rank,
                                             std::span<const CheckpointRange> ranges);

// Checks that `records` tile each file of `sizes` (name -> bytes) exactly: every byte in
// exactly one run, no run outside a file or in a file not listed. The error names the first
// gap or overlap (and the ranges involved).
Result<void> CheckTiling(const std::map<std::string, uint64_t>& sizes,
                         std::span<const RangeRecord> records);

// The bytes of one file as loaded: consecutive segments (optim.bin is m then v).
using FileSegments = std::vector<std::span<const uint8_t>>;

// Recomputes each range's CRC over `files` (name -> segments) and compares it with the
// record. kInvalidArgument "<file>: checksum mismatch in <Describe(range)> (crc32 x !=
// manifest y)" for the first range that differs.
Result<void> VerifyRanges(const std::map<std::string, FileSegments>& files,
                          std::span<const RangeRecord> records);

// What one rank wants of a tensor file: `bytes` from byte `offset` of kFileNames[file]
// (0: params.bin, 1: optim.bin), copied to `out`.
struct FileRun {
  int file = 0;
  uint64_t offset = 0, bytes = 0;
  uint8_t* out = nullptr;
};
// The tensor files by index, as FileRun names them.
inline constexpr const char* kTensorFiles[] = {"params.bin", "optim.bin"};

// What ReadWantedRanges read: bytes of the tensor files, and the written ranges verified.
struct ReadStats {
  uint64_t bytes = 0;
  size_t ranges = 0;
};

// Resume by range. Reads from `dir` every range of `records` (which tile the files:
// CheckTiling) that overlaps one of `wanted`, whole, in chunks of a few MB, computes its
// CRC-32 and copies its overlaps with `wanted` into their outs; ranges no run overlaps are
// not read. A range's bytes are trusted only once its CRC matches, so a rank verifies exactly
// the ranges it reads. kInvalidArgument "<file>: checksum mismatch in <Describe(range)> ..."
// (or the I/O error reading it: truncated, unreadable) with *failed set to the range's index
// in `records`; the outs may then hold anything. `wanted` may be in any order and overlap.
Result<ReadStats> ReadWantedRanges(const std::string& dir, std::span<const RangeRecord> records,
                                   std::span<const FileRun> wanted, size_t* failed);

}  // namespace cohort::engine::ckpt
