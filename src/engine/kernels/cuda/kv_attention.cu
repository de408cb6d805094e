// Inference ops over the block cache (kv_attention.cuh). Decoding is bound by reading the
// cache: one block per (row, head) whose warps split the context and read each key and
// value row with one coalesced load per warp, nothing per position kept on chip.
#include "engine/kernels/cuda/kv_attention.cuh"

#include <cmath>

namespace cohort::engine::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxHeadSize = 256;
constexpr int kPairsPerLane = kMaxHeadSize / 64;  // bf16 pairs of a head's dimensions per lane
// Nothing is kept per position (the scores used to be, in shared memory, up to 8192); the
// bound keeps a context's positions far inside int.
constexpr int kMaxContext = 1 << 20;

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

// Block (row, head), kWarps warps (flash-decoding inside the block): the context is cut
// into kWarps contiguous ranges, one per warp. A warp takes its keys one at a time: lane l
// holds dimension pairs (2l, 2l+1), (2l+64, 2l+65), ... of q, of the key and of its running
// output, so each key and value row is one coalesced read of bf16 pairs per 64 dimensions;
// the score is the lanes' partial dots summed by shuffles, and the warp keeps an online
// softmax (running max m, sum l, output rescaled whenever m grows). The warps' (m, l,
// output) then meet in shared memory and every output dimension is their combination:
// Σ_w e^(m_w − M)·out_w / Σ_w e^(m_w − M)·l_w.
__global__ void KvAttentionKernel(bf16* out, const bf16* qkv, const bf16* k_cache,
                                  const bf16* v_cache, const int32_t* context,
                                  const int32_t* table_offset, const int32_t* tables,
                                  int block_size, int C, int NH) {
  __shared__ float part_m[kWarps];
  __shared__ float part_l[kWarps];
  __shared__ float part_out[kWarps * kMaxHeadSize];  // warp w's output at w · kMaxHeadSize
  const int r = blockIdx.x / NH, h = blockIdx.x % NH;
  const int hs = C / NH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int ctx = context[r];
  const int32_t* table = tables + table_offset[r];
  const size_t head = static_cast<size_t>(h) * hs;
  const bf16* qp = qkv + static_cast<size_t>(r) * 3 * C + head;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  float2 q[kPairsPerLane], acc[kPairsPerLane];
#pragma unroll
  for (int i = 0; i < kPairsPerLane; ++i) {
    const int d = 2 * (lane + 32 * i);
    q[i] = d < hs ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(qp + d)) : make_float2(0.0f, 0.0f);
    acc[i] = make_float2(0.0f, 0.0f);
  }
  const int per_warp = (ctx + kWarps - 1) / kWarps;
  const int j0 = warp * per_warp, j1 = min(ctx, j0 + per_warp);
  float m = -INFINITY, l = 0.0f;
  int b = j0 / block_size, off = j0 % block_size;  // the block and row of position j
  for (int j = j0; j < j1; ++j) {
    const size_t slot = static_cast<size_t>(table[b]) * block_size + off;
    if (++off == block_size) off = 0, ++b;
    const bf16* k = k_cache + slot * C + head;
    const bf16* v = v_cache + slot * C + head;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPairsPerLane; ++i) {
      const int d = 2 * (lane + 32 * i);
      if (d < hs) {
        const float2 kk = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(k + d));
        dot += q[i].x * kk.x + q[i].y * kk.y;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float s = dot * scale;
    const float m_new = fmaxf(m, s);
    const float rescale = expf(m - m_new);  // 0 at the warp's first key (m = -inf)
    const float p = expf(s - m_new);
    l = l * rescale + p;
#pragma unroll
    for (int i = 0; i < kPairsPerLane; ++i) {
      const int d = 2 * (lane + 32 * i);
      if (d < hs) {
        const float2 vv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(v + d));
        acc[i].x = acc[i].x * rescale + p * vv.x;
        acc[i].y = acc[i].y * rescale + p * vv.y;
      }
    }
    m = m_new;
  }
  if (lane == 0) {
    part_m[warp] = m;
    part_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPairsPerLane; ++i) {
    const int d = 2 * (lane + 32 * i);
    if (d < hs) {
      part_out[warp * kMaxHeadSize + d] = acc[i].x;
      part_out[warp * kMaxHeadSize + d + 1] = acc[i].y;
    }
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, part_m[w]);
  float weight[kWarps], sum = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = part_m[w] == -INFINITY ? 0.0f : expf(part_m[w] - mx);  // a warp without keys adds nothing
    sum += weight[w] * part_l[w];
  }
  const float inv = 1.0f / sum;
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += weight[w] * part_out[w * kMaxHeadSize + d];
    out[static_cast<size_t>(r) * C + head + d] = __float2bfloat16_rn(o * inv);
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
int KvAttentionMaxHeadSize() { return kMaxHeadSize; }

cudaError_t KvAttentionForward(bf16* out, const bf16* qkv, const bf16* k_cache, const bf16* v_cache,
                               const int32_t* context, const int32_t* table_offset,
                               const int32_t* tables, int N, int max_context, int block_size, int C,
                               int NH, cudaStream_t stream) {
  if (N <= 0) return cudaSuccess;
  const int hs = C / NH;
  if (hs > kMaxHeadSize || hs % 2 != 0 || C % 2 != 0 || max_context > kMaxContext || max_context < 1) {
    return cudaErrorInvalidValue;
  }
  KvAttentionKernel<<<N * NH, kWarps * 32, 0, stream>>>(out, qkv, k_cache, v_cache, context, table_offset,
                                                        tables, block_size, C, NH);
  return cudaSuccess;
}

}  // namespace cohort::engine::cuda
