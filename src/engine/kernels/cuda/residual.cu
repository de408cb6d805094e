// Residual add and in-place add (residual.cuh). Grid-stride elementwise kernels: with
// 16-byte aligned pointers each thread adds 8 bf16 per iteration (one 16-byte load per
// input, one 16-byte store), the n % 8 tail (and unaligned pointers) in a scalar loop.
// Sums in float32, rounded once. The output may alias an input: each element is read and
// written by the same thread, reads first; no __restrict__, no read-only cache.
#include "engine/kernels/cuda/residual.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

int GridFor(size_t work) { return GridStrideBlocks(work, kThreads, kMaxBlocks); }

// out = a + b. Thread t: 8-element groups t, t + stride, ... (kVector), then the scalar
// elements from 8·(n/8) (from 0 when !kVector). AddInPlace is this with out = a.
template <bool kVector>
__global__ void AddKernel(bf16* out, const bf16* a, const bf16* b, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVector) {
    const size_t groups = n / 8;
    for (size_t g = tid; g < groups; g += stride) {
      Bf16x8 x = reinterpret_cast<const Bf16x8*>(a)[g];
      const Bf16x8 y = reinterpret_cast<const Bf16x8*>(b)[g];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        x.v[k] = __float2bfloat16_rn(__bfloat162float(x.v[k]) + __bfloat162float(y.v[k]));
      }
      reinterpret_cast<Bf16x8*>(out)[g] = x;
    }
    done = groups * 8;
  }
  for (size_t i = done + tid; i < n; i += stride) {
    out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
  }
}

void LaunchAdd(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (Aligned16(out) && Aligned16(a) && Aligned16(b)) {
    AddKernel<true><<<GridFor(n / 8 + 1), kThreads, 0, stream>>>(out, a, b, n);
  } else {
    AddKernel<false><<<GridFor(n), kThreads, 0, stream>>>(out, a, b, n);
  }
}

// Row-parallel finish (tensor parallelism): out = bf16(bf16(sum + bias[c]) + residual),
// one thread per element (grid-stride). The inner rounding is the one cuBLASLt's bias
// epilogue makes on one device; the outer is ResidualForward's. `out` may alias
// `residual`.
__global__ void BiasResidualFromSumKernel(bf16* out, const float* __restrict__ sum,
                                          const bf16* __restrict__ bias, const bf16* residual,
                                          size_t n, int C) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float y = __bfloat162float(
        __float2bfloat16_rn(sum[i] + __bfloat162float(bias[i % static_cast<size_t>(C)])));
    out[i] = __float2bfloat16_rn(y + __bfloat162float(residual[i]));
  }
}

}  // namespace

void BiasResidualFromSum(bf16* out, const float* sum, const bf16* bias, const bf16* residual,
                         int N, int C, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(N) * C;
  if (n == 0) return;
  BiasResidualFromSumKernel<<<GridFor(n), kThreads, 0, stream>>>(out, sum, bias, residual, n, C);
}

void ResidualForward(bf16* out, const bf16* a, const bf16* b, size_t n, cudaStream_t stream) {
  LaunchAdd(out, a, b, n, stream);
}

void AddInPlace(bf16* dst, const bf16* src, size_t n, cudaStream_t stream) {
  LaunchAdd(dst, dst, src, n, stream);
}

}  // namespace cohort::engine::cuda
