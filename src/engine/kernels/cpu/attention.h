// Causal multi-head self-attention, float32 CPU reference. The input is the fused qkv
// projection (B, T, 3C): q in columns [0, C), k in [C, 2C), v in [2C, 3C), head h in
// columns [h·hs, (h+1)·hs) of each, hs = C / NH. Scores are scaled by 1/√hs and masked
// causally (position t sees 0..t). The probabilities (B, NH, T, T) are materialised and
// kept for the backward (entries above the diagonal are 0). Every product is a
// cblas_sgemm on the lower-triangular row blocks; OpenMP runs over (b, h); the softmax
// uses the vectorised FastExp (fast_math.h).
#pragma once

namespace cohort::engine::cpu {

// out (B, T, C): the heads concatenated; att (B, NH, T, T): softmax probabilities.
void AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);

// dqkv (B, T, 3C) += ∂/∂qkv given dout (B, T, C) and the forward's qkv and att.
void AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att,
                       int B, int T, int C, int NH);

}  // namespace cohort::engine::cpu
