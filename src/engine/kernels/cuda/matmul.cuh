// The kernels of the matrix-product family that cuBLASLt does not provide: the bias
// gradient (column sums of dout) in float32, and the accumulation of the one cuBLASLt's
// BGRADB epilogue stores. Used by matmul.h's Matmul::Backward.
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// dbias (OC) += Σ_rows dout (N, OC) in float32; deterministic (per-block partials in
// `scratch`, BiasGradScratchBytes bytes, summed in block order).
void BiasGradient(float* dbias, const bf16* dout, int N, int OC, void* scratch,
                  cudaStream_t stream);
size_t BiasGradScratchBytes(int N, int OC);

// dbias (OC) += partial (OC), float32, one thread per element (deterministic).
void BiasGradAccumulate(float* dbias, const float* partial, int OC, cudaStream_t stream);

}  // namespace cohort::engine::cuda
