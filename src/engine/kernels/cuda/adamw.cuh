// AdamW on the GPU, matching engine/optim/adamw.h (torch.optim.AdamW): float32 master
// weights and moments; the bf16 copy of the weights the forward reads is refreshed in the
// same pass. AdamWUpdate updates one range with one decay setting; AdamWUpdateRuns updates a
// whole parameter vector made of decay runs in one launch (issue 21: GPT-2 124M has 98 runs,
// most of them a few hundred values, whose launches cost more than their bytes).
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

struct AdamWStep {
  float lr = 0;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0;   // 0 for ranges without decay
  int64_t t = 1;            // step number after incrementing (bias corrections use it)
  // Gradients are multiplied by *grad_scale when it is non-null (device float: the
  // clipping factor computed by grad_norm.cuh without a host round trip).
  const float* grad_scale = nullptr;
};

// Updates n parameters: params (float32), m, v (float32) from grads (float32); writes
// params_bf16[i] = bf16(params[i]) after the update (null to skip).
void AdamWUpdate(float* params, bf16* params_bf16, const float* grads, float* m, float* v,
                 size_t n, const AdamWStep& step, cudaStream_t stream);

// One run of a parameter vector: the values [previous run's end, end) decay (step.
// weight_decay applies) when `decay` is non-zero, else not. 16 bytes, in device memory.
struct AdamWRun {
  uint64_t end = 0;
  uint32_t decay = 0;
  uint32_t pad = 0;
};

// AdamWUpdate over all n values in one launch, run r covering [runs[r-1].end, runs[r].end)
// (runs[-1].end = 0): weight decay step.weight_decay on the runs that decay, none on the
// others; the same arithmetic per element as AdamWUpdate on each run alone (bitwise). `runs`
// is DEVICE memory: num_runs >= 1 entries with non-decreasing ends, the last == n (the
// caller validates the table once; the kernel trusts it). Four values per 16-byte access
// when params, grads, m and v are 16-byte aligned and params_bf16 8-byte aligned (or null);
// else one at a time.
void AdamWUpdateRuns(float* params, bf16* params_bf16, const float* grads, float* m, float* v,
                     size_t n, const AdamWRun* runs, int num_runs, const AdamWStep& step,
                     cudaStream_t stream);

}  // namespace cohort::engine::cuda
