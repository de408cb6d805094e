// Tiny kernels for the emulator's self-test (selftest.cc), each but the first with one
// deliberate bug that the emulator (emu.h) or AddressSanitizer must catch. Never compiled by
// nvcc: gen_cuda_emu.py rewrites this file like the engine's kernels, so the same rewrites
// (primitives, static and dynamic __shared__, launches) are exercised.
#include "selftest_kernels.h"

namespace emu_selftest {
namespace {

using bf16 = __nv_bfloat16;

// ---- primitives: begin ----
// (attention.cu's inline-asm cp.async / ldmatrix / mma / shared accessors go here; the
// emulator's versions replace this section)
// ---- primitives: end ----

constexpr int kReduceThreads = 96;  // three warps

// Correct: block sums of `in` through a warp shuffle and a shared-memory tree.
__global__ void BlockSumKernel(float* out, const float* in, int n) {
  __shared__ float warp_sums[kReduceThreads / 32];
  const int tid = static_cast<int>(threadIdx.x);
  const int i = static_cast<int>(blockIdx.x) * kReduceThreads + tid;
  float v = i < n ? in[i] : 0.0f;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  if (tid % 32 == 0) warp_sums[tid / 32] = v;
  __syncthreads();
  if (tid == 0) {
    float s = 0.0f;
    for (int w = 0; w < kReduceThreads / 32; ++w) s += warp_sums[w];
    out[blockIdx.x] = s;
  }
}

// Bug: reads a neighbour's word without a barrier after it was written (RAW).
__global__ void MissingBarrierRawKernel(float* out) {
  __shared__ float s[64];
  const int tid = static_cast<int>(threadIdx.x);
  s[tid] = static_cast<float>(tid);
  out[tid] = s[tid == 0 ? 0 : tid - 1];
}

// Bug: overwrites a word a neighbour read in the same epoch (WAR).
__global__ void MissingBarrierWarKernel(float* out) {
  __shared__ float s[64];
  const int tid = static_cast<int>(threadIdx.x);
  s[tid] = static_cast<float>(tid);
  __syncthreads();
  out[tid] = s[(tid + 1) % 64];
  s[tid] = 0.0f;
}

// Bug: every thread writes the same word (WAW).
__global__ void SameWordWriteKernel(float* out) {
  __shared__ float s;
  s = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s;
}

// Bug: half the threads read words nothing wrote.
__global__ void UnwrittenReadKernel(float* out) {
  __shared__ float s[64];
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < 32) s[tid] = 1.0f;
  __syncthreads();
  out[tid] = s[tid];
}

// Bug (when `wait_before_read` is false): reads cp.async data before waiting for it.
__global__ void CpAsyncKernel(float* out, const float* in, bool wait_before_read) {
  extern __shared__ __align__(16) float tile[];
  const int tid = static_cast<int>(threadIdx.x);
  CpAsync16(tile + 4 * tid, in + 4 * tid, true);
  CpAsyncCommit();
  if (wait_before_read) CpAsyncWait<0>();
  const float v = SharedLoadF32(tile + 4 * tid);
  CpAsyncWait<0>();
  out[tid] = v;
}

// Bug: a cp.async committed and never waited for.
__global__ void CpAsyncNeverWaitedKernel(const float* in) {
  extern __shared__ __align__(16) float tile[];
  const int tid = static_cast<int>(threadIdx.x);
  CpAsync16(tile + 4 * tid, in + 4 * tid, true);
  CpAsyncCommit();
}

// Bug: an index one past a static shared array.
__global__ void SharedOutOfRangeKernel(float* out) {
  __shared__ float s[64];
  const int tid = static_cast<int>(threadIdx.x);
  s[tid + 1] = 1.0f;
  __syncthreads();
  out[tid] = 0.0f;
}

// Bug: a barrier only the first warp reaches.
__global__ void DivergentBarrierKernel(float* out) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < 32) __syncthreads();
  out[tid] = 1.0f;
}

// Bug: the last thread writes one element past `out` (n elements).
__global__ void GlobalOverrunKernel(float* out, int n) {
  const int tid = static_cast<int>(threadIdx.x);
  out[tid == n - 1 ? n : tid] = 1.0f;
}

// Bug: a local array indexed one past its end (on the CUDA thread's fiber stack).
__global__ void LocalOverrunKernel(float* out, int index) {
  float local[8];
  for (int i = 0; i < 8; ++i) local[i] = static_cast<float>(i);
  out[threadIdx.x] = local[threadIdx.x == 0 ? index : 0];
}

}  // namespace

void BlockSum(float* out, const float* in, int n, cudaStream_t stream) {
  const int blocks = (n + kReduceThreads - 1) / kReduceThreads;
  BlockSumKernel<<<blocks, kReduceThreads, 0, stream>>>(out, in, n);
}
void MissingBarrierRaw(float* out) { MissingBarrierRawKernel<<<1, 64>>>(out); }
void MissingBarrierWar(float* out) { MissingBarrierWarKernel<<<1, 64>>>(out); }
void SameWordWrite(float* out) { SameWordWriteKernel<<<1, 64>>>(out); }
void UnwrittenRead(float* out) { UnwrittenReadKernel<<<1, 64>>>(out); }
void CpAsyncRead(float* out, const float* in, bool wait_before_read) {
  CpAsyncKernel<<<1, 32, 32 * 16>>>(out, in, wait_before_read);
}
void CpAsyncNeverWaited(const float* in) { CpAsyncNeverWaitedKernel<<<1, 32, 32 * 16>>>(in); }
void SharedOutOfRange(float* out) { SharedOutOfRangeKernel<<<1, 64>>>(out); }
void DivergentBarrier(float* out) { DivergentBarrierKernel<<<1, 64>>>(out); }
void GlobalOverrun(float* out, int n) { GlobalOverrunKernel<<<1, n>>>(out, n); }
void LocalOverrun(float* out, int index) { LocalOverrunKernel<<<1, 32>>>(out, index); }

}  // namespace emu_selftest
