// Residual connection on the GPU: out = a + b (added in float32, rounded once).
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// out = a + b, n elements; out may alias a or b.
void ResidualForward(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t stream);
// dst += src (bf16, added in float32): the residual backward where a gradient joins the
// residual stream's.
void AddInPlace(bf16* dst, const bf16* src, size_t n, cudaStream_t stream);
// The end of a row-parallel layer under tensor parallelism: `sum` (N, C) float32 is the
// product summed over the tensor group (without its bias); out = bf16(bf16(sum + bias) +
// residual), the two roundings the single-device model makes (bias in the matmul's
// epilogue, then ResidualForward). out may alias residual.
void BiasResidualFromSum(bf16* out, const float* sum, const bf16* bias, const bf16* residual,
                         int N, int C, cudaStream_t stream);

}  // namespace cohort::engine::cuda
