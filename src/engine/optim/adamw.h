// AdamW (Loshchilov & Hutter) over the flat parameter buffer, matching
// torch.optim.AdamW: m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²; with bias corrections
// m̂ = m/(1−b1^t), v̂ = v/(1−b2^t): p −= lr·(m̂/(√v̂ + eps) + wd·p) for tensors with
// weight_decay, and without the wd term for the others (biases, LayerNorm).
//
// Owns the moment buffers m and v (same length as the parameters) and the step count t.
// One thread at a time; the update itself runs on OpenMP threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/error.h"

namespace cohort::engine {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  // kInvalidArgument naming the field: betas in [0, 1), eps > 0, weight_decay >= 0.
  Result<void> Validate() const;
};

// A half-open range [offset, offset + count) of the parameter buffer and whether it
// decays (built from GptModel::tensors()).
struct DecayRange {
  size_t offset = 0;
  size_t count = 0;
  bool decay = false;
};

// `ranges` cut to [lo, hi) and shifted to start at 0: the decay flags of a shard of the
// buffer (ZeRO), for AdamW::Create over hi - lo values. Ranges outside [lo, hi) drop out.
std::vector<DecayRange> CutDecayRanges(const std::vector<DecayRange>& ranges, size_t lo,
                                       size_t hi);

class AdamW {
 public:
  // `ranges` must cover [0, num_params) exactly once (any order).
  static Result<AdamW> Create(size_t num_params, std::vector<DecayRange> ranges,
                              const AdamWConfig& config);

  // One update with learning rate `lr`; increments t first (the first call uses t = 1).
  // params and grads have num_params elements.
  void Step(std::span<float> params, std::span<const float> grads, float lr);
  // Step in parts (an offloaded step that runs chunk by chunk while the chunks before it are
  // copied back to the device): BeginStep increments t, then StepRange updates elements
  // [lo, hi) of params (num_params elements) from grads (the same indexing) with that t.
  // StepRange over disjoint ranges covering [0, num_params) is Step, bit for bit.
  void BeginStep();
  void StepRange(std::span<float> params, std::span<const float> grads, float lr, size_t lo,
                 size_t hi);

  size_t num_params() const;
  int64_t t() const;
  std::span<float> m();
  std::span<float> v();
  // Restores state saved from m(), v() and t() (checkpoint load). kInvalidArgument if
  // the lengths differ from num_params or t < 0.
  Result<void> Restore(std::span<const float> m, std::span<const float> v, int64_t t);
  // The step count of a state whose m() and v() were written in place (a checkpoint read
  // straight into them). kInvalidArgument if t < 0.
  Result<void> RestoreStep(int64_t t);

 private:
  AdamW() = default;
  AdamWConfig config_;
  std::vector<DecayRange> ranges_;
  std::vector<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace cohort::engine
