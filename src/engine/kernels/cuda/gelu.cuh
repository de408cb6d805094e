// GELU, tanh approximation (torch approximate="tanh"), on the GPU; math in float32.
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// out = gelu(inp), n elements (bf16). out may alias inp.
void GeluForward(bf16* out, const bf16* inp, size_t n, cudaStream_t stream);
// dinp = gelu'(inp) · dout (bf16, OVERWRITTEN; dinp may alias dout).
void GeluBackward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, cudaStream_t stream);

}  // namespace cohort::engine::cuda
