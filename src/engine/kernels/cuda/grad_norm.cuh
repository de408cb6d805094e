// Global gradient norm and clipping on the GPU (engine/optim/grad_clip.h's semantics:
// torch.nn.utils.clip_grad_norm_).
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// norm_sq[0] = Σ grads[i]² over n (float32 per-block partials summed in double in a fixed
// order: deterministic). `scratch`: GradNormScratchBytes(n) bytes.
// Then clip_scale[0] = min(1, max_norm / (sqrt(norm_sq) + 1e-6)) (1 when max_norm <= 0),
// ready to pass as AdamWStep::grad_scale. norm_sq is a double on the device.
void GlobalNormAndClipScale(double* norm_sq, float* clip_scale, const float* grads, size_t n,
                            float max_norm, void* scratch, cudaStream_t stream);
size_t GradNormScratchBytes(size_t n);

// grads *= *scale (n elements); for callers that want clipped gradients in place.
void ScaleInPlace(float* grads, const float* scale, size_t n, cudaStream_t stream);

}  // namespace cohort::engine::cuda
