// Inference ops over the block cache (kv_attention.cuh). Simple kernels: decoding is
// bound by reading the cache, which one block per (row, head) does with coalesced reads
// of each key and value row.
#include "engine/kernels/cuda/kv_attention.cuh"

#include <cmath>

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxContext = 8192;  // 32 KiB (+16 B) of float scores in shared memory (under the 48 KiB default)

__global__ void EmbedKernel(bf16* out, const int32_t* tokens, const int32_t* positions,
                            const bf16* wte, const bf16* wpe, int N, int C) {
  const size_t total = static_cast<size_t>(N) * C;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t r = i / C, c = i % C;
    const float x = __bfloat162float(wte[static_cast<size_t>(tokens[r]) * C + c]) +
                    __bfloat162float(wpe[static_cast<size_t>(positions[r]) * C + c]);
    out[i] = __float2bfloat16_rn(x);
  }
}

__global__ void KvWriteKernel(bf16* k_cache, bf16* v_cache, const bf16* qkv, const int32_t* slots,
                              int N, int C) {
  const size_t total = static_cast<size_t>(N) * C;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t r = i / C, c = i % C;
    const size_t slot = static_cast<size_t>(slots[r]);
    const bf16* src = qkv + r * 3 * C;
    k_cache[slot * C + c] = src[C + c];
    v_cache[slot * C + c] = src[2 * static_cast<size_t>(C) + c];
  }
}

// Block (row, head): scores[j] = q·k_j·scale into shared memory, max and sum reduced in
// shared memory, then thread d < hs sums p_j·v_j[d].
__global__ void KvAttentionKernel(bf16* out, const bf16* qkv, const bf16* k_cache,
                                  const bf16* v_cache, const int32_t* context,
                                  const int32_t* table_offset, const int32_t* tables,
                                  int block_size, int C, int NH) {
  extern __shared__ float scores[];
  __shared__ float red[kThreads];
  const int r = blockIdx.x / NH, h = blockIdx.x % NH;
  const int hs = C / NH;
  const int ctx = context[r];
  const int32_t* table = tables + table_offset[r];
  const bf16* q = qkv + static_cast<size_t>(r) * 3 * C + static_cast<size_t>(h) * hs;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < ctx; j += blockDim.x) {
    const size_t slot = static_cast<size_t>(table[j / block_size]) * block_size + j % block_size;
    const bf16* k = k_cache + slot * C + static_cast<size_t>(h) * hs;
    float dot = 0.0f;
    for (int d = 0; d < hs; ++d) dot += __bfloat162float(q[d]) * __bfloat162float(k[d]);
    scores[j] = dot * scale;
    local_max = fmaxf(local_max, dot * scale);
  }
  red[threadIdx.x] = local_max;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float mx = red[0];
  __syncthreads();
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < ctx; j += blockDim.x) {
    const float e = expf(scores[j] - mx);
    scores[j] = e;
    local_sum += e;
  }
  red[threadIdx.x] = local_sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.0f / red[0];
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < ctx; ++j) {
      const size_t slot = static_cast<size_t>(table[j / block_size]) * block_size + j % block_size;
      acc += scores[j] * __bfloat162float(v_cache[slot * C + static_cast<size_t>(h) * hs + d]);
    }
    out[static_cast<size_t>(r) * C + static_cast<size_t>(h) * hs + d] = __float2bfloat16_rn(acc * inv);
  }
}

}  // namespace

void EmbedAtPositions(bf16* out, const int32_t* tokens, const int32_t* positions, const bf16* wte,
                      const bf16* wpe, int N, int C, cudaStream_t stream) {
  if (N <= 0) return;
  const size_t work = static_cast<size_t>(N) * C;
  EmbedKernel<<<GridStrideBlocks(work, 256, 4096), 256, 0, stream>>>(out, tokens, positions, wte, wpe, N, C);
}

void KvCacheWrite(bf16* k_cache, bf16* v_cache, const bf16* qkv, const int32_t* slots, int N, int C,
                  cudaStream_t stream) {
  if (N <= 0) return;
  const size_t work = static_cast<size_t>(N) * C;
  KvWriteKernel<<<GridStrideBlocks(work, 256, 4096), 256, 0, stream>>>(k_cache, v_cache, qkv, slots, N, C);
}

int KvAttentionMaxContext() { return kMaxContext; }

cudaError_t KvAttentionForward(bf16* out, const bf16* qkv, const bf16* k_cache, const bf16* v_cache,
                               const int32_t* context, const int32_t* table_offset,
                               const int32_t* tables, int N, int max_context, int block_size, int C,
                               int NH, cudaStream_t stream) {
  if (N <= 0) return cudaSuccess;
  if (C / NH > 1024 || max_context > kMaxContext || max_context < 1) return cudaErrorInvalidValue;
  // Padded past the context to the next multiple of 4 floats and 4 more: nvcc unrolls the
  // p·v loop with wide shared loads whose last one reads past scores[ctx - 1] (values it
  // does not use). compute-sanitizer's memcheck flagged it on an H200, 2026-11-27
  // (an invalid 12-byte read of shared memory at kv_attention.cu:87, ctx 9); the padding
  // keeps every such read inside the block's allocation.
  const size_t smem = (static_cast<size_t>(max_context + 3) / 4 * 4 + 4) * sizeof(float);
  KvAttentionKernel<<<N * NH, kThreads, smem, stream>>>(out, qkv, k_cache, v_cache, context,
                                                        table_offset, tables, block_size, C, NH);
  return cudaSuccess;
}

}  // namespace cohort::engine::cuda
