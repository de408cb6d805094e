// AdamW on the GPU, matching engine/optim/adamw.h (torch.optim.AdamW): float32 master
// weights and moments; the bf16 copy of the weights the forward reads is refreshed in the
// same pass.
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

}  // namespace cohort::engine::cuda
