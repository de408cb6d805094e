// Matrix products on the GPU through cuBLASLt: bf16 operands, float32 accumulation
// (CUBLAS_COMPUTE_32F). Same convention as kernels/cpu/matmul.h: y = x·Wᵀ + b with W
// stored (out, in) row-major. Host C++23 (returns Result); the bias-gradient kernel it
// launches is in matmul.cu/.cuh.
#pragma once

#include <cuda_runtime.h>

#include "common/error.h"
#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// One cuBLASLt handle and workspace, bound to one stream. Not thread-safe; one per model.
class Matmul {
 public:
  // kInternal naming the cuBLASLt status on failure (kResourceExhausted when it could not
  // allocate); CUDA failures as COHORT_CUDA_CHECK (common/cuda_status.h).
  static Result<Matmul> Create(cudaStream_t stream);
  Matmul(Matmul&&) noexcept;
  Matmul& operator=(Matmul&&) noexcept;
  ~Matmul();

  // out (N, OC) bf16 = inp (N, C) · wᵀ (w: OC × C) + bias (OC, bf16; may be null), the
  // bias added in the cuBLASLt epilogue.
  Result<void> Forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int N,
                       int C, int OC);

  // dinp (N, C) = dout · w (bf16, OVERWRITTEN — unlike the CPU kernel; null to skip);
  // dw (OC, C) += doutᵀ · inp (float32 output, beta = 1); dbias (OC) += Σ_rows dout
  // (float32, deterministic column sums; null to skip). `alpha` scales dout in both
  // products (cuBLASLt's alpha, applied to the float32 accumulator: dinp = alpha·dout·w,
  // dw += alpha·doutᵀ·inp), which is how the single-pass classifier applies Backward's
  // loss_scale without another pass over the logits. kInvalidArgument for alpha != 1 with
  // a bias gradient (no caller needs it; the column sums do not scale).
  Result<void> Backward(bf16* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* w, int N, int C, int OC, float alpha = 1.0f);

 private:
  struct Impl;
  explicit Matmul(Impl* impl);
  Impl* impl_ = nullptr;
};

}  // namespace cohort::engine::cuda
