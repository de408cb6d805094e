// AdamW update (adamw.cuh), the same arithmetic as engine/optim/adamw.cc in the same order:
//   g  = grads[i] (· *grad_scale)
//   m  = β1·m + (1 − β1)·g;   v = β2·v + (1 − β2)·g²
//   p  = p·keep − step_size·m / (√v / √(1 − β2^t) + eps)
// with step_size = lr / (1 − β1^t) and the bias corrections computed on the host in double,
// as the CPU does, and keep = 1 − lr·weight_decay (1 without decay): decay first, then the
// Adam step, as torch.optim.AdamW. Both kernels compute each element with UpdateOne.
// AdamWKernel (one range): grid-stride, one element per thread per iteration; the float32
// accesses of consecutive threads are consecutive (coalesced).
// AdamWRunsKernel (a whole vector of decay runs): grid-stride over groups of W values (W = 4:
// one 16-byte access per float32 array, 8 bytes for the bf16 copy), then the n % W values
// left over, one per thread of the first threads. Each thread walks the run table forward
// as its indices grow (they only grow), keeping the current run's end and `keep` in
// registers: one table read per run boundary it crosses, none per element.
#include <cmath>

#include "engine/kernels/cuda/adamw.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

// Everything but `keep` that the update of one element needs (from AdamWStep, on the host).
struct Constants {
  float beta1, beta2, eps, step_size, bc2_sqrt;
};

Constants MakeConstants(const AdamWStep& step) {
  const double t = static_cast<double>(step.t);
  const double bc1 = 1.0 - std::pow(static_cast<double>(step.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(step.beta2), t);
  return Constants{step.beta1, step.beta2, step.eps, static_cast<float>(step.lr / bc1),
                   static_cast<float>(std::sqrt(bc2))};
}

// One element: g already scaled; p, m, v updated in place.
__device__ __forceinline__ void UpdateOne(float& p, float& m, float& v, float g, float keep,
                                          const Constants& c) {
  const float mi = c.beta1 * m + (1.0f - c.beta1) * g;
  const float vi = c.beta2 * v + (1.0f - c.beta2) * g * g;
  m = mi;
  v = vi;
  const float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
  p = p * keep - c.step_size * mi / denom;
}

__global__ void AdamWKernel(float* __restrict__ params, bf16* __restrict__ params_bf16,
                            const float* __restrict__ grads, float* __restrict__ m,
                            float* __restrict__ v, size_t n, Constants c, float keep,
                            const float* __restrict__ grad_scale) {
  const float gs = grad_scale != nullptr ? *grad_scale : 1.0f;
  const bool scaled = grad_scale != nullptr;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = scaled ? grads[i] * gs : grads[i];
    float p = params[i], mi = m[i], vi = v[i];
    UpdateOne(p, mi, vi, g, keep, c);
    m[i] = mi;
    v[i] = vi;
    params[i] = p;
    if (params_bf16 != nullptr) params_bf16[i] = __float2bfloat16_rn(p);
  }
}

template <int W>
struct alignas(W * sizeof(float)) FloatVec {
  float v[W];
};
template <int W>
struct alignas(W * sizeof(bf16)) Bf16Vec {
  bf16 v[W];
};

// The run containing index i, found by walking forward from the thread's current run.
struct RunCursor {
  const AdamWRun* runs;
  int r = 0;
  uint64_t end;
  float keep;
  float keep_decay;
  __device__ RunCursor(const AdamWRun* table, float decay_keep)
      : runs(table), end(table[0].end), keep(table[0].decay ? decay_keep : 1.0f),
        keep_decay(decay_keep) {}
  __device__ __forceinline__ float KeepAt(size_t i) {
    while (i >= end) {
      ++r;
      end = runs[r].end;
      keep = runs[r].decay ? keep_decay : 1.0f;
    }
    return keep;
  }
};

template <int W>
__global__ void AdamWRunsKernel(float* __restrict__ params, bf16* __restrict__ params_bf16,
                                const float* __restrict__ grads, float* __restrict__ m,
                                float* __restrict__ v, size_t n,
                                const AdamWRun* __restrict__ runs, Constants c, float keep_decay,
                                const float* __restrict__ grad_scale) {
  const float gs = grad_scale != nullptr ? *grad_scale : 1.0f;
  const bool scaled = grad_scale != nullptr;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t groups = n / W;
  RunCursor cursor(runs, keep_decay);
  for (size_t gi = tid; gi < groups; gi += stride) {
    FloatVec<W> p = reinterpret_cast<const FloatVec<W>*>(params)[gi];
    FloatVec<W> mv = reinterpret_cast<const FloatVec<W>*>(m)[gi];
    FloatVec<W> vv = reinterpret_cast<const FloatVec<W>*>(v)[gi];
    const FloatVec<W> g = reinterpret_cast<const FloatVec<W>*>(grads)[gi];
    Bf16Vec<W> half;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float keep = cursor.KeepAt(gi * W + k);
      UpdateOne(p.v[k], mv.v[k], vv.v[k], scaled ? g.v[k] * gs : g.v[k], keep, c);
      half.v[k] = __float2bfloat16_rn(p.v[k]);
    }
    reinterpret_cast<FloatVec<W>*>(params)[gi] = p;
    reinterpret_cast<FloatVec<W>*>(m)[gi] = mv;
    reinterpret_cast<FloatVec<W>*>(v)[gi] = vv;
    if (params_bf16 != nullptr) reinterpret_cast<Bf16Vec<W>*>(params_bf16)[gi] = half;
  }
  // The n % W values after the last whole group: thread tid takes groups·W + tid. Its
  // indices so far were all below that, so the cursor still only moves forward.
  const size_t i = groups * W + tid;
  if (W > 1 && tid < W && i < n) {
    const float keep = cursor.KeepAt(i);
    float p = params[i], mi = m[i], vi = v[i];
    UpdateOne(p, mi, vi, scaled ? grads[i] * gs : grads[i], keep, c);
    m[i] = mi;
    v[i] = vi;
    params[i] = p;
    if (params_bf16 != nullptr) params_bf16[i] = __float2bfloat16_rn(p);
  }
}

bool Aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }

}  // namespace

void AdamWUpdate(float* params, bf16* params_bf16, const float* grads, float* m, float* v,
                 size_t n, const AdamWStep& step, cudaStream_t stream) {
  if (n == 0) return;
  const float keep = 1.0f - step.lr * step.weight_decay;
  const int blocks = GridStrideBlocks(n, kThreads, kMaxBlocks);
  AdamWKernel<<<blocks, kThreads, 0, stream>>>(params, params_bf16, grads, m, v, n,
                                               MakeConstants(step), keep, step.grad_scale);
}

void AdamWUpdateRuns(float* params, bf16* params_bf16, const float* grads, float* m, float* v,
                     size_t n, const AdamWRun* runs, int num_runs, const AdamWStep& step,
                     cudaStream_t stream) {
  if (n == 0 || num_runs < 1) return;
  const float keep_decay = 1.0f - step.lr * step.weight_decay;
  const Constants c = MakeConstants(step);
  const bool vector = Aligned16(params) && Aligned16(grads) && Aligned16(m) && Aligned16(v) &&
                      (params_bf16 == nullptr || Aligned8(params_bf16));
  if (vector) {
    const int blocks = GridStrideBlocks(n / 4, kThreads, kMaxBlocks);
    AdamWRunsKernel<4><<<blocks, kThreads, 0, stream>>>(params, params_bf16, grads, m, v, n,
                                                        runs, c, keep_decay, step.grad_scale);
  } else {
    const int blocks = GridStrideBlocks(n, kThreads, kMaxBlocks);
    AdamWRunsKernel<1><<<blocks, kThreads, 0, stream>>>(params, params_bf16, grads, m, v, n,
                                                        runs, c, keep_decay, step.grad_scale);
  }
}

}  // namespace cohort::engine::cuda
