#include "engine/data/sampler.h"

#include <mutex>
#include <numeric>

#include "engine/rng.h"

namespace cohort::engine {

// The last epoch's window order, shared by copies of one sampler. The permutation is a
// pure function of (seed, epoch, windows), so sharing it never changes a result.
struct DistributedSampler::EpochCache {
  std::mutex mu;
  int64_t epoch = -1;                                 // guarded by mu
  std::shared_ptr<const std::vector<uint64_t>> order;  // guarded by mu
};

Result<DistributedSampler> DistributedSampler::Create(const SamplerConfig& config) {
  if (config.seq_len < 1) {
    return FieldError("seq_len", "must be >= 1, got {}", config.seq_len);
  }
  if (config.global_batch < 1) {
    return FieldError("global_batch", "must be >= 1, got {}", config.global_batch);
  }
  int64_t windows = config.num_tokens == 0
                        ? 0
                        : static_cast<int64_t>((config.num_tokens - 1) /
                                               static_cast<size_t>(config.seq_len));
  if (windows < config.global_batch) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "dataset of {} tokens has {} windows of {}+1 tokens; a global batch needs {}",
                  config.num_tokens, windows, config.seq_len, config.global_batch);
  }
  DistributedSampler s;
  s.config_ = config;
  s.windows_ = windows;
  s.cache_ = std::make_shared<EpochCache>();
  return s;
}

int64_t DistributedSampler::batches_per_epoch() const {
  return windows_ / config_.global_batch;
}

std::shared_ptr<const std::vector<uint64_t>> DistributedSampler::EpochOrder(
    int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->epoch == epoch && cache_->order) return cache_->order;
  auto order = std::make_shared<std::vector<uint64_t>>(static_cast<size_t>(windows_));
  std::iota(order->begin(), order->end(), uint64_t{0});
  if (config_.shuffle) {
    uint64_t mix = config_.seed;
    uint64_t seed = SplitMix64(mix) ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull);
    Xoshiro256 rng(seed);
    for (size_t i = order->size() - 1; i > 0; --i) {
      size_t j = static_cast<size_t>(rng.Below(i + 1));
      std::swap((*order)[i], (*order)[j]);
    }
  }
  cache_->epoch = epoch;
  cache_->order = order;
  return order;
}

Result<std::vector<size_t>> DistributedSampler::WindowStarts(int64_t global_batch, int rank,
                                                             int world, int accum,
                                                             int micro_step, int B) const {
  if (global_batch < 0) return FieldError("global_batch", "must be >= 0, got {}", global_batch);
  if (world < 1) return FieldError("world", "must be >= 1, got {}", world);
  if (accum < 1) return FieldError("accum", "must be >= 1, got {}", accum);
  if (B < 1) return FieldError("B", "must be >= 1, got {}", B);
  if (static_cast<int64_t>(world) * accum * B != config_.global_batch) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "world {} x accum {} x B {} = {} is not the global batch {}", world, accum, B,
                  static_cast<int64_t>(world) * accum * B, config_.global_batch);
  }
  if (rank < 0 || rank >= world) {
    return FieldError("rank", "must be in [0, {}), got {}", world, rank);
  }
  if (micro_step < 0 || micro_step >= accum) {
    return FieldError("micro_step", "must be in [0, {}), got {}", accum, micro_step);
  }
  int64_t per_epoch = batches_per_epoch();
  int64_t epoch = global_batch / per_epoch;
  int64_t in_epoch = global_batch % per_epoch;
  auto order = EpochOrder(epoch);
  size_t first = static_cast<size_t>(in_epoch * config_.global_batch +
                                     (static_cast<int64_t>(micro_step) * world + rank) * B);
  std::vector<size_t> starts(static_cast<size_t>(B));
  for (int i = 0; i < B; ++i) {
    starts[static_cast<size_t>(i)] =
        static_cast<size_t>((*order)[first + static_cast<size_t>(i)]) *
        static_cast<size_t>(config_.seq_len);
  }
  return starts;
}

Result<void> LoadBatch(const TokenDataset& data, std::span<const size_t> starts, int T,
                       std::span<int32_t> inputs, std::span<int32_t> targets) {
  if (T < 1) return FieldError("T", "must be >= 1, got {}", T);
  size_t n = starts.size() * static_cast<size_t>(T);
  if (inputs.size() != n || targets.size() != n) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "LoadBatch: {} windows of {} tokens need {} inputs and targets, got {} and {}",
                  starts.size(), T, n, inputs.size(), targets.size());
  }
  std::vector<int32_t> window(static_cast<size_t>(T) + 1);
  for (size_t b = 0; b < starts.size(); ++b) {
    COHORT_TRY_VOID(data.Read(starts[b], window));
    std::copy(window.begin(), window.end() - 1, inputs.begin() + b * T);
    std::copy(window.begin() + 1, window.end(), targets.begin() + b * T);
  }
  return {};
}

}  // namespace cohort::engine
