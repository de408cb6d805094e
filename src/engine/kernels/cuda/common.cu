// Conversions and fills (common.cuh). Grid-stride elementwise kernels: with 16-byte aligned
// pointers each thread moves 8 elements per iteration with 16-byte (bf16) or two 16-byte
// (float) accesses; the n % 8 tail, and unaligned pointers, take a scalar loop.
#include <cstring>

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride kernels need no more blocks than this (a few waves on an H100's 132 SMs);
// the loop covers the rest.
constexpr size_t kMaxBlocks = 4096;

int GridFor(size_t work) { return GridStrideBlocks(work, kThreads, kMaxBlocks); }

// Eight bf16 values moved as one 16-byte access.

// Thread t of the grid handles the 8-element groups t, t + stride, ... (both pointers
// 16-byte aligned when kVector), then the scalar elements from 8·(n/8) (all of [0, n) when
// !kVector) in the same grid-stride pattern.
template <bool kVector>
__global__ void ConvertToBf16Kernel(bf16* __restrict__ dst, const float* __restrict__ src,
                                    size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVector) {
    const size_t groups = n / 8;
    for (size_t g = tid; g < groups; g += stride) {
      const float4 a = reinterpret_cast<const float4*>(src)[2 * g];
      const float4 b = reinterpret_cast<const float4*>(src)[2 * g + 1];
      Bf16x8 out;
      out.v[0] = __float2bfloat16_rn(a.x);
      out.v[1] = __float2bfloat16_rn(a.y);
      out.v[2] = __float2bfloat16_rn(a.z);
      out.v[3] = __float2bfloat16_rn(a.w);
      out.v[4] = __float2bfloat16_rn(b.x);
      out.v[5] = __float2bfloat16_rn(b.y);
      out.v[6] = __float2bfloat16_rn(b.z);
      out.v[7] = __float2bfloat16_rn(b.w);
      reinterpret_cast<Bf16x8*>(dst)[g] = out;
    }
    done = groups * 8;
  }
  for (size_t i = done + tid; i < n; i += stride) dst[i] = __float2bfloat16_rn(src[i]);
}

// As ConvertToBf16Kernel, the other way.
template <bool kVector>
__global__ void ConvertToFloatKernel(float* __restrict__ dst, const bf16* __restrict__ src,
                                     size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVector) {
    const size_t groups = n / 8;
    for (size_t g = tid; g < groups; g += stride) {
      const Bf16x8 in = reinterpret_cast<const Bf16x8*>(src)[g];
      float4 a, b;
      a.x = __bfloat162float(in.v[0]);
      a.y = __bfloat162float(in.v[1]);
      a.z = __bfloat162float(in.v[2]);
      a.w = __bfloat162float(in.v[3]);
      b.x = __bfloat162float(in.v[4]);
      b.y = __bfloat162float(in.v[5]);
      b.z = __bfloat162float(in.v[6]);
      b.w = __bfloat162float(in.v[7]);
      reinterpret_cast<float4*>(dst)[2 * g] = a;
      reinterpret_cast<float4*>(dst)[2 * g + 1] = b;
    }
    done = groups * 8;
  }
  for (size_t i = done + tid; i < n; i += stride) dst[i] = __bfloat162float(src[i]);
}

// Thread t writes the float4 groups t, t + stride, ... (dst 16-byte aligned when kVector),
// then the scalar tail.
template <bool kVector>
__global__ void FillKernel(float* __restrict__ dst, float value, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVector) {
    const size_t groups = n / 4;
    const float4 v = make_float4(value, value, value, value);
    for (size_t g = tid; g < groups; g += stride) reinterpret_cast<float4*>(dst)[g] = v;
    done = groups * 4;
  }
  for (size_t i = done + tid; i < n; i += stride) dst[i] = value;
}

}  // namespace

void ConvertToBf16(bf16* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (Aligned16(dst) && Aligned16(src)) {
    ConvertToBf16Kernel<true><<<GridFor(n / 8 + 1), kThreads, 0, stream>>>(dst, src, n);
  } else {
    ConvertToBf16Kernel<false><<<GridFor(n), kThreads, 0, stream>>>(dst, src, n);
  }
}

void ConvertToFloat(float* dst, const bf16* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (Aligned16(dst) && Aligned16(src)) {
    ConvertToFloatKernel<true><<<GridFor(n / 8 + 1), kThreads, 0, stream>>>(dst, src, n);
  } else {
    ConvertToFloatKernel<false><<<GridFor(n), kThreads, 0, stream>>>(dst, src, n);
  }
}

// dst[i] += src[i]: a grid-stride loop (scalar: ZeRO's shard accumulation is memory-bound
// and small beside the products).
__global__ void AddKernel(float* __restrict__ dst, const float* __restrict__ src, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] += src[i];
  }
}

void Add(float* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  AddKernel<<<GridFor(n), kThreads, 0, stream>>>(dst, src, n);
}

void Fill(float* dst, float value, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (Aligned16(dst)) {
    FillKernel<true><<<GridFor(n / 4 + 1), kThreads, 0, stream>>>(dst, value, n);
  } else {
    FillKernel<false><<<GridFor(n), kThreads, 0, stream>>>(dst, value, n);
  }
}

}  // namespace cohort::engine::cuda
