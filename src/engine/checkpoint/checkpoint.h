// Training checkpoints: everything needed to continue a run exactly.
//
// A checkpoint is a directory `<dir>/step_<8 digits>` holding
//   params.bin   the model parameters (float32, GptModel layout, little-endian)
//   optim.bin    AdamW's m then v (float32, same layout)
//   state.json   model config, step, AdamW t, data position, RNG state, and the
//                trainer's own metadata (free-form JSON object)
//   MANIFEST     JSON: for each file its byte size and CRC-32 (zlib's crc32), written last
// state.json holds the GptConfig fields, progress (rng_state words as decimal strings,
// since a uint64 does not fit a JSON double), adam_t and the metadata object.
// It is written to a temporary directory `<dir>/.tmp-step_*` (each file fsynced),
// renamed into place and the parent directory fsynced, so a crash leaves either the
// whole checkpoint or none. The state is not sharded, so a checkpoint written by N ranks loads on M.
//
// Loading picks the newest checkpoint whose MANIFEST verifies; a newer one that does
// not verify is skipped with a warning naming it and the reason. Free functions; the
// caller serialises calls on one directory (rank 0 writes).
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
// that at most `keep_last` remain (keep_last <= 0 keeps all); stale temporary directories
// are removed too. Returns the new directory. On failure nothing is renamed into place,
// the temporary directory is removed and older checkpoints are untouched: kUnavailable
// "... no space left on device ..." for ENOSPC, kUnavailable for other I/O errors,
// kInvalidArgument when the spans' lengths disagree with the config.
Result<std::string> SaveCheckpoint(const std::string& dir, const CheckpointView& view,
                                   int keep_last);

// Loads the newest valid checkpoint in `dir`. kNotFound when `dir` has no checkpoint
// (or does not exist); kInvalidArgument when checkpoints exist but none verifies (each
// step directory and its reason listed). A config different from `expected` (when given) is
// kInvalidArgument naming the field ("checkpoint n_embd 128 != config n_embd 256").
Result<Checkpoint> LoadLatestCheckpoint(const std::string& dir,
                                        const std::optional<GptConfig>& expected);

// Step directories in `dir`, oldest first (for tests and tools).
std::vector<std::string> ListCheckpoints(const std::string& dir);

}  // namespace cohort::engine
