// LayerNorm over the last dimension on the GPU (eps 1e-5, biased variance; CPU reference:
// kernels/cpu/layernorm.h). Statistics in float32.
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// out (N, C) = (inp − mean)·rstd·w + b in bf16; mean, rstd (N) float32 saved for backward.
// w, b: bf16 copies of the weights. C % 8 == 0.
void LayerNormForward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w,
                      const bf16* b, int N, int C, cudaStream_t stream);

// residual (N, C) = a + b (float32 sum rounded once, as ResidualForward), then out, mean,
// rstd = LayerNormForward(residual, w, bias): bitwise the two launches, in one pass over
// the rows (llm.c's fused_residual_forward). residual may alias a or b.
void FusedResidualLayerNormForward(bf16* residual, bf16* out, float* mean, float* rstd,
                                   const bf16* a, const bf16* b, const bf16* w, const bf16* bias,
                                   int N, int C, cudaStream_t stream);

// dinp (N, C) += ∂/∂inp (bf16, read-modify-write: the residual stream's gradient);
// dw (C) += Σ dout·x̂ and db (C) += Σ dout in float32. Deterministic: per-block partial
// sums in `scratch` (LayerNormBackwardScratchBytes bytes), then summed in block order.
void LayerNormBackward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp,
                       const bf16* w, const float* mean, const float* rstd, int N, int C,
                       void* scratch, cudaStream_t stream);
size_t LayerNormBackwardScratchBytes(int N, int C);

}  // namespace cohort::engine::cuda
