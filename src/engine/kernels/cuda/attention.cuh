// Causal multi-head self-attention on the GPU: a fused, memory-efficient kernel in the
// manner of FlashAttention-2 (tiles of queries against tiles of keys in shared memory,
// online softmax, tensor-core bf16 products with float32 accumulation). The T×T matrix
// is never materialised; the forward saves only the per-row log-sum-exp.
//
// Layout as kernels/cpu/attention.h: qkv (B, T, 3C) with q, k, v in column blocks
// [0, C), [C, 2C), [2C, 3C), head h in columns [h·hs, (h+1)·hs); out (B, T, C) the heads
// concatenated. Scores scaled by 1/√hs, causal (t sees 0..t).
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// True when the kernels support head size hs (16, 32, 64, 128).
bool AttentionSupportsHeadSize(int hs);

// out (B, T, C) bf16; lse (B, NH, T) float32: log Σ_j exp(scaled score) per query row.
// cudaErrorInvalidValue (nothing launched) if the head size C / NH is not supported.
cudaError_t AttentionForward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                              int NH, cudaStream_t stream);

// dqkv (B, T, 3C) bf16 OVERWRITTEN with ∂loss/∂qkv given dout (B, T, C), the forward's
// qkv, out and lse. `scratch`: AttentionBackwardScratchBytes bytes (D = rowsum(dout∘out),
// float32 accumulators for dq if the implementation needs them). cudaErrorInvalidValue as
// the forward.
cudaError_t AttentionBackward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                               const float* lse, int B, int T, int C, int NH, void* scratch,
                               cudaStream_t stream);
size_t AttentionBackwardScratchBytes(int B, int T, int C, int NH);

}  // namespace cohort::engine::cuda
