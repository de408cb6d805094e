// LayerNorm forward and backward (layernorm.cuh).
//
// Vector width W: 8 bf16 (16-byte accesses) when C % 8 == 0 and the bf16 pointers are
// 16-byte aligned (the float32 dw/db/scratch are only touched by the finishing kernel,
// scalar), else 1: correct for any C and alignment, only slower.
//
// Forward, one warp per row (8 rows per 256-thread block): lane l reads the W-wide groups
// starting at channels l·W, l·W + 32·W, ...; three passes over the row (sum → mean; Σ(x −
// mean)² → rstd; write y), the row re-read from L1/L2 rather than held in registers so any
// C works. Statistics in float32 with the CPU reference's two-pass formula; warp-shuffle
// reductions. The fused residual variant (kResidual) makes the first pass read a and b,
// write residual = bf16(a + b) (ResidualForward's rounding) and sum what it wrote; the
// other two passes re-read the lane's own writes. a or b may be the residual buffer itself:
// each element is read and written by the same lane, reads first (no __restrict__ there).
//
// Backward, three kernels, no atomics (deterministic):
//   1. dinp: one warp per row as the forward: Σ w·dout and Σ w·dout·x̂ reduced over the
//      row, then dinp += (w·dout − mean₁ − x̂·mean₂)·rstd (bf16 read-modify-write).
//   2. Column partials: the rows are cut into G chunks (LayerNormBackwardScratchBytes fixes
//      G from N); block (x, y) covers the 32·W columns starting at x·32·W for the rows of
//      chunk y. Warp w takes rows w, w + 8, ... of the chunk; lane l keeps Σ dout·x̂ and
//      Σ dout for its W columns in registers; the 8 warps' sums are then added in warp
//      order through shared memory and written to scratch[y] (dw part, then db part).
//   3. Finish: one thread per entry of (dw, db) adds the G partials in chunk order and
//      then adds the total to dw or db.
#include "engine/kernels/cuda/layernorm.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Row chunks of the column partials: at most kMaxChunks, each of at least kMinChunkRows
// rows (so tiny N does not make mostly-empty chunks).
constexpr int kMaxChunks = 128;
constexpr int kMinChunkRows = 32;

int NumChunks(int N) {
  const int chunks = CeilDiv(static_cast<size_t>(N), kMinChunkRows);
  return chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
}

template <int W>
struct alignas(W * sizeof(bf16)) Bf16Vec {
  bf16 v[W];
};

// W values from p (one 16-byte load when W = 8), widened to float.
template <int W>
__device__ __forceinline__ void LoadBf16(float (&dst)[W], const bf16* p) {
  const Bf16Vec<W> raw = *reinterpret_cast<const Bf16Vec<W>*>(p);
#pragma unroll
  for (int k = 0; k < W; ++k) dst[k] = __bfloat162float(raw.v[k]);
}

template <int W>
__device__ __forceinline__ void StoreBf16(bf16* p, const float (&src)[W]) {
  Bf16Vec<W> raw;
#pragma unroll
  for (int k = 0; k < W; ++k) raw.v[k] = __float2bfloat16_rn(src[k]);
  *reinterpret_cast<Bf16Vec<W>*>(p) = raw;
}

// The sum of v over the 32 lanes, returned to every lane (butterfly: same order on all).
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// kResidual: residual (N, C) = a + b first, and the row normalised is residual's;
// otherwise the row is a's (b and residual unused).
template <int W, bool kResidual>
__global__ void LayerNormForwardKernel(bf16* __restrict__ out, float* __restrict__ mean,
                                       float* __restrict__ rstd, bf16* residual, const bf16* a,
                                       const bf16* b, const bf16* __restrict__ w,
                                       const bf16* __restrict__ bias, int N, int C) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row = blockIdx.x * kWarps + warp;
  if (row >= N) return;  // uniform across the warp; no block-level barriers here
  const size_t offset = static_cast<size_t>(row) * C;
  const bf16* x = (kResidual ? residual : a) + offset;
  bf16* y = out + offset;

  float sum = 0.0f;
  for (int c = lane * W; c < C; c += 32 * W) {
    float v[W];
    if constexpr (kResidual) {
      float u[W];
      LoadBf16<W>(v, a + offset + c);
      LoadBf16<W>(u, b + offset + c);
      Bf16Vec<W> r;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        r.v[k] = __float2bfloat16_rn(v[k] + u[k]);
        v[k] = __bfloat162float(r.v[k]);
      }
      *reinterpret_cast<Bf16Vec<W>*>(residual + offset + c) = r;
    } else {
      LoadBf16<W>(v, x + c);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) sum += v[k];
  }
  const float m = WarpSum(sum) / C;

  float var = 0.0f;
  for (int c = lane * W; c < C; c += 32 * W) {
    float v[W];
    LoadBf16<W>(v, x + c);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float d = v[k] - m;
      var += d * d;
    }
  }
  const float s = 1.0f / sqrtf(WarpSum(var) / C + kEps);

  for (int c = lane * W; c < C; c += 32 * W) {
    float v[W], wv[W], bv[W], o[W];
    LoadBf16<W>(v, x + c);
    LoadBf16<W>(wv, w + c);
    LoadBf16<W>(bv, bias + c);
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = (v[k] - m) * s * wv[k] + bv[k];
    StoreBf16<W>(y + c, o);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// Backward step 1 (see the top of the file): one warp per row.
template <int W>
__global__ void LayerNormBackwardInputKernel(bf16* __restrict__ dinp, const bf16* __restrict__ dout,
                                             const bf16* __restrict__ inp,
                                             const bf16* __restrict__ w,
                                             const float* __restrict__ mean,
                                             const float* __restrict__ rstd, int N, int C) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row = blockIdx.x * kWarps + warp;
  if (row >= N) return;  // uniform across the warp; no block-level barriers here
  const size_t offset = static_cast<size_t>(row) * C;
  const bf16* x = inp + offset;
  const bf16* d = dout + offset;
  bf16* dx = dinp + offset;
  const float m = mean[row], s = rstd[row];

  float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
  for (int c = lane * W; c < C; c += 32 * W) {
    float xv[W], dv[W], wv[W];
    LoadBf16<W>(xv, x + c);
    LoadBf16<W>(dv, d + c);
    LoadBf16<W>(wv, w + c);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float norm = (xv[k] - m) * s;
      const float dnorm = wv[k] * dv[k];
      sum_dnorm += dnorm;
      sum_dnorm_norm += dnorm * norm;
    }
  }
  const float dnorm_mean = WarpSum(sum_dnorm) / C;
  const float dnorm_norm_mean = WarpSum(sum_dnorm_norm) / C;

  for (int c = lane * W; c < C; c += 32 * W) {
    float xv[W], dv[W], wv[W], gv[W];
    LoadBf16<W>(xv, x + c);
    LoadBf16<W>(dv, d + c);
    LoadBf16<W>(wv, w + c);
    LoadBf16<W>(gv, dx + c);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float norm = (xv[k] - m) * s;
      const float dnorm = wv[k] * dv[k];
      gv[k] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
    StoreBf16<W>(dx + c, gv);
  }
}

// Backward step 2 (see the top of the file). partials: (G, 2, C) floats, G = gridDim.y.
// Every thread reaches the barrier: out-of-range columns and rows only skip loads/stores.
template <int W>
__global__ void LayerNormBackwardPartialsKernel(float* __restrict__ partials,
                                                const bf16* __restrict__ dout,
                                                const bf16* __restrict__ inp,
                                                const float* __restrict__ mean,
                                                const float* __restrict__ rstd, int N, int C,
                                                int rows_per_chunk) {
  // red[(warp·2W + k)·32 + lane]: lane-contiguous, so the stores and the loads of warp 0
  // hit 32 distinct banks.
  __shared__ float red[kWarps * 2 * W * 32];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int c = (static_cast<int>(blockIdx.x) * 32 + lane) * W;
  const bool active = c < C;  // W = 8 only when C % 8 == 0: c < C means c + 8 <= C
  const int row_begin = static_cast<int>(blockIdx.y) * rows_per_chunk;
  const int row_end = min(N, row_begin + rows_per_chunk);

  float dw[W], db[W];
#pragma unroll
  for (int k = 0; k < W; ++k) dw[k] = db[k] = 0.0f;
  if (active) {
    for (int r = row_begin + warp; r < row_end; r += kWarps) {
      const size_t offset = static_cast<size_t>(r) * C + c;
      const float m = mean[r], s = rstd[r];
      float xv[W], dv[W];
      LoadBf16<W>(xv, inp + offset);
      LoadBf16<W>(dv, dout + offset);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        dw[k] += dv[k] * ((xv[k] - m) * s);
        db[k] += dv[k];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < W; ++k) {
    red[(warp * 2 * W + k) * 32 + lane] = dw[k];
    red[(warp * 2 * W + W + k) * 32 + lane] = db[k];
  }
  __syncthreads();
  if (warp == 0 && active) {
    float* out = partials + static_cast<size_t>(blockIdx.y) * 2 * C;
#pragma unroll
    for (int k = 0; k < 2 * W; ++k) {
      float total = 0.0f;
      for (int v = 0; v < kWarps; ++v) total += red[(v * 2 * W + k) * 32 + lane];
      // k < W: dw of column c + k; else db of column c + k − W.
      if (k < W) {
        out[c + k] = total;
      } else {
        out[C + c + (k - W)] = total;
      }
    }
  }
}

// Backward step 3: entry e of the 2C outputs (dw then db) adds its G partials in order.
__global__ void LayerNormBackwardFinishKernel(float* __restrict__ dw, float* __restrict__ db,
                                              const float* __restrict__ partials, int C,
                                              int chunks) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= 2 * C) return;
  float total = 0.0f;
  for (int g = 0; g < chunks; ++g) total += partials[static_cast<size_t>(g) * 2 * C + e];
  if (e < C) {
    dw[e] += total;
  } else {
    db[e - C] += total;
  }
}

template <int W>
void LaunchBackward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp,
                    const bf16* w, const float* mean, const float* rstd, int N, int C,
                    float* partials, cudaStream_t stream) {
  LayerNormBackwardInputKernel<W><<<CeilDiv(N, kWarps), kThreads, 0, stream>>>(
      dinp, dout, inp, w, mean, rstd, N, C);
  const int chunks = NumChunks(N);
  const int rows_per_chunk = CeilDiv(N, chunks);
  const dim3 grid(CeilDiv(C, 32 * W), chunks);
  LayerNormBackwardPartialsKernel<W><<<grid, kThreads, 0, stream>>>(partials, dout, inp, mean,
                                                                     rstd, N, C, rows_per_chunk);
  LayerNormBackwardFinishKernel<<<CeilDiv(2 * static_cast<size_t>(C), kThreads), kThreads, 0,
                                  stream>>>(dw, db, partials, C, chunks);
}

}  // namespace

void LayerNormForward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w,
                      const bf16* b, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const int blocks = CeilDiv(N, kWarps);
  if (C % 8 == 0 && Aligned16(out) && Aligned16(inp) && Aligned16(w) && Aligned16(b)) {
    LayerNormForwardKernel<8, false><<<blocks, kThreads, 0, stream>>>(out, mean, rstd, nullptr,
                                                                      inp, nullptr, w, b, N, C);
  } else {
    LayerNormForwardKernel<1, false><<<blocks, kThreads, 0, stream>>>(out, mean, rstd, nullptr,
                                                                      inp, nullptr, w, b, N, C);
  }
}

void FusedResidualLayerNormForward(bf16* residual, bf16* out, float* mean, float* rstd,
                                   const bf16* a, const bf16* b, const bf16* w, const bf16* bias,
                                   int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const int blocks = CeilDiv(N, kWarps);
  if (C % 8 == 0 && Aligned16(residual) && Aligned16(out) && Aligned16(a) && Aligned16(b) &&
      Aligned16(w) && Aligned16(bias)) {
    LayerNormForwardKernel<8, true><<<blocks, kThreads, 0, stream>>>(out, mean, rstd, residual,
                                                                     a, b, w, bias, N, C);
  } else {
    LayerNormForwardKernel<1, true><<<blocks, kThreads, 0, stream>>>(out, mean, rstd, residual,
                                                                     a, b, w, bias, N, C);
  }
}

size_t LayerNormBackwardScratchBytes(int N, int C) {
  if (N <= 0 || C <= 0) return 0;
  return static_cast<size_t>(NumChunks(N)) * 2 * static_cast<size_t>(C) * sizeof(float);
}

void LayerNormBackward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp,
                       const bf16* w, const float* mean, const float* rstd, int N, int C,
                       void* scratch, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  float* partials = static_cast<float*>(scratch);
  if (C % 8 == 0 && Aligned16(dinp) && Aligned16(dout) && Aligned16(inp) && Aligned16(w)) {
    LaunchBackward<8>(dinp, dw, db, dout, inp, w, mean, rstd, N, C, partials, stream);
  } else {
    LaunchBackward<1>(dinp, dw, db, dout, inp, w, mean, rstd, N, C, partials, stream);
  }
}

}  // namespace cohort::engine::cuda
