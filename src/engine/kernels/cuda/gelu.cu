// GELU (tanh approximation) forward and backward (gelu.cuh). Grid-stride elementwise
// kernels: with 16-byte aligned pointers each thread handles 8 bf16 per iteration through
// one 16-byte load per input and one 16-byte store; the n % 8 tail (and unaligned
// pointers) take a scalar loop. Math in float32 with the accurate tanhf, as the CPU
// reference's formula (kernels/cpu/gelu.cc). Outputs may alias inputs: every element is
// read and written by the same thread, read first; no __restrict__, no read-only cache.
#include "engine/kernels/cuda/gelu.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;

int GridFor(size_t work) { return GridStrideBlocks(work, kThreads, kMaxBlocks); }

__device__ __forceinline__ float Gelu(float x) {
  const float u = kSqrt2OverPi * (x + kCoeff * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d gelu(x) / dx.
__device__ __forceinline__ float GeluGrad(float x) {
  const float u = kSqrt2OverPi * (x + kCoeff * x * x * x);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

// Thread t: 8-element groups t, t + stride, ... (kVector), then scalar elements from
// 8·(n/8) (from 0 when !kVector), same stride.
template <bool kVector>
__global__ void GeluForwardKernel(bf16* out, const bf16* inp, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVector) {
    const size_t groups = n / 8;
    for (size_t g = tid; g < groups; g += stride) {
      Bf16x8 x = reinterpret_cast<const Bf16x8*>(inp)[g];
#pragma unroll
      for (int k = 0; k < 8; ++k) x.v[k] = __float2bfloat16_rn(Gelu(__bfloat162float(x.v[k])));
      reinterpret_cast<Bf16x8*>(out)[g] = x;
    }
    done = groups * 8;
  }
  for (size_t i = done + tid; i < n; i += stride) {
    out[i] = __float2bfloat16_rn(Gelu(__bfloat162float(inp[i])));
  }
}

template <bool kVector>
__global__ void GeluBackwardKernel(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVector) {
    const size_t groups = n / 8;
    for (size_t g = tid; g < groups; g += stride) {
      const Bf16x8 x = reinterpret_cast<const Bf16x8*>(inp)[g];
      Bf16x8 d = reinterpret_cast<const Bf16x8*>(dout)[g];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        d.v[k] = __float2bfloat16_rn(GeluGrad(__bfloat162float(x.v[k])) *
                                     __bfloat162float(d.v[k]));
      }
      reinterpret_cast<Bf16x8*>(dinp)[g] = d;
    }
    done = groups * 8;
  }
  for (size_t i = done + tid; i < n; i += stride) {
    dinp[i] = __float2bfloat16_rn(GeluGrad(__bfloat162float(inp[i])) * __bfloat162float(dout[i]));
  }
}

}  // namespace

void GeluForward(bf16* out, const bf16* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (Aligned16(out) && Aligned16(inp)) {
    GeluForwardKernel<true><<<GridFor(n / 8 + 1), kThreads, 0, stream>>>(out, inp, n);
  } else {
    GeluForwardKernel<false><<<GridFor(n), kThreads, 0, stream>>>(out, inp, n);
  }
}

void GeluBackward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (Aligned16(dinp) && Aligned16(inp) && Aligned16(dout)) {
    GeluBackwardKernel<true><<<GridFor(n / 8 + 1), kThreads, 0, stream>>>(dinp, inp, dout, n);
  } else {
    GeluBackwardKernel<false><<<GridFor(n), kThreads, 0, stream>>>(dinp, inp, dout, n);
  }
}

}  // namespace cohort::engine::cuda
