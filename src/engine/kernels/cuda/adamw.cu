// AdamW update (adamw.cuh), the same arithmetic as engine/optim/adamw.cc in the same order:
//   g  = grads[i] (· *grad_scale)
//   m  = β1·m + (1 − β1)·g;   v = β2·v + (1 − β2)·g²
//   p  = p·keep − step_size·m / (√v / √(1 − β2^t) + eps)
// with step_size = lr / (1 − β1^t) and the bias corrections computed on the host in double,
// as the CPU does, and keep = 1 − lr·weight_decay (1 without decay): decay first, then the
// Adam step, as torch.optim.AdamW. Grid-stride, one element per thread per iteration; the
// float32 accesses of consecutive threads are consecutive (coalesced).
#include <cmath>

#include "engine/kernels/cuda/adamw.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

__global__ void AdamWKernel(float* __restrict__ params, bf16* __restrict__ params_bf16,
                            const float* __restrict__ grads, float* __restrict__ m,
                            float* __restrict__ v, size_t n, float beta1, float beta2, float eps,
                            float step_size, float bc2_sqrt, float keep,
                            const float* __restrict__ grad_scale) {
  const float gs = grad_scale != nullptr ? *grad_scale : 1.0f;
  const bool scaled = grad_scale != nullptr;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = scaled ? grads[i] * gs : grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    const float p = params[i] * keep - step_size * mi / denom;
    params[i] = p;
    if (params_bf16 != nullptr) params_bf16[i] = __float2bfloat16_rn(p);
  }
}

}  // namespace

void AdamWUpdate(float* params, bf16* params_bf16, const float* grads, float* m, float* v,
                 size_t n, const AdamWStep& step, cudaStream_t stream) {
  if (n == 0) return;
  const double t = static_cast<double>(step.t);
  const double bc1 = 1.0 - std::pow(static_cast<double>(step.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(step.beta2), t);
  const float step_size = static_cast<float>(step.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float keep = 1.0f - step.lr * step.weight_decay;
  const size_t blocks_needed = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks);
  AdamWKernel<<<blocks, kThreads, 0, stream>>>(params, params_bf16, grads, m, v, n, step.beta1,
                                               step.beta2, step.eps, step_size, bc2_sqrt, keep,
                                               step.grad_scale);
}

}  // namespace cohort::engine::cuda
