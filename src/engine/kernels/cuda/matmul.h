// Matrix products on the GPU through cuBLASLt: bf16 operands, float32 accumulation
// (CUBLAS_COMPUTE_32F). Same convention as kernels/cpu/matmul.h: y = x·Wᵀ + b with W
// stored (out, in) row-major. Host C++23 (returns Result); the kernels it launches are in
// matmul.cu/.cuh (bias gradient) and gelu.cuh.
//
// Epilogues (issue 21). Two kinds of work can ride in cuBLASLt's epilogue instead of
// separate kernels, each switched by MatmulOptions: the MLP's GELU (ForwardGelu: GELU_AUX_BIAS;
// BackwardGelu: DGELU) and the bias gradient (Backward/BackwardGelu: BGRADB). Every path
// computes the same function as the kernels it replaces. Where cuBLASLt's heuristic offers
// no algorithm for an epilogue on a shape, that product runs as a plain product followed by
// the kernels, and fallbacks() counts it; only a plain product that fails is an error.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/error.h"
#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// Which epilogues Matmul asks cuBLASLt for (each off: the kernels do that work).
struct MatmulOptions {
  // ForwardGelu / BackwardGelu: GELU in the product's epilogue (GELU_AUX_BIAS, DGELU).
  bool gelu_epilogue = true;
  // Bias gradients from the weight-gradient product's epilogue (BGRADB).
  bool bias_grad_epilogue = true;
};

// Products that ran without the epilogue they were asked for because cuBLASLt's heuristic
// offered no algorithm for it (counted per call; zero when the option is off).
struct MatmulFallbacks {
  int64_t gelu_forward = 0;   // ForwardGelu: plain product + GeluForward
  int64_t gelu_backward = 0;  // BackwardGelu: plain dinp product + GeluBackward
  int64_t bias_grad = 0;      // Backward*: plain dw product + BiasGradient
  int64_t total() const { return gelu_forward + gelu_backward + bias_grad; }
};

// One cuBLASLt handle and workspace, bound to one stream. Not thread-safe; one per model.
class Matmul {
 public:
  // kInternal naming the cuBLASLt status on failure (kResourceExhausted when it could not
  // allocate); CUDA failures as COHORT_CUDA_CHECK (common/cuda_status.h).
  static Result<Matmul> Create(cudaStream_t stream, const MatmulOptions& options = {});
  Matmul(Matmul&&) noexcept;
  Matmul& operator=(Matmul&&) noexcept;
  ~Matmul();

  // out (N, OC) bf16 = inp (N, C) · wᵀ (w: OC × C) + bias (OC, bf16; may be null), the
  // bias added in the cuBLASLt epilogue.
  Result<void> Forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int N,
                       int C, int OC);

  // dinp (N, C) = dout · w (bf16, OVERWRITTEN — unlike the CPU kernel; null to skip);
  // dw (OC, C) += doutᵀ · inp (float32 output, beta = 1; null to skip, with dinp given and
  // no dbias: ZeRO's deferred head gradient of wte); dbias (OC) += Σ_rows dout
  // (float32, deterministic column sums; null to skip). `alpha` scales dout in both
  // products (cuBLASLt's alpha, applied to the float32 accumulator: dinp = alpha·dout·w,
  // dw += alpha·doutᵀ·inp), which is how the single-pass classifier applies Backward's
  // loss_scale without another pass over the logits. kInvalidArgument for alpha != 1 with
  // a bias gradient (no caller needs it; the column sums do not scale).
  Result<void> Backward(bf16* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* w, int N, int C, int OC, float alpha = 1.0f);

  // Rows [row0, row0 + rows) of Backward's weight gradient alone: dw (rows, C) += alpha ·
  // dout[:, row0:row0 + rows]ᵀ · inp, dout (N, OC) read with its full leading dimension OC.
  // row0 a multiple of 8 (16-byte aligned columns). ZeRO's gradient pieces take the head's
  // wte gradient in row chunks this way. kInvalidArgument for a range outside [0, OC).
  Result<void> BackwardWeightRows(float* dw, const bf16* dout, const bf16* inp, int N, int C,
                                  int OC, int row0, int rows, float alpha = 1.0f);

  // pre (N, OC) bf16 = inp · wᵀ + bias (bias: OC, bf16, required) and out (N, OC) bf16 =
  // gelu(pre), the tanh approximation (kernels/cpu/gelu.h). pre is what BackwardGelu needs.
  // out and pre must not overlap.
  Result<void> ForwardGelu(bf16* out, bf16* pre, const bf16* inp, const bf16* w,
                           const bf16* bias, int N, int C, int OC);

  // Backward of a product whose input went through the GELU: dinp (N, C) = gelu'(pre) ⊙
  // (dout · w) (bf16, OVERWRITTEN; required), with pre (N, C) the pre-activation ForwardGelu
  // kept; dw and dbias as Backward. dinp must not overlap pre.
  Result<void> BackwardGelu(bf16* dinp, const bf16* pre, float* dw, float* dbias,
                            const bf16* dout, const bf16* inp, const bf16* w, int N, int C,
                            int OC);

  const MatmulOptions& options() const;
  MatmulFallbacks fallbacks() const;

 private:
  struct Impl;
  explicit Matmul(Impl* impl);
  Impl* impl_ = nullptr;
};

}  // namespace cohort::engine::cuda
