// Softmax cross-entropy fused with the classifier's gradient (cross_entropy.cuh).
//
// FusedClassifier: one block of kThreads per row. W = 8 (16-byte accesses) when Vp % 8 == 0
// and logits is 16-byte aligned, else 1. Thread j handles the W-wide column groups j,
// j + kThreads, ... of the row.
//   Pass 1: each thread keeps an online-softmax pair (running max m, Σ e^{x − m}) over its
//     real columns (< V); the pairs are combined across the warp by shuffles and across
//     warps through shared memory (same order every time): lse = m + log(sum).
//     Thread 0 reads the target logit before the reduction's barriers, so before anything
//     is overwritten; it writes losses[row] = lse − logit[target].
//   Pass 2 (write_grad): each thread re-reads its own groups and overwrites them with
//     scale·(e^{x − lse} − [column == target]) for real columns and 0 for padded ones.
//   An ignored row (target < 0; uniform over the block) gets loss 0 and, with write_grad,
//   an all-zero row, without reading the logits.
// SumLosses: one block; thread j adds losses j, j + 1024, ... in order, then a fixed
// shared-memory tree adds the 1024 partial sums (deterministic).
#include <math.h>

#include "engine/kernels/cuda/cross_entropy.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kSumThreads = 1024;

template <int W>
struct alignas(W * sizeof(bf16)) Bf16Vec {
  bf16 v[W];
};

// (m, s) ← the pair for the union of the two sets: max M and s·e^{m−M} + s2·e^{m2−M}.
// An empty set is (−inf, 0); two empty sets stay empty (avoids −inf − (−inf)).
__device__ __forceinline__ void Combine(float& m, float& s, float m2, float s2) {
  const float M = fmaxf(m, m2);
  if (M == -INFINITY) return;
  s = s * expf(m - M) + s2 * expf(m2 - M);
  m = M;
}

template <int W>
__global__ void __launch_bounds__(kThreads)
    FusedClassifierKernel(bf16* __restrict__ logits, float* __restrict__ losses,
                          const int32_t* __restrict__ targets, int V, int Vp, float scale,
                          bool write_grad) {
  __shared__ float warp_m[kWarps], warp_s[kWarps];
  __shared__ float row_lse;
  const int row = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int groups = Vp / W;  // W = 8 only when Vp % 8 == 0
  bf16* x = logits + static_cast<size_t>(row) * Vp;
  const int target = targets[row];

  if (target < 0) {  // ignored row: the same branch for every thread of the block
    if (tid == 0) losses[row] = 0.0f;
    if (write_grad) {
      Bf16Vec<W> zero;
#pragma unroll
      for (int k = 0; k < W; ++k) zero.v[k] = __float2bfloat16_rn(0.0f);
      for (int g = tid; g < groups; g += kThreads) reinterpret_cast<Bf16Vec<W>*>(x)[g] = zero;
    }
    return;
  }
  // Read before any thread can overwrite the row (pass 2 starts after the barriers).
  const float target_logit = tid == 0 ? __bfloat162float(x[target]) : 0.0f;

  // Pass 1: this thread's (max, Σ e^{x − max}) over its real columns.
  float m = -INFINITY, s = 0.0f;
  for (int g = tid; g < groups; g += kThreads) {
    const Bf16Vec<W> raw = reinterpret_cast<const Bf16Vec<W>*>(x)[g];
    float v[W];
    float group_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      v[k] = __bfloat162float(raw.v[k]);
      if (g * W + k < V) group_max = fmaxf(group_max, v[k]);
    }
    if (group_max == -INFINITY) continue;  // only padded columns in this group
    if (group_max > m) {
      s *= expf(m - group_max);  // m = −inf the first time: e^{−inf} = 0, s was 0
      m = group_max;
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
      if (g * W + k < V) s += expf(v[k] - m);
    }
  }
  // Warp: butterfly, every lane ends with the warp's pair.
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    Combine(m, s, m2, s2);
  }
  const int warp = tid / 32, lane = tid % 32;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();
  if (tid == 0) {
    float bm = warp_m[0], bs = warp_s[0];
    for (int w = 1; w < kWarps; ++w) Combine(bm, bs, warp_m[w], warp_s[w]);
    const float lse = bm + logf(bs);
    row_lse = lse;
    losses[row] = lse - target_logit;
  }
  __syncthreads();
  if (!write_grad) return;

  // Pass 2: overwrite this thread's own groups (read first, then written).
  const float lse = row_lse;
  for (int g = tid; g < groups; g += kThreads) {
    Bf16Vec<W> raw = reinterpret_cast<const Bf16Vec<W>*>(x)[g];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const int col = g * W + k;
      float grad = 0.0f;
      if (col < V) {
        grad = scale * expf(__bfloat162float(raw.v[k]) - lse);
        if (col == target) grad -= scale;
      }
      raw.v[k] = __float2bfloat16_rn(grad);
    }
    reinterpret_cast<Bf16Vec<W>*>(x)[g] = raw;
  }
}

// One block of kSumThreads (see the top of the file).
__global__ void __launch_bounds__(kSumThreads)
    SumLossesKernel(float* __restrict__ out, const float* __restrict__ losses, int n) {
  __shared__ float partial[kSumThreads];
  const int tid = static_cast<int>(threadIdx.x);
  float sum = 0.0f;
  for (int i = tid; i < n; i += kSumThreads) sum += losses[i];
  partial[tid] = sum;
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    __syncthreads();
  }
  if (tid == 0) *out = partial[0];
}

}  // namespace

void FusedClassifier(bf16* logits, float* losses, const int32_t* targets, int N, int V, int Vp,
                     float scale, bool write_grad, cudaStream_t stream) {
  if (N <= 0 || V <= 0 || Vp < V) return;
  if (Vp % 8 == 0 && Aligned16(logits)) {
    FusedClassifierKernel<8><<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, scale,
                                                          write_grad);
  } else {
    FusedClassifierKernel<1><<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, scale,
                                                          write_grad);
  }
}

void SumLosses(float* out, const float* losses, int n, cudaStream_t stream) {
  SumLossesKernel<<<1, kSumThreads, 0, stream>>>(out, losses, n < 0 ? 0 : n);
}

}  // namespace cohort::engine::cuda
