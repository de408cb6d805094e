// CudaAdamW: AdamW on a CUDA device over one flat float32 parameter buffer (torch.optim.AdamW,
// as engine/optim/adamw.h): the moments m and v in device memory, the decay runs as a table
// the one-launch kernel reads (kernels/cuda/adamw.cuh AdamWUpdateRuns) or one launch per run,
// and the bf16 copy of the parameters refreshed in the same pass. The gradients are scaled
// by a device float (the clipping factor) when the caller passes one, so a clipped step needs
// no host round trip. It is the update of both CUDA models: GptCudaAdamW (gpt_cuda.h, the
// whole model with the norm fused in) and a tensor/pipeline shard's optimizer
// (trainer/cuda_shard_engine.cc, whose norm is summed over the model-parallel group first).
//
// The buffers it updates are the caller's (Step takes them); it owns m, v and the run table.
// Threads: one at a time; every call makes `device` current and works on `stream`, which must
// outlive the optimizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/error.h"
#include "engine/kernels/cuda/common.cuh"
#include "engine/optim/adamw.h"

namespace cohort::engine {

class CudaAdamW {
 public:
  // `ranges`: the parameters' decay ranges (one per tensor, any order), covering [0, n)
  // exactly once; neighbours with the same decay are merged into one run. fused: one launch
  // per Step (else one per run; the same bits). kInvalidArgument from config.Validate();
  // kInternal when the ranges leave a gap or overlap (naming the offset); kResourceExhausted
  // / CUDA errors from the allocation.
  static Result<std::unique_ptr<CudaAdamW>> Create(std::vector<DecayRange> ranges,
                                                   const AdamWConfig& config, bool fused,
                                                   int device, cudaStream_t stream);
  ~CudaAdamW();
  CudaAdamW(const CudaAdamW&) = delete;
  CudaAdamW& operator=(const CudaAdamW&) = delete;

  // t += 1 and one update of n() values of `params` (float32), `params_bf16` (refreshed;
  // may be null) from `grads`, each multiplied by *grad_scale (a device float; null: 1).
  // Enqueued on the stream (not waited for); launch errors are returned.
  Result<void> Step(float* params, cuda::bf16* params_bf16, const float* grads, float lr,
                    const float* grad_scale);

  size_t n() const;
  int64_t t() const;
  // Moments in device memory (n() floats; never dereference on the host).
  std::span<float> m_device();
  std::span<float> v_device();
  // Copies m and v out; returns when done. kInvalidArgument on a size mismatch.
  Result<void> CopyStateToHost(std::span<float> m, std::span<float> v);
  // Uploads m and v and sets t (checkpoint load); returns when done. kInvalidArgument on a
  // size mismatch or t < 0.
  Result<void> Restore(std::span<const float> m, std::span<const float> v, int64_t t);
  // Sets t alone (after m and v arrived in device memory by other means, e.g. a broadcast).
  Result<void> SetStep(int64_t t);
  // The device bytes it allocated (m, v, the run table).
  size_t device_bytes() const;

 private:
  struct Impl;
  explicit CudaAdamW(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::engine
