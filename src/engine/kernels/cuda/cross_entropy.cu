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
//   an all-zero row, without reading the logits (unless it is copied aside, below).
//   Copy aside (last_rows, rows b·T + T − 1): each thread stores the groups it reads in
//   pass 1 (ignored rows: reads them first) to the same place of the row's copy, before
//   pass 2 can overwrite them; every thread touches only its own groups.
// SumLosses: one block; thread j adds losses j, j + 1024, ... in order, then a fixed
// shared-memory tree adds the 1024 partial sums (deterministic).
// CrossEntropyShard*: one block of kThreads per row, thread j on the W-wide column groups
// j, j + kThreads, ... as FusedClassifier (W = 8 when Vs % 8 == 0 and logits is 16-byte
// aligned). Max and Sums reduce each thread's value across the warp by a butterfly and
// across warps in warp order through shared memory; Backward is elementwise.
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
                          bool write_grad, bf16* __restrict__ last_rows, int T) {
  __shared__ float warp_m[kWarps], warp_s[kWarps];
  __shared__ float row_lse;
  const int row = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int groups = Vp / W;  // W = 8 only when Vp % 8 == 0
  bf16* x = logits + static_cast<size_t>(row) * Vp;
  const int target = targets[row];
  // This row's copy (uniform over the block), or null.
  Bf16Vec<W>* aside =
      last_rows != nullptr && row % T == T - 1
          ? reinterpret_cast<Bf16Vec<W>*>(last_rows + static_cast<size_t>(row / T) * Vp)
          : nullptr;

  if (target < 0) {  // ignored row: the same branch for every thread of the block
    if (tid == 0) losses[row] = 0.0f;
    if (aside != nullptr) {
      for (int g = tid; g < groups; g += kThreads) {
        aside[g] = reinterpret_cast<const Bf16Vec<W>*>(x)[g];
      }
    }
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
    if (aside != nullptr) aside[g] = raw;
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

// The block's reduction of one value per thread (kThreads): max when `take_max`, else the
// sum; warps by butterfly, then the warps in order. Every thread gets the result.
// `warp_vals`: the kernel's __shared__ float[kWarps] (any indexable type: the emulator's
// shared arrays are not plain pointers).
template <bool take_max, typename SharedFloats>
__device__ __forceinline__ float BlockReduce(float x, SharedFloats& warp_vals) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, offset);
    x = take_max ? fmaxf(x, y) : x + y;
  }
  const int tid = static_cast<int>(threadIdx.x);
  if (tid % 32 == 0) warp_vals[tid / 32] = x;
  __syncthreads();
  float r = warp_vals[0];
  for (int w = 1; w < kWarps; ++w) r = take_max ? fmaxf(r, warp_vals[w]) : r + warp_vals[w];
  return r;
}

template <int W>
__global__ void __launch_bounds__(kThreads)
    ShardMaxKernel(float* __restrict__ row_max, const bf16* __restrict__ logits, int Vs,
                   int real) {
  __shared__ float warp_vals[kWarps];
  const int row = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const bf16* x = logits + static_cast<size_t>(row) * Vs;
  float m = -INFINITY;
  for (int g = tid; g < Vs / W; g += kThreads) {
    const Bf16Vec<W> raw = reinterpret_cast<const Bf16Vec<W>*>(x)[g];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      if (g * W + k < real) m = fmaxf(m, __bfloat162float(raw.v[k]));
    }
  }
  m = BlockReduce<true>(m, warp_vals);
  if (tid == 0) row_max[row] = m;
}

template <int W>
__global__ void __launch_bounds__(kThreads)
    ShardSumsKernel(float* __restrict__ sum_exp, float* __restrict__ target_logit,
                    const bf16* __restrict__ logits, const int32_t* __restrict__ targets,
                    const float* __restrict__ max, int Vs, int v0, int real) {
  __shared__ float warp_vals[kWarps];
  const int row = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const bf16* x = logits + static_cast<size_t>(row) * Vs;
  const float mx = max[row];
  float s = 0.0f;
  if (mx != -INFINITY) {  // a row with no real logit anywhere sums nothing
    for (int g = tid; g < Vs / W; g += kThreads) {
      const Bf16Vec<W> raw = reinterpret_cast<const Bf16Vec<W>*>(x)[g];
#pragma unroll
      for (int k = 0; k < W; ++k) {
        if (g * W + k < real) s += expf(__bfloat162float(raw.v[k]) - mx);
      }
    }
  }
  s = BlockReduce<false>(s, warp_vals);
  if (tid == 0) {
    sum_exp[row] = s;
    const int t = targets[row] - v0;
    target_logit[row] = targets[row] >= 0 && t >= 0 && t < real ? __bfloat162float(x[t]) : 0.0f;
  }
}

template <int W>
__global__ void __launch_bounds__(kThreads)
    ShardBackwardKernel(bf16* __restrict__ logits, const float* __restrict__ lse,
                        const int32_t* __restrict__ targets, int Vs, int v0, int real,
                        float scale) {
  const int row = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  bf16* x = logits + static_cast<size_t>(row) * Vs;
  const bool ignored = targets[row] < 0;  // uniform over the block
  const int t = targets[row] - v0;
  const float row_lse = lse[row];
  for (int g = tid; g < Vs / W; g += kThreads) {
    Bf16Vec<W> raw = reinterpret_cast<const Bf16Vec<W>*>(x)[g];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const int col = g * W + k;
      float grad = 0.0f;
      if (!ignored && col < real) {
        grad = scale * expf(__bfloat162float(raw.v[k]) - row_lse);
        if (col == t) grad -= scale;
      }
      raw.v[k] = __float2bfloat16_rn(grad);
    }
    reinterpret_cast<Bf16Vec<W>*>(x)[g] = raw;
  }
}

int RealColumns(int Vs, int v0, int V) { return V - v0 < 0 ? 0 : (V - v0 > Vs ? Vs : V - v0); }

}  // namespace

void CrossEntropyShardMax(float* row_max, const bf16* logits, int N, int Vs, int v0, int V,
                          cudaStream_t stream) {
  if (N <= 0 || Vs <= 0) return;
  const int real = RealColumns(Vs, v0, V);
  if (Vs % 8 == 0 && Aligned16(logits)) {
    ShardMaxKernel<8><<<N, kThreads, 0, stream>>>(row_max, logits, Vs, real);
  } else {
    ShardMaxKernel<1><<<N, kThreads, 0, stream>>>(row_max, logits, Vs, real);
  }
}

void CrossEntropyShardSums(float* sum_exp, float* target_logit, const bf16* logits,
                           const int32_t* targets, const float* max, int N, int Vs, int v0,
                           int V, cudaStream_t stream) {
  if (N <= 0 || Vs <= 0) return;
  const int real = RealColumns(Vs, v0, V);
  if (Vs % 8 == 0 && Aligned16(logits)) {
    ShardSumsKernel<8><<<N, kThreads, 0, stream>>>(sum_exp, target_logit, logits, targets, max,
                                                   Vs, v0, real);
  } else {
    ShardSumsKernel<1><<<N, kThreads, 0, stream>>>(sum_exp, target_logit, logits, targets, max,
                                                   Vs, v0, real);
  }
}

void CrossEntropyShardBackward(bf16* logits, const float* lse, const int32_t* targets, int N,
                               int Vs, int v0, int V, float scale, cudaStream_t stream) {
  if (N <= 0 || Vs <= 0) return;
  const int real = RealColumns(Vs, v0, V);
  if (Vs % 8 == 0 && Aligned16(logits)) {
    ShardBackwardKernel<8><<<N, kThreads, 0, stream>>>(logits, lse, targets, Vs, v0, real, scale);
  } else {
    ShardBackwardKernel<1><<<N, kThreads, 0, stream>>>(logits, lse, targets, Vs, v0, real, scale);
  }
}

void FusedClassifier(bf16* logits, float* losses, const int32_t* targets, int N, int V, int Vp,
                     float scale, bool write_grad, bf16* last_rows, int T, cudaStream_t stream) {
  if (N <= 0 || V <= 0 || Vp < V) return;
  if (last_rows != nullptr && T < 1) return;
  if (Vp % 8 == 0 && Aligned16(logits) && (last_rows == nullptr || Aligned16(last_rows))) {
    FusedClassifierKernel<8><<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, scale,
                                                          write_grad, last_rows, T);
  } else {
    FusedClassifierKernel<1><<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, scale,
                                                          write_grad, last_rows, T);
  }
}

void SumLosses(float* out, const float* losses, int n, cudaStream_t stream) {
  SumLossesKernel<<<1, kSumThreads, 0, stream>>>(out, losses, n < 0 ? 0 : n);
}

}  // namespace cohort::engine::cuda
