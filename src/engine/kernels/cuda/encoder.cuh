// Token + position embedding on the GPU (CPU reference: kernels/cpu/encoder.h).
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// out[b,t,:] = wte[tok[b,t],:] + wpe[t,:], added in float32 and rounded once to bf16.
// tokens: B*T device ints, validated by the caller (0 <= id < rows of wte).
// out (B, T, C) bf16; wte, wpe bf16 copies of the weights. C % 8 == 0 (16-byte access).
void EncoderForward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                    int T, int C, cudaStream_t stream);

// dwte[tok[b,t],:] += dout[b,t,:]; dwpe[t,:] += Σ_b dout[b,t,:] (float32 gradients).
// Deterministic: no float atomics; positions sharing a token are summed in a fixed order
// (tokens sorted on the device, or one pass per token run; the implementation says which).
// `scratch` is device memory of at least EncoderBackwardScratchBytes(B, T) bytes.
void EncoderBackward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens,
                     int B, int T, int C, void* scratch, cudaStream_t stream);
size_t EncoderBackwardScratchBytes(int B, int T);

// Vocabulary-parallel embedding (tensor parallelism; CPU reference EmbeddingShardForward /
// EmbeddingShardBackward in kernels/cpu/encoder.h). A rank holds wte's rows [v0, v0 + rows).
// out (B, T, C) float32 = the token's row when this rank holds it, else 0: the partial the
// tensor group sums (exactly one rank contributes per position, so the sum is exact).
void EncoderShardForward(float* out, const int32_t* tokens, const bf16* wte, int64_t v0,
                         int64_t rows, int B, int T, int C, cudaStream_t stream);
// out (B, T, C) bf16 = sum + wpe[t] (float32 add, rounded once): with the summed partials
// this is EncoderForward's output bit for bit.
void EncoderAddPosition(bf16* out, const float* sum, const bf16* wpe, int B, int T, int C,
                        cudaStream_t stream);
// EncoderBackward with dwte holding only rows [v0, v0 + rows) (row token − v0); positions
// whose token is elsewhere add nothing to it. dwpe as EncoderBackward. Same scratch. Either
// gradient may be null (skipped: ZeRO's gradient pieces take wpe and row chunks of wte one
// at a time; without dwte nothing is sorted).
void EncoderShardBackward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens,
                          int64_t v0, int64_t rows, int B, int T, int C, void* scratch,
                          cudaStream_t stream);

}  // namespace cohort::engine::cuda
