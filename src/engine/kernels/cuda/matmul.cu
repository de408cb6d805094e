// Bias gradient: dbias (OC) += Σ_rows dout (N, OC), float32, deterministic (matmul.cuh);
// and BiasGradAccumulate, the one-thread-per-column addition of cuBLASLt's BGRADB output.
//
// Two kernels, no atomics:
//   1. Column partials: the rows are cut into G chunks (BiasGradScratchBytes fixes G from
//      N); block (x, y) covers the 32·W columns starting at x·32·W for the rows of chunk y.
//      Warp w sums rows w, w + 8, ... of the chunk; lane l keeps the sums of its W columns
//      in registers; the 8 warps' sums are added in warp order through shared memory and
//      written to scratch[y].
//   2. Finish: one thread per column adds the G partials in chunk order, then adds the
//      total to dbias.
// W = 8 (16-byte loads) when OC % 8 == 0 and dout is 16-byte aligned, else 1.
#include "engine/kernels/cuda/matmul.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
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

// Step 1 (see the top of the file). partials: (G, OC) floats, G = gridDim.y. Every thread
// reaches the barrier: out-of-range columns only skip their loads and stores.
template <int W>
__global__ void BiasGradPartialsKernel(float* __restrict__ partials, const bf16* __restrict__ dout,
                                       int N, int OC, int rows_per_chunk) {
  // red[(warp·W + k)·32 + lane]: lane-contiguous, conflict-free.
  __shared__ float red[kWarps * W * 32];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int c = (static_cast<int>(blockIdx.x) * 32 + lane) * W;
  const bool active = c < OC;  // W = 8 only when OC % 8 == 0: c < OC means c + 8 <= OC
  const int row_begin = static_cast<int>(blockIdx.y) * rows_per_chunk;
  const int row_end = min(N, row_begin + rows_per_chunk);

  float sum[W];
#pragma unroll
  for (int k = 0; k < W; ++k) sum[k] = 0.0f;
  if (active) {
    for (int r = row_begin + warp; r < row_end; r += kWarps) {
      const Bf16Vec<W> d =
          *reinterpret_cast<const Bf16Vec<W>*>(dout + static_cast<size_t>(r) * OC + c);
#pragma unroll
      for (int k = 0; k < W; ++k) sum[k] += __bfloat162float(d.v[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < W; ++k) red[(warp * W + k) * 32 + lane] = sum[k];
  __syncthreads();
  if (warp == 0 && active) {
    float* out = partials + static_cast<size_t>(blockIdx.y) * OC + c;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      float total = 0.0f;
      for (int v = 0; v < kWarps; ++v) total += red[(v * W + k) * 32 + lane];
      out[k] = total;
    }
  }
}

// dbias[c] += partial[c] (BiasGradAccumulate).
__global__ void BiasGradAccumulateKernel(float* __restrict__ dbias,
                                         const float* __restrict__ partial, int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < OC) dbias[c] += partial[c];
}

// Step 2: column c adds its G partials in order, then dbias[c] += total.
__global__ void BiasGradFinishKernel(float* __restrict__ dbias, const float* __restrict__ partials,
                                     int OC, int chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float total = 0.0f;
  for (int g = 0; g < chunks; ++g) total += partials[static_cast<size_t>(g) * OC + c];
  dbias[c] += total;
}

}  // namespace

size_t BiasGradScratchBytes(int N, int OC) {
  if (N <= 0 || OC <= 0) return 0;
  return static_cast<size_t>(NumChunks(N)) * static_cast<size_t>(OC) * sizeof(float);
}

void BiasGradient(float* dbias, const bf16* dout, int N, int OC, void* scratch,
                  cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  float* partials = static_cast<float*>(scratch);
  const int chunks = NumChunks(N);
  const int rows_per_chunk = CeilDiv(N, chunks);
  if (OC % 8 == 0 && Aligned16(dout)) {
    const dim3 grid(CeilDiv(OC, 32 * 8), chunks);
    BiasGradPartialsKernel<8><<<grid, kThreads, 0, stream>>>(partials, dout, N, OC,
                                                             rows_per_chunk);
  } else {
    const dim3 grid(CeilDiv(OC, 32), chunks);
    BiasGradPartialsKernel<1><<<grid, kThreads, 0, stream>>>(partials, dout, N, OC,
                                                             rows_per_chunk);
  }
  BiasGradFinishKernel<<<CeilDiv(OC, kThreads), kThreads, 0, stream>>>(dbias, partials, OC,
                                                                       chunks);
}

void BiasGradAccumulate(float* dbias, const float* partial, int OC, cudaStream_t stream) {
  if (OC <= 0) return;
  BiasGradAccumulateKernel<<<CeilDiv(OC, kThreads), kThreads, 0, stream>>>(dbias, partial, OC);
}

}  // namespace cohort::engine::cuda
