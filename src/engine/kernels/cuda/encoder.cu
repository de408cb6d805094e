// Token + position embedding, forward and deterministic backward (encoder.cuh).
//
// Vector width W: 8 bf16 (16-byte accesses) when C % 8 == 0 and every pointer is 16-byte
// aligned, else 1 (scalar; correct for any C and alignment, only slower).
//
// Backward without float atomics, in three steps on the stream:
//   1. The (token, position) pairs, position = b·T + t, are sorted by token with
//      cub::DeviceRadixSort::SortPairs (stable: positions sharing a token stay in
//      ascending order).
//   2. dwte: one warp per sorted index i and slice of 32·W channels; the warp whose index
//      starts a run of equal tokens loads dwte[token] for its slice, adds dout[pos] for
//      every position of the run in ascending order, and stores it once. The other warps
//      exit. Each dwte element is thus written by exactly one thread, with the additions
//      in the CPU reference's (b, t) order.
//   3. dwpe: one thread per (t, W channels) adds Σ_b dout[b, t] in ascending b.
// The vocabulary-parallel variant (tensor parallelism) is the same backward with the wte
// gradient restricted to the rows [v0, v0 + rows) of this rank: runs of other tokens are
// found as usual and skipped (dwte holds only the rank's rows, row token − v0).
// Scratch: the iota of positions, the sorted tokens, the sorted positions and cub's
// temporary storage, each 256-byte aligned; the cub part is cub's own size query for B·T
// items (it depends on the device, so EncoderBackwardScratchBytes must be called on the
// device that runs the backward).
#include <cub/device/device_radix_sort.cuh>

#include <limits>

#include "engine/kernels/cuda/encoder.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr size_t kMaxBlocks = 4096;

size_t Align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

int GridFor(size_t work) { return GridStrideBlocks(work, kThreads, kMaxBlocks); }

// W bf16 values: one 16-byte access when W = 8 (the address is then 16-byte aligned).
template <int W>
struct alignas(W * sizeof(bf16)) Bf16Vec {
  bf16 v[W];
};

// W floats: two 16-byte accesses when W = 8.
template <int W>
__device__ __forceinline__ void LoadFloats(float (&dst)[W], const float* src) {
  if constexpr (W == 8) {
    const float4 a = reinterpret_cast<const float4*>(src)[0];
    const float4 b = reinterpret_cast<const float4*>(src)[1];
    dst[0] = a.x, dst[1] = a.y, dst[2] = a.z, dst[3] = a.w;
    dst[4] = b.x, dst[5] = b.y, dst[6] = b.z, dst[7] = b.w;
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) dst[k] = src[k];
  }
}

template <int W>
__device__ __forceinline__ void StoreFloats(float* dst, const float (&src)[W]) {
  if constexpr (W == 8) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(src[0], src[1], src[2], src[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(src[4], src[5], src[6], src[7]);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) dst[k] = src[k];
  }
}

// Grid-stride over the B·T·(C/W) groups of W channels: group i is row bt = i / (C/W),
// channels [(i % (C/W))·W, +W). One W-wide load from wte, one from wpe, one store.
template <int W>
__global__ void EncoderForwardKernel(bf16* __restrict__ out, const int32_t* __restrict__ tokens,
                                     const bf16* __restrict__ wte, const bf16* __restrict__ wpe,
                                     int BT, int T, int C) {
  const size_t groups_per_row = static_cast<size_t>(C / W);
  const size_t total = static_cast<size_t>(BT) * groups_per_row;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const size_t bt = i / groups_per_row;
    const size_t c = (i % groups_per_row) * W;
    const size_t t = bt % static_cast<size_t>(T);
    const size_t token = static_cast<size_t>(tokens[bt]);
    const Bf16Vec<W> e = *reinterpret_cast<const Bf16Vec<W>*>(wte + token * C + c);
    const Bf16Vec<W> p = *reinterpret_cast<const Bf16Vec<W>*>(wpe + t * C + c);
    Bf16Vec<W> o;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      o.v[k] = __float2bfloat16_rn(__bfloat162float(e.v[k]) + __bfloat162float(p.v[k]));
    }
    *reinterpret_cast<Bf16Vec<W>*>(out + bt * C + c) = o;
  }
}

// positions[i] = i for i < n: the values the sort carries along with the tokens.
__global__ void IotaKernel(int32_t* __restrict__ positions, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) positions[i] = i;
}

// Step 2 of the backward. Block: kWarpsPerBlock warps; warp w of block x handles sorted
// index i = x·kWarpsPerBlock + w; lane l handles channels c = (blockIdx.y·32 + l)·W, +W.
// Only the warp at the first index of a run of equal tokens does any work (see the top of
// the file). The warp first finds the run's end together (32 sorted tokens per ballot; all
// lanes take part, so this comes before any lane-dependent exit), then each lane adds its
// channels of the run's rows in ascending position order, loading kUnroll rows ahead so
// that a long run (a frequent token) is not one dependent load per row. No shared memory,
// no barriers: the warp-uniform early returns are safe.
constexpr int kUnroll = 8;

template <int W>
__global__ void EncoderBackwardWteKernel(float* __restrict__ dwte, const bf16* __restrict__ dout,
                                         const uint32_t* __restrict__ sorted_tokens,
                                         const int32_t* __restrict__ sorted_positions, int BT,
                                         int C, int64_t v0, int64_t rows) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int i = blockIdx.x * kWarpsPerBlock + warp;
  if (i >= BT) return;                                  // uniform across the warp
  const uint32_t token = sorted_tokens[i];
  if (i > 0 && sorted_tokens[i - 1] == token) return;  // not a run start; uniform
  // The run is [i, end): equal tokens are contiguous after the sort, so each ballot's
  // mask is a prefix of ones, and the first zero bit marks the end.
  int end = i + 1;
  for (int base = i + 1;; base += 32) {
    const int j = base + lane;
    const bool same = j < BT && sorted_tokens[j] == token;
    const unsigned mask = __ballot_sync(0xffffffffu, same);
    if (mask != 0xffffffffu) {
      end = base + __ffs(~mask) - 1;
      break;
    }
  }
  const int64_t local = static_cast<int64_t>(token) - v0;
  if (local < 0 || local >= rows) return;  // another rank's row; uniform
  const int c = (static_cast<int>(blockIdx.y) * 32 + lane) * W;
  if (c >= C) return;  // W = 8 only when C % 8 == 0, so c < C means c + 8 <= C
  float* row = dwte + static_cast<size_t>(local) * C + c;
  float acc[W];
  LoadFloats<W>(acc, row);
  int j = i;
  for (; j + kUnroll <= end; j += kUnroll) {
    Bf16Vec<W> d[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t pos = static_cast<size_t>(sorted_positions[j + u]);
      d[u] = *reinterpret_cast<const Bf16Vec<W>*>(dout + pos * C + c);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < W; ++k) acc[k] += __bfloat162float(d[u].v[k]);
    }
  }
  for (; j < end; ++j) {
    const size_t pos = static_cast<size_t>(sorted_positions[j]);
    const Bf16Vec<W> d = *reinterpret_cast<const Bf16Vec<W>*>(dout + pos * C + c);
#pragma unroll
    for (int k = 0; k < W; ++k) acc[k] += __bfloat162float(d.v[k]);
  }
  StoreFloats<W>(row, acc);
}

// Step 3: grid-stride over the T·(C/W) groups; group i is position t = i / (C/W),
// channels [(i % (C/W))·W, +W); adds dout[b, t, c..] for b = 0..B-1 in order.
template <int W>
__global__ void EncoderBackwardWpeKernel(float* __restrict__ dwpe, const bf16* __restrict__ dout,
                                         int B, int T, int C) {
  const size_t groups_per_row = static_cast<size_t>(C / W);
  const size_t total = static_cast<size_t>(T) * groups_per_row;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const size_t t = i / groups_per_row;
    const size_t c = (i % groups_per_row) * W;
    float* row = dwpe + t * C + c;
    float acc[W];
    LoadFloats<W>(acc, row);
    for (int b = 0; b < B; ++b) {
      const size_t bt = static_cast<size_t>(b) * T + t;
      const Bf16Vec<W> d = *reinterpret_cast<const Bf16Vec<W>*>(dout + bt * C + c);
#pragma unroll
      for (int k = 0; k < W; ++k) acc[k] += __bfloat162float(d.v[k]);
    }
    StoreFloats<W>(row, acc);
  }
}

// The scratch layout: three arrays of n int32, then cub's storage for sorting n
// (uint32 token, int32 position) pairs, as cub's size query answers on the current device.
// `ok` is false when the query failed (the error is then in the runtime's last-error slot).
struct ScratchLayout {
  size_t positions = 0, sorted_tokens = 0, sorted_positions = 0, temp = 0;  // byte offsets
  size_t temp_bytes = 0, total = 0;
  bool ok = false;
};

ScratchLayout LayoutFor(int n) {
  ScratchLayout s;
  const size_t array = Align256(static_cast<size_t>(n) * sizeof(int32_t));
  s.positions = 0;
  s.sorted_tokens = array;
  s.sorted_positions = 2 * array;
  s.temp = 3 * array;
  const cudaError_t status = cub::DeviceRadixSort::SortPairs(
      nullptr, s.temp_bytes, static_cast<const uint32_t*>(nullptr),
      static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), n, 0, 32);
  s.ok = status == cudaSuccess;
  s.total = s.temp + Align256(s.temp_bytes);
  return s;
}

template <int W>
void LaunchBackward(float* dwte, float* dwpe, const bf16* dout, const uint32_t* sorted_tokens,
                    const int32_t* sorted_positions, int B, int T, int C, int64_t v0,
                    int64_t rows, cudaStream_t stream) {
  const int BT = B * T;
  if (dwte != nullptr) {
    const dim3 wte_grid(CeilDiv(BT, kWarpsPerBlock), CeilDiv(C, 32 * W));
    EncoderBackwardWteKernel<W><<<wte_grid, kThreads, 0, stream>>>(
        dwte, dout, sorted_tokens, sorted_positions, BT, C, v0, rows);
  }
  if (dwpe != nullptr) {
    const size_t wpe_groups = static_cast<size_t>(T) * (C / W);
    EncoderBackwardWpeKernel<W><<<GridFor(wpe_groups), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
  }
}

// out[bt, c] = wte[tokens[bt] − v0, c] when the token is one of the `rows` rows held, else 0
// (float32: the partial the tensor group sums). Grid-stride, one element per thread.
__global__ void EncoderShardForwardKernel(float* __restrict__ out,
                                          const int32_t* __restrict__ tokens,
                                          const bf16* __restrict__ wte, int64_t v0,
                                          int64_t rows, int BT, int C) {
  const size_t total = static_cast<size_t>(BT) * C;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const size_t bt = i / C, c = i % C;
    const int64_t local = static_cast<int64_t>(tokens[bt]) - v0;
    out[i] = local >= 0 && local < rows
                 ? __bfloat162float(wte[static_cast<size_t>(local) * C + c])
                 : 0.0f;
  }
}

// out[b, t, c] = bf16(sum[b, t, c] + wpe[t, c]). Grid-stride, one element per thread.
__global__ void EncoderAddPositionKernel(bf16* __restrict__ out, const float* __restrict__ sum,
                                         const bf16* __restrict__ wpe, int BT, int T, int C) {
  const size_t total = static_cast<size_t>(BT) * C;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const size_t t = (i / C) % static_cast<size_t>(T), c = i % C;
    out[i] = __float2bfloat16_rn(sum[i] + __bfloat162float(wpe[t * C + c]));
  }
}

}  // namespace

void EncoderShardForward(float* out, const int32_t* tokens, const bf16* wte, int64_t v0,
                         int64_t rows, int B, int T, int C, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  const size_t n = static_cast<size_t>(B) * T * C;
  EncoderShardForwardKernel<<<GridFor(n), kThreads, 0, stream>>>(out, tokens, wte, v0, rows,
                                                                 B * T, C);
}

void EncoderAddPosition(bf16* out, const float* sum, const bf16* wpe, int B, int T, int C,
                        cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  const size_t n = static_cast<size_t>(B) * T * C;
  EncoderAddPositionKernel<<<GridFor(n), kThreads, 0, stream>>>(out, sum, wpe, B * T, T, C);
}

void EncoderForward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                    int T, int C, cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  const int BT = B * T;
  if (C % 8 == 0 && Aligned16(out) && Aligned16(wte) && Aligned16(wpe)) {
    const size_t groups = static_cast<size_t>(BT) * (C / 8);
    EncoderForwardKernel<8><<<GridFor(groups), kThreads, 0, stream>>>(out, tokens, wte, wpe, BT,
                                                                      T, C);
  } else {
    const size_t groups = static_cast<size_t>(BT) * C;
    EncoderForwardKernel<1><<<GridFor(groups), kThreads, 0, stream>>>(out, tokens, wte, wpe, BT,
                                                                      T, C);
  }
}

size_t EncoderBackwardScratchBytes(int B, int T) {
  if (B <= 0 || T <= 0) return 0;
  return LayoutFor(B * T).total;
}

void EncoderBackward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                     int T, int C, void* scratch, cudaStream_t stream) {
  EncoderShardBackward(dwte, dwpe, dout, tokens, 0, std::numeric_limits<int32_t>::max(), B, T,
                       C, scratch, stream);
}

void EncoderShardBackward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens,
                          int64_t v0, int64_t rows, int B, int T, int C, void* scratch,
                          cudaStream_t stream) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  const bool vector = C % 8 == 0 && Aligned16(dwte) && Aligned16(dwpe) && Aligned16(dout);
  if (dwte == nullptr) {  // the positions' gradient alone: no sort
    if (vector) {
      LaunchBackward<8>(nullptr, dwpe, dout, nullptr, nullptr, B, T, C, v0, rows, stream);
    } else {
      LaunchBackward<1>(nullptr, dwpe, dout, nullptr, nullptr, B, T, C, v0, rows, stream);
    }
    return;
  }
  const int BT = B * T;
  const ScratchLayout layout = LayoutFor(BT);
  // A failed size query (no usable device) has set the runtime's last error; the caller's
  // next check reports it. Nothing can run without the sort.
  if (!layout.ok) return;
  char* base = static_cast<char*>(scratch);
  auto* positions = reinterpret_cast<int32_t*>(base + layout.positions);
  auto* sorted_tokens = reinterpret_cast<uint32_t*>(base + layout.sorted_tokens);
  auto* sorted_positions = reinterpret_cast<int32_t*>(base + layout.sorted_positions);
  void* temp = base + layout.temp;

  IotaKernel<<<CeilDiv(BT, kThreads), kThreads, 0, stream>>>(positions, BT);
  // Token ids are validated non-negative, so their uint32 order is their numeric order.
  size_t temp_bytes = layout.temp_bytes;
  const cudaError_t sorted = cub::DeviceRadixSort::SortPairs(
      temp, temp_bytes, reinterpret_cast<const uint32_t*>(tokens), sorted_tokens, positions,
      sorted_positions, BT, 0, 32, stream);
  // The storage is cub's own answer for BT items, so a failure here is a runtime error
  // (recorded in the last-error slot by the call that failed); skip the kernels that
  // would read the unsorted arrays.
  if (sorted != cudaSuccess) return;

  if (vector) {
    LaunchBackward<8>(dwte, dwpe, dout, sorted_tokens, sorted_positions, B, T, C, v0, rows,
                      stream);
  } else {
    LaunchBackward<1>(dwte, dwpe, dout, sorted_tokens, sorted_positions, B, T, C, v0, rows,
                      stream);
  }
}

}  // namespace cohort::engine::cuda
