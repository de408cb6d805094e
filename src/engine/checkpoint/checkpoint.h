// Training checkpoints: everything needed to continue a run exactly.
//
// A checkpoint is a directory `<dir>/step_<8 digits>` holding
//   params.bin   the model parameters (float32, the logical single-rank GptModel layout,
//                little-endian), whatever parallel layout wrote them
//   optim.bin    AdamW's m then v (float32, same layout)
//   state.json   model config, step, AdamW t, data position, RNG state, and the
//                trainer's own metadata (free-form JSON object)
//   MANIFEST     JSON, written last: state.json's byte size and CRC-32 (zlib's crc32); the
//                byte size of params.bin and optim.bin; and "ranges", every range of those two
//                files as one rank wrote it (byte offset, run length, stride, runs, the rank,
//                and the CRC-32 of its runs in order). The ranges of a file tile it exactly.
// state.json holds the GptConfig fields, progress (rng_state words as decimal strings,
// since a uint64 does not fit a JSON double), adam_t and the metadata object.
//
// Writing (SaveCheckpointRanges) is a collective of the ranks that hold the state: each
// writes the ranges of the logical tensors it owns (a data-parallel replica's share, a
// tensor/pipeline shard's slices) into the files, in parallel, fsyncs them and records its
// ranges and checksums; rank 0 then checks that the ranges tile the files, writes state.json
// and MANIFEST and renames the temporary directory `<dir>/.tmp-step_*` into place (parent
// fsynced). Nothing is renamed unless every rank's ranges are durable: a rank that dies or
// cannot write (a full disk) leaves the previous checkpoints as they were. Since the files
// hold logical tensors, a checkpoint written with any (data, tensor, pipeline, ZeRO) layout
// loads with any other.
//
// Loading picks the newest checkpoint whose MANIFEST verifies; a newer one that does not
// verify (a damaged range is named: file, bytes and the rank that wrote it) is skipped with
// a warning. Checkpoints of the first format (MANIFEST version 1: a whole-file CRC-32 for
// params.bin and optim.bin) still load. Free functions; the caller serialises calls on one
// directory.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/model/gpt.h"

namespace cohort::engine {

struct TrainProgress {
  int64_t step = 0;             // optimizer steps completed
  int64_t next_batch = 0;       // the global batch the next step trains on
  int64_t tokens_seen = 0;
  std::vector<uint64_t> rng_state;  // the trainer's generator state (opaque words)
};

// What SaveCheckpoint writes; spans are read during the call only.
struct CheckpointView {
  GptConfig config;
  std::span<const float> params;
  std::span<const float> adam_m;
  std::span<const float> adam_v;
  int64_t adam_t = 0;
  TrainProgress progress;
  nlohmann::json metadata = nlohmann::json::object();
};

// What rank 0 writes beside the tensors (SaveCheckpointRanges).
struct CheckpointHeader {
  GptConfig config;
  int64_t adam_t = 0;
  TrainProgress progress;
  nlohmann::json metadata = nlohmann::json::object();
};

// The logical arrays of a checkpoint, each config.num_parameters() floats.
enum class CheckpointArray { kParams, kAdamM, kAdamV };

// A range of a logical array that one rank writes: `runs` runs of `width` floats, the first
// at float `offset` and each next one `stride` floats further (stride >= width; a
// contiguous range is one run). `values` holds the runs in order (runs × width floats) and
// is read during the call only.
struct CheckpointRange {
  CheckpointArray array = CheckpointArray::kParams;
  size_t offset = 0;
  size_t width = 0;
  size_t stride = 0;
  size_t runs = 1;
  std::span<const float> values;
};

// The ranks that write one checkpoint together, rank 0 coordinating (a data-parallel group,
// or every rank of a tensor × pipeline × data layout). Collectives on host values.
class CheckpointGroup {
 public:
  virtual ~CheckpointGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank 0's values into every rank's.
  virtual Result<void> Broadcast(std::span<int64_t> values) = 0;
  // The maximum over the ranks, in place.
  virtual Result<void> Max(std::span<float> values) = 0;
};

struct Checkpoint {
  std::string path;   // the step directory loaded
  GptConfig config;
  std::vector<float> params, adam_m, adam_v;
  int64_t adam_t = 0;
  TrainProgress progress;
  nlohmann::json metadata;
  // One line per newer checkpoint that was skipped ("<path> is damaged (optim.bin:
  // checksum mismatch); using step_00000100").
  std::vector<std::string> warnings;
};

// Writes a checkpoint for progress.step and then deletes the oldest step directories so
// that at most `keep_last` remain up to that step (keep_last <= 0 keeps all; newer ones,
// which only a resume that skipped them as damaged leaves, are not counted and stay until
// their step is written again); stale temporary directories are removed too. Returns the new directory. On failure nothing is renamed into place,
// the temporary directory is removed and older checkpoints are untouched: kUnavailable
// "... no space left on device ..." for ENOSPC, kUnavailable for other I/O errors,
// kInvalidArgument when the spans' lengths disagree with the config.
Result<std::string> SaveCheckpoint(const std::string& dir, const CheckpointView& view,
                                   int keep_last);

// SaveCheckpoint written by several ranks: every rank of `group` (null: this process alone)
// calls it with the same dir, keep_last and header (config and step; rank 0's is the one
// written), and `mine`, this rank's ranges (may be empty). Together the ranks' ranges must cover each array
// exactly once (kInternal naming the first gap or overlap otherwise). Every rank returns
// the new directory, or an error: its own (kInvalidArgument for a range outside its array,
// kUnavailable for I/O, "no space left on device" for ENOSPC), or kUnavailable "rank N could
// not write its ranges" / the communicator's error. On any error nothing is renamed into
// place and older checkpoints are untouched.
Result<std::string> SaveCheckpointRanges(CheckpointGroup* group, const std::string& dir,
                                         const CheckpointHeader& header,
                                         std::span<const CheckpointRange> mine, int keep_last);

// Loads the newest valid checkpoint in `dir`. kNotFound when `dir` has no checkpoint
// (or does not exist); kInvalidArgument when checkpoints exist but none verifies (each
// step directory and its reason listed). A config different from `expected` (when given) is
// kInvalidArgument naming the field ("checkpoint n_embd 128 != config n_embd 256").
Result<Checkpoint> LoadLatestCheckpoint(const std::string& dir,
                                        const std::optional<GptConfig>& expected);

// What one rank reads of a checkpoint's logical arrays (LoadCheckpointRanges): runs of each
// array (ParamRun, gpt.h: `count` floats from float `offset` into `out`; any order, they may
// overlap), e.g. the slices of a tensor/pipeline shard or a ZeRO shard of the moments.
struct CheckpointReadRequest {
  std::vector<ParamRun> params, adam_m, adam_v;
};

// A checkpoint as LoadCheckpointRanges found it: its header (no arrays: the request's outs
// hold what this rank read) and what this rank read.
struct CheckpointShard {
  std::string path;
  GptConfig config;
  int64_t adam_t = 0;
  TrainProgress progress;
  nlohmann::json metadata;
  std::vector<std::string> warnings;  // as Checkpoint's (rank 0's are the ones to log)
  uint64_t bytes_read = 0;            // of params.bin and optim.bin, by this rank
  size_t ranges_verified = 0;         // written ranges this rank read and checked
};

// Resume by range, a collective of `group` (null: this process alone): every rank reads only
// what `mine` asks for, with pread, and nothing else of the tensor files. Rank 0 names the
// candidate (the newest step directory first); every rank checks its MANIFEST and
// state.json (small) and reads, whole, each written range (MANIFEST "ranges"; a version 1
// checkpoint is one range per file) that overlaps its runs, trusting its bytes only once the
// range's CRC-32 matches. So every range some rank needs is verified by a rank that reads it,
// and no rank reads what it does not need. The ranks then agree (a max over the group) on
// the outcome: a damaged range on any rank makes the checkpoint invalid on every rank, and
// the previous one is tried; the warning names the range ("... is damaged (params.bin:
// checksum mismatch in params.bin bytes [a, b) written by rank 2 ..., read by rank 3);
// using step_..."). Errors as LoadLatestCheckpoint's: kNotFound without a checkpoint,
// kInvalidArgument when none verifies or the config differs from `expected`; the
// communicator's.
Result<CheckpointShard> LoadCheckpointRanges(CheckpointGroup* group, const std::string& dir,
                                             const std::optional<GptConfig>& expected,
                                             const CheckpointReadRequest& mine);

// Step directories in `dir`, oldest first (for tests and tools).
std::vector<std::string> ListCheckpoints(const std::string& dir);

}  // namespace cohort::engine
