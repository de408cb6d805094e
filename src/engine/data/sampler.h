// DistributedSampler: which sequences each rank trains on, so that the sequence of global
// batches is the same for any world size and each rank reads only its part.
//
// The dataset of N tokens is cut into W = (N − 1) / T windows; window i is tokens
// [i·T, i·T + T + 1) (inputs are the first T, targets the last T). An epoch visits the
// windows in an order fixed by (seed, epoch): a Fisher–Yates shuffle with a SplitMix64/
// xoshiro stream when shuffle is on, in order when off. Global batch b (counted from 0
// over all epochs) is G consecutive windows of that order: epoch e = b / P, positions
// [(b mod P)·G, (b mod P)·G + G) where P = W / G batches per epoch (the tail is dropped).
//
// A global batch is split into world × accum micro-batches of B sequences (G = world ·
// accum · B): rank r's micro-step a takes positions [(a·world + r)·B, (a·world + r)·B + B)
// of the global batch. Results are a pure function of the inputs. Any thread may call any
// method: the window order of the last epoch asked for is cached (8 bytes per window,
// computed once per epoch) behind a mutex shared by copies of one sampler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/error.h"
#include "engine/data/token_shards.h"

namespace cohort::engine {

struct SamplerConfig {
  size_t num_tokens = 0;   // N
  int seq_len = 0;         // T
  int64_t global_batch = 0;  // G, sequences per optimizer step
  uint64_t seed = 0;
  bool shuffle = true;
};

class DistributedSampler {
 public:
  // kInvalidArgument: seq_len < 1, global_batch < 1, or fewer than G windows ("dataset of
  // N tokens has W windows of T+1 tokens; a global batch needs G").
  static Result<DistributedSampler> Create(const SamplerConfig& config);

  int64_t batches_per_epoch() const;
  // Token offsets of the first token of each of the B windows of (global_batch, rank,
  // micro_step). kInvalidArgument unless world · accum · B == G, 0 <= rank < world,
  // 0 <= micro_step < accum.
  Result<std::vector<size_t>> WindowStarts(int64_t global_batch, int rank, int world,
                                           int accum, int micro_step, int B) const;

 private:
  struct EpochCache;
  DistributedSampler() = default;
  // The window order of `epoch` (from the cache, or computed and cached).
  std::shared_ptr<const std::vector<uint64_t>> EpochOrder(int64_t epoch) const;

  SamplerConfig config_;
  int64_t windows_ = 0;  // W
  std::shared_ptr<EpochCache> cache_;
};

// Reads the windows starting at `starts` (each T + 1 tokens) into inputs and targets
// (B × T each, row-major, B = starts.size()). kInvalidArgument when T < 1, a span's size
// is not B × T, or a window runs past the end of the dataset.
Result<void> LoadBatch(const TokenDataset& data, std::span<const size_t> starts, int T,
                       std::span<int32_t> inputs, std::span<int32_t> targets);

}  // namespace cohort::engine
