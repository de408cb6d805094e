// LayerNorm over the last dimension (eps 1e-5, biased variance, as torch.nn.LayerNorm),
// float32 CPU reference. Forward saves the per-row mean and 1/std for the backward.
// Backward kernels accumulate (+=) into dinp, dw and db. OpenMP over rows.
#pragma once

namespace cohort::engine::cpu {

// out (N, C) = (inp − mean) · rstd · w + b; mean and rstd receive N values each.
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                      const float* b, int N, int C);

// dinp (N, C) += ∂/∂inp; dw (C) += Σ dout·x̂; db (C) += Σ dout (x̂ the normalised input).
// dinp must not alias inp or dout. dw and db are summed per thread and then added in thread
// order, so the result is deterministic for a given thread count.
void LayerNormBackward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int N, int C);

}  // namespace cohort::engine::cpu
