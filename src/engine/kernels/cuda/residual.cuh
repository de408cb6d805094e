// Residual connection on the GPU: out = a + b (added in float32, rounded once).
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// out = a + b, n elements; out may alias a or b.
void ResidualForward(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t stream);
// dst += src (bf16, added in float32): the residual backward where a gradient joins the
// residual stream's.
void AddInPlace(bf16* dst, const bf16* src, size_t n, cudaStream_t stream);

}  // namespace cohort::engine::cuda
