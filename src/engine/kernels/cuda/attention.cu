// Fused causal attention (attention.cuh), FlashAttention-2 style: the T×T score matrix
// never leaves the chip; the forward keeps only the per-row log-sum-exp.
//
// Forward, AttentionForwardKernel<HS>: one block of 4 warps per (query tile of 64 rows,
// batch·head). Warp w owns the 16 query rows [16w, 16w + 16) of the tile and keeps them
// as mma A fragments in registers. The block walks the key/value tiles of 64 keys from
// tile 0 to the diagonal tile (tiles above the diagonal are never read); K and V tiles go
// global → shared with cp.async, two stages deep, so tile j + 1 loads while tile j is used.
// Per tile each warp computes S = Q·Kᵀ (16×64) with mma.sync m16n8k16 (bf16 operands,
// float32 accumulators), masks key > query on the diagonal tile, updates its running row
// max m and row sum l (base 2: scores times log2(e)/√hs), rescales its O accumulator and
// adds P·V with P rounded to bf16. Finally O/l is written as bf16 and lse = (m + log2 l)·ln 2.
//
// Backward, FlashAttention-2's algorithm:
//  1. AttentionRowDotKernel: D = rowsum(dO ∘ O) per (b, h, t), float32, into scratch.
//  2. AttentionBackwardKernel<HS>: one block per (key tile of 64 keys, batch·head); warp w
//     owns keys [16w, 16w + 16) and accumulates their dK and dV in float32 registers. The
//     block loops over the query tiles that can see its keys (query ≥ key: the diagonal
//     tile and everything below), Q/dO/lse/D tiles double-buffered through cp.async, and per
//     query tile recomputes Pᵀ = exp(K·Qᵀ·scale − lse) (masked where key > query), then
//     dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − D), dK += dSᵀ·Q. dSᵀ (bf16) goes through
//     shared memory so that the block can compute dQ_tile = dS·K and atomicAdd it into a
//     float32 accumulator (scratch). The atomics make dq non-deterministic in its last bits
//     (the order of the float additions varies between runs); dk and dv are deterministic.
//  3. AttentionDqConvertKernel: dqkv's q columns = bf16(scale · dq accumulator).
//
// Tensor-core fragments follow the PTX ISA layouts of mma.m16n8k16 (.bf16): with
// g = lane / 4 and t = lane % 4, a C/D tile (16×8) holds (row g, columns 2t, 2t + 1) and
// (row g + 8, same columns); an A fragment (16×16) is four registers holding columns
// 2t, 2t + 1 of (row g), (row g + 8), then columns 2t + 8, 2t + 9 of (row g), (row g + 8);
// a B fragment (16×8, k × n) is two registers, rows 2t, 2t + 1 and 2t + 8, 2t + 9 of
// column g. Two adjacent C tiles of a product are therefore exactly one A fragment of the
// next product, so P and dS go from accumulators to operands without shared memory.
// Fragments are read from shared memory with ldmatrix (.trans where the operand is stored
// k-major). Shared-memory rows are padded by 8 bf16 (16 bytes), which makes the 8 row
// addresses of every ldmatrix phase fall in distinct 16-byte bank groups.
//
// The section between "primitives: begin/end" holds every instruction that touches shared
// memory or the tensor cores; nothing else in the kernels accesses shared memory directly,
// so the shared-memory protocol can be audited (or the primitives emulated) in one place.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/kernels/cuda/attention.cuh"

namespace cohort::engine::cuda {
namespace {

// ---- primitives: begin ----

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, bypassing L1 (cp.async.cg). When !valid, writes 16 zero bytes
// and reads nothing (src-size 0); src must still be a valid global address.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)),
               "l"(src), "r"(src_bytes)
               : "memory");
}

// Closes the group of cp.async issued by this thread since the last commit.
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still in flight. Other
// threads' copies become visible only after a following __syncthreads().
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8×8 bf16 matrices from shared memory: lane l gives the address of row l % 8 of
// matrix l / 8 (16 contiguous bytes, 16-byte aligned); r[i] of lane l = matrix i's
// elements (l / 4, 2(l % 4)) and (l / 4, 2(l % 4) + 1), the lower column in the low half.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(p))
               : "memory");
}

// As LdMatrixX4, each matrix transposed: r[i] of lane l = matrix i's elements
// (2(l % 4), l / 4) and (2(l % 4) + 1, l / 4).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(p))
               : "memory");
}

// d (16×8, float32) += a (16×16, bf16, row-major fragment) · b (16×8, bf16, "col"
// fragment {b0, b1}); warp-collective.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Plain 4-byte shared-memory accesses (dSᵀ stores, the lse/D tiles).
__device__ __forceinline__ void SharedStoreU32(bf16* p, uint32_t v) {
  *reinterpret_cast<uint32_t*>(p) = v;
}
__device__ __forceinline__ void SharedStoreF32(float* p, float v) { *p = v; }
__device__ __forceinline__ float SharedLoadF32(const float* p) { return *p; }

// ---- primitives: end ----

constexpr int kThreads = 128;  // 4 warps per block, in every attention kernel
constexpr int kTile = 64;  // query rows per forward block; keys per K/V tile
constexpr int kPad = 8;    // bf16 elements of padding after every shared-memory row
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;

// Shared memory of the forward kernel: the Q tile, then two stages of K, then two of V,
// each kTile rows of HS bf16 (row stride kLd).
template <int HS>
struct ForwardConfig {
  static_assert(HS % 16 == 0 && HS >= 16 && HS <= 128, "head size");
  static constexpr int kLd = HS + kPad;
  static constexpr int kTileElems = kTile * kLd;
  static constexpr size_t kSmemBytes = 5 * static_cast<size_t>(kTileElems) * sizeof(bf16);
};

// Shared memory of the backward kernel (offsets in bf16 elements, then floats):
// K and V (kTile × kLd each), two stages of Q and of dO (kTile query rows × kLd each), dSᵀ
// (kTile keys × kLdS), then two stages of lse·log2(e) and of D (kTile floats each).
// Registers: a warp's dK and dV accumulators (16 keys × HS each) stay live across the whole
// loop, so the Sᵀ/dPᵀ tiles are computed kSubQ query columns at a time (kSubQ < 64 for the
// larger heads) and the dQ product kDqCols head columns at a time.
template <int HS>
struct BackwardConfig {
  static_assert(HS % 16 == 0 && HS >= 16 && HS <= 128, "head size");
  static constexpr int kSubQ = HS >= 128 ? 16 : (HS >= 64 ? 32 : 64);
  static constexpr int kDqCols = HS > 64 ? 64 : HS;
  static constexpr int kLd = HS + kPad;
  static constexpr int kLdS = kTile + kPad;
  static constexpr int kK = 0;
  static constexpr int kV = kK + kTile * kLd;
  static constexpr int kQ = kV + kTile * kLd;
  static constexpr int kDo = kQ + 2 * kTile * kLd;
  static constexpr int kDs = kDo + 2 * kTile * kLd;
  static constexpr int kBf16Elems = kDs + kTile * kLdS;
  static constexpr size_t kSmemBytes = static_cast<size_t>(kBf16Elems) * sizeof(bf16) +
                                       4 * static_cast<size_t>(kTile) * sizeof(float);
  static_assert((kBf16Elems * sizeof(bf16)) % 16 == 0, "float region alignment");
  static_assert(kTile % kSubQ == 0 && kSubQ % 16 == 0, "query sub-tiles");
  static_assert(HS % kDqCols == 0 && kDqCols % 16 == 0, "dQ column chunks");
};

// (lo, hi) rounded to bf16 and packed, lo in the low half: one fragment register.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}

// Issues the cp.async copies of rows [row0, row0 + kRows) of one head (HS columns starting
// at src, row stride ld elements) into dst (row stride HS + kPad); rows >= T are zero-filled.
// Consecutive threads take consecutive 16-byte chunks of a row (coalesced). Not committed.
template <int kRows, int HS>
__device__ __forceinline__ void LoadTileAsync(bf16* dst, const bf16* src, size_t ld, int row0,
                                              int T) {
  constexpr int kChunksPerRow = HS / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  for (int c = static_cast<int>(threadIdx.x); c < kChunks; c += kThreads) {
    const int r = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * 8;
    const int t = row0 + r;
    const bool valid = t < T;
    const bf16* s = valid ? src + static_cast<size_t>(t) * ld + col : src;
    CpAsync16(dst + r * (HS + kPad) + col, s, valid);
  }
}

// Grid: n_tiles · BNH blocks (n_tiles = ⌈T/64⌉, BNH = B·NH), block b → head bh = b % BNH and
// query tile n_tiles − 1 − b / BNH (the tiles with the most key tiles start first). 128
// threads; dynamic shared memory ForwardConfig<HS>::kSmemBytes.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    AttentionForwardKernel(bf16* __restrict__ out, float* __restrict__ lse,
                           const bf16* __restrict__ qkv, int T, int C, int NH, int BNH,
                           float scale_log2) {
  using Cfg = ForwardConfig<HS>;
  constexpr int kLd = Cfg::kLd;
  constexpr int kK16 = HS / 16;  // 16-wide slices of the head dimension
  extern __shared__ __align__(16) unsigned char attention_smem[];
  bf16* const q_s = reinterpret_cast<bf16*>(attention_smem);
  bf16* const k_s = q_s + Cfg::kTileElems;      // stage s at k_s + s·kTileElems
  bf16* const v_s = k_s + 2 * Cfg::kTileElems;  // stage s at v_s + s·kTileElems

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;  // fragment row group
  const int t = lane % 4;  // fragment column pair

  const int block = static_cast<int>(blockIdx.x);
  const int n_tiles = (T + kTile - 1) / kTile;
  const int bh = block % BNH;
  const int qt = n_tiles - 1 - block / BNH;
  const int b = bh / NH, h = bh % NH;
  const size_t ld = 3 * static_cast<size_t>(C);
  const bf16* const q_g = qkv + static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * HS;
  const bf16* const k_g = q_g + C;
  const bf16* const v_g = q_g + 2 * static_cast<size_t>(C);
  const int q0 = qt * kTile;
  const int n_kv = qt + 1;  // key tiles 0..qt; tile qt is the diagonal

  // Group 1: the Q tile. Group 2: K/V tile 0 into stage 0.
  LoadTileAsync<kTile, HS>(q_s, q_g, ld, q0, T);
  CpAsyncCommit();
  LoadTileAsync<kTile, HS>(k_s, k_g, ld, 0, T);
  LoadTileAsync<kTile, HS>(v_s, v_g, ld, 0, T);
  CpAsyncCommit();
  CpAsyncWait<1>();
  __syncthreads();

  // This warp's 16 query rows as A fragments, one per 16-column slice of the head.
  uint32_t q_frag[kK16][4];
#pragma unroll
  for (int kk = 0; kk < kK16; ++kk) {
    LdMatrixX4(q_frag[kk], q_s + (warp * 16 + (lane & 15)) * kLd + kk * 16 + (lane >> 4) * 8);
  }

  // o[n][..]: output columns [8n, 8n + 8) of rows g and g + 8 (C fragment layout).
  float o[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of rows g, g + 8 (log2 units)
  float l[2] = {0.0f, 0.0f};            // this thread's part of the running row sums

  for (int j = 0; j < n_kv; ++j) {
    const int stage = j & 1;
    if (j + 1 < n_kv) {
      // Stage stage^1 was last read in iteration j − 1, which ended with a barrier.
      LoadTileAsync<kTile, HS>(k_s + (stage ^ 1) * Cfg::kTileElems, k_g, ld, (j + 1) * kTile, T);
      LoadTileAsync<kTile, HS>(v_s + (stage ^ 1) * Cfg::kTileElems, v_g, ld, (j + 1) * kTile, T);
      CpAsyncCommit();
      CpAsyncWait<1>();  // tile j has landed (this thread's copies)
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();  // ... and everyone's
    const bf16* const ks = k_s + stage * Cfg::kTileElems;
    const bf16* const vs = v_s + stage * Cfg::kTileElems;

    // S = Q·Kᵀ: s[n] holds keys [8n, 8n + 8) of the tile. ldmatrix x4 over K rows
    // [16p, 16p + 16) and head columns [16kk, 16kk + 16) gives the B fragments of key
    // groups 2p (matrices 0, 1) and 2p + 1 (matrices 2, 3).
    float s[kTile / 8][4];
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int p = 0; p < kTile / 16; ++p) {
#pragma unroll
      for (int kk = 0; kk < kK16; ++kk) {
        uint32_t kb[4];
        LdMatrixX4(kb, ks + (p * 16 + (lane & 7) + ((lane >> 4) << 3)) * kLd + kk * 16 +
                           ((lane >> 3) & 1) * 8);
        MmaBf16(s[2 * p], q_frag[kk], kb[0], kb[1]);
        MmaBf16(s[2 * p + 1], q_frag[kk], kb[2], kb[3]);
      }
    }

    // Scale to log2 units; on the diagonal tile (keys k0 = q0) mask key > query.
    const bool diagonal = j == qt;
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n * 8 + 2 * t + (e & 1);
        const int row = warp * 16 + g + (e >> 1) * 8;
        const float x = s[n][e] * scale_log2;
        s[n][e] = (diagonal && key > row) ? -INFINITY : x;
      }
    }

    // Online softmax. Row r (0: g, 1: g + 8) is spread over the 4 lanes of a quad
    // (t = 0..3); reduce the max over the quad with two xor shuffles. Every row sees key 0
    // of tile 0, so the new max is finite and exp2(-inf − finite) = 0 masks cleanly.
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      corr[r] = exp2f(m[r] - mx[r]);  // 0 on the first tile (m = -inf)
      m[r] = mx[r];
      l[r] *= corr[r];
    }
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[n][e] - m[e >> 1]);
        s[n][e] = p;
        l[e >> 1] += p;
      }
    }

    // O += P·V. Keys [16c, 16c + 16) of P are the C tiles s[2c], s[2c + 1] = one A
    // fragment. ldmatrix.trans x4 over V rows [16c, 16c + 16) and head columns
    // [16dp, 16dp + 16) gives the B fragments of column groups 2dp (matrices 0, 1: key
    // rows 0-7, 8-15) and 2dp + 1 (matrices 2, 3).
#pragma unroll
    for (int c = 0; c < kTile / 16; ++c) {
      const uint32_t pa[4] = {PackBf16(s[2 * c][0], s[2 * c][1]),
                              PackBf16(s[2 * c][2], s[2 * c][3]),
                              PackBf16(s[2 * c + 1][0], s[2 * c + 1][1]),
                              PackBf16(s[2 * c + 1][2], s[2 * c + 1][3])};
#pragma unroll
      for (int dp = 0; dp < kK16; ++dp) {
        uint32_t vb[4];
        LdMatrixX4Trans(vb, vs + (c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd + dp * 16 +
                                (lane >> 4) * 8);
        MmaBf16(o[2 * dp], pa, vb[0], vb[1]);
        MmaBf16(o[2 * dp + 1], pa, vb[2], vb[3]);
      }
    }
    __syncthreads();  // all reads of stage `stage` done before iteration j + 1 refills it
  }

  // Full row sums over the quad, then O/l as bf16 and lse in natural-log units.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int q = q0 + warp * 16 + g + r * 8;
    if (q < T) {
      const float inv = 1.0f / l[r];
      bf16* const dst = out + (static_cast<size_t>(b) * T + q) * C + static_cast<size_t>(h) * HS;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dst + n * 8 + 2 * t) =
            PackBf16(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      }
      if (t == 0) lse[static_cast<size_t>(bh) * T + q] = (m[r] + log2f(l[r])) * kLn2;
    }
  }
}

// D[b, h, t] = Σ_d dout[b, t, h·HS + d] · out[b, t, h·HS + d] in float32. One thread per
// (b, t, h) row, index (b·T + t)·NH + h (neighbouring threads read neighbouring heads of a
// token), 16-byte loads; grid-stride.
template <int HS>
__global__ void AttentionRowDotKernel(float* __restrict__ D, const bf16* __restrict__ dout,
                                      const bf16* __restrict__ out, size_t rows, int T, int NH) {
  const size_t C = static_cast<size_t>(NH) * HS;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows;
       i += stride) {
    const size_t bt = i / NH;
    const int h = static_cast<int>(i % NH);
    const size_t off = bt * C + static_cast<size_t>(h) * HS;
    const uint4* const po = reinterpret_cast<const uint4*>(out + off);
    const uint4* const pd = reinterpret_cast<const uint4*>(dout + off);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < HS / 8; ++c) {
      const uint4 a = po[c], d = pd[c];
      const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, dw[4] = {d.x, d.y, d.z, d.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        __nv_bfloat162 a2, d2;
        memcpy(&a2, &aw[k], sizeof(a2));
        memcpy(&d2, &dw[k], sizeof(d2));
        sum += __bfloat162float(a2.x) * __bfloat162float(d2.x);
        sum += __bfloat162float(a2.y) * __bfloat162float(d2.y);
      }
    }
    const size_t b = bt / T, t = bt % T;
    D[(b * NH + h) * T + t] = sum;
  }
}

// Grid: n_tiles · BNH blocks, block b → head bh = b % BNH and key tile kt = b / BNH (key
// tile 0, which sees every query tile, starts first). 128 threads; dynamic shared memory
// BackwardConfig<HS>::kSmemBytes. Writes dK, dV of keys [64kt, 64kt + 64) ∩ [0, T) into
// dqkv and atomically adds dS·K (without the 1/√hs scale) into dq_acc (B, T, C).
template <int HS>
__global__ void __launch_bounds__(kThreads)
    AttentionBackwardKernel(bf16* __restrict__ dqkv, float* __restrict__ dq_acc,
                            const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
                            const float* __restrict__ lse, const float* __restrict__ D, int T,
                            int C, int NH, int BNH, float scale, float scale_log2) {
  using Cfg = BackwardConfig<HS>;
  constexpr int kLd = Cfg::kLd;
  constexpr int kLdS = Cfg::kLdS;
  constexpr int kSubQ = Cfg::kSubQ;
  constexpr int kK16 = HS / 16;
  extern __shared__ __align__(16) unsigned char attention_smem[];
  bf16* const smem = reinterpret_cast<bf16*>(attention_smem);
  bf16* const k_s = smem + Cfg::kK;
  bf16* const v_s = smem + Cfg::kV;
  bf16* const q_s = smem + Cfg::kQ;    // stage s at q_s + s·kTile·kLd
  bf16* const do_s = smem + Cfg::kDo;  // stage s at do_s + s·kTile·kLd
  bf16* const ds_s = smem + Cfg::kDs;  // dSᵀ: row = key of the tile, column = query
  float* const lse_s = reinterpret_cast<float*>(smem + Cfg::kBf16Elems);  // [2][kTile]
  float* const d_s = lse_s + 2 * kTile;                                     // [2][kTile]

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;

  const int block = static_cast<int>(blockIdx.x);
  const int bh = block % BNH;
  const int kt = block / BNH;
  const int b = bh / NH, h = bh % NH;
  const size_t ld = 3 * static_cast<size_t>(C);
  const size_t qkv_off = static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * HS;
  const bf16* const q_g = qkv + qkv_off;
  const bf16* const k_g = q_g + C;
  const bf16* const v_g = q_g + 2 * static_cast<size_t>(C);
  const size_t out_off = static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * HS;
  const bf16* const do_g = dout + out_off;
  const float* const lse_g = lse + static_cast<size_t>(bh) * T;
  const float* const d_g = D + static_cast<size_t>(bh) * T;
  const int k0 = kt * kTile;
  const int n_q = (T + kTile - 1) / kTile;
  const int n_iter = n_q - kt;  // query tiles kt (the diagonal) .. n_q − 1
  const int key_row = warp * 16;  // this warp's first key row in the tile

  // Issues the copies of query tile qi into stage `stage`: Q and dO by cp.async (rows >= T
  // zero), lse·log2(e) and D by plain loads (+inf and 0 past T, so those rows get P = 0).
  auto load_query_tile = [&](int stage, int qi) {
    const int row0 = qi * kTile;
    LoadTileAsync<kTile, HS>(q_s + stage * kTile * kLd, q_g, ld, row0, T);
    LoadTileAsync<kTile, HS>(do_s + stage * kTile * kLd, do_g, C, row0, T);
    if (tid < kTile) {
      const int q = row0 + tid;
      SharedStoreF32(lse_s + stage * kTile + tid, q < T ? lse_g[q] * kLog2e : INFINITY);
      SharedStoreF32(d_s + stage * kTile + tid, q < T ? d_g[q] : 0.0f);
    }
  };

  // Group 1: K, V and the diagonal query tile (stage 0).
  LoadTileAsync<kTile, HS>(k_s, k_g, ld, k0, T);
  LoadTileAsync<kTile, HS>(v_s, v_g, ld, k0, T);
  load_query_tile(0, kt);
  CpAsyncCommit();

  // dk[n], dv[n]: head columns [8n, 8n + 8) of this warp's keys g and g + 8.
  float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) {
    dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.0f;
    dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
  }

  for (int it = 0; it < n_iter; ++it) {
    const int stage = it & 1;
    const int q0 = (kt + it) * kTile;
    if (it + 1 < n_iter) {
      // Stage stage^1 was last read in iteration it − 1 before its mid-iteration barrier
      // (the dQ phase after that barrier reads only ds_s and K), so every thread is done
      // with it by the time any thread gets here.
      load_query_tile(stage ^ 1, kt + it + 1);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const bf16* const qs = q_s + stage * kTile * kLd;
    const bf16* const dos = do_s + stage * kTile * kLd;
    const float* const lses = lse_s + stage * kTile;
    const float* const ds = d_s + stage * kTile;
    const bool diagonal = it == 0;  // q0 == k0: the only tile with key > query pairs

    // The query tile in sub-tiles of kSubQ queries [sq, sq + kSubQ). (Loops whose index
    // only moves addresses stay rolled: unrolled, ptxas hoists all their loads at once.)
#pragma unroll 1
    for (int sq = 0; sq < kTile; sq += kSubQ) {
      // Sᵀ = K_w·Qᵀ (16 keys × kSubQ queries): A = this warp's K rows, B from Q rows
      // (like K in the forward). st[n] holds queries sq + [8n, 8n + 8).
      float st[kSubQ / 8][4];
#pragma unroll
      for (int n = 0; n < kSubQ / 8; ++n) st[n][0] = st[n][1] = st[n][2] = st[n][3] = 0.0f;
#pragma unroll 1
      for (int kk = 0; kk < kK16; ++kk) {
        uint32_t ka[4];
        LdMatrixX4(ka, k_s + (key_row + (lane & 15)) * kLd + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int p = 0; p < kSubQ / 16; ++p) {
          uint32_t qb[4];
          LdMatrixX4(qb, qs + (sq + p * 16 + (lane & 7) + ((lane >> 4) << 3)) * kLd + kk * 16 +
                             ((lane >> 3) & 1) * 8);
          MmaBf16(st[2 * p], ka, qb[0], qb[1]);
          MmaBf16(st[2 * p + 1], ka, qb[2], qb[3]);
        }
      }

      // Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), zero where key > query.
#pragma unroll
      for (int n = 0; n < kSubQ / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int ql = sq + n * 8 + 2 * t + (e & 1);
          const int kl = key_row + g + (e >> 1) * 8;
          const float p = exp2f(st[n][e] * scale_log2 - SharedLoadF32(lses + ql));
          st[n][e] = (diagonal && kl > ql) ? 0.0f : p;
        }
      }

      // dV += Pᵀ·dO: A = Pᵀ from st (queries [16c, 16c + 16) = tiles 2c, 2c + 1), B from
      // dO rows via ldmatrix.trans (like V in the forward).
#pragma unroll
      for (int c = 0; c < kSubQ / 16; ++c) {
        const uint32_t pa[4] = {PackBf16(st[2 * c][0], st[2 * c][1]),
                                PackBf16(st[2 * c][2], st[2 * c][3]),
                                PackBf16(st[2 * c + 1][0], st[2 * c + 1][1]),
                                PackBf16(st[2 * c + 1][2], st[2 * c + 1][3])};
#pragma unroll
        for (int dp = 0; dp < kK16; ++dp) {
          uint32_t ob[4];
          LdMatrixX4Trans(ob, dos + (sq + c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd +
                                  dp * 16 + (lane >> 4) * 8);
          MmaBf16(dv[2 * dp], pa, ob[0], ob[1]);
          MmaBf16(dv[2 * dp + 1], pa, ob[2], ob[3]);
        }
      }

      // dPᵀ = V_w·dOᵀ (16 keys × kSubQ queries), as Sᵀ with V for K and dO for Q.
      float dpt[kSubQ / 8][4];
#pragma unroll
      for (int n = 0; n < kSubQ / 8; ++n) dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.0f;
#pragma unroll 1
      for (int kk = 0; kk < kK16; ++kk) {
        uint32_t va[4];
        LdMatrixX4(va, v_s + (key_row + (lane & 15)) * kLd + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int p = 0; p < kSubQ / 16; ++p) {
          uint32_t ob[4];
          LdMatrixX4(ob, dos + (sq + p * 16 + (lane & 7) + ((lane >> 4) << 3)) * kLd + kk * 16 +
                             ((lane >> 3) & 1) * 8);
          MmaBf16(dpt[2 * p], va, ob[0], ob[1]);
          MmaBf16(dpt[2 * p + 1], va, ob[2], ob[3]);
        }
      }

      // dSᵀ = Pᵀ∘(dPᵀ − D), rounded to bf16 once: dsp[n][0] = key g, dsp[n][1] = key g + 8,
      // queries sq + 8n + 2t, +1. Also stored to ds_s for the dQ product below.
      uint32_t dsp[kSubQ / 8][2];
#pragma unroll
      for (int n = 0; n < kSubQ / 8; ++n) {
        const int ql = sq + n * 8 + 2 * t;
        const float d0 = SharedLoadF32(ds + ql);
        const float d1 = SharedLoadF32(ds + ql + 1);
        dsp[n][0] = PackBf16(st[n][0] * (dpt[n][0] - d0), st[n][1] * (dpt[n][1] - d1));
        dsp[n][1] = PackBf16(st[n][2] * (dpt[n][2] - d0), st[n][3] * (dpt[n][3] - d1));
        SharedStoreU32(ds_s + (key_row + g) * kLdS + ql, dsp[n][0]);
        SharedStoreU32(ds_s + (key_row + g + 8) * kLdS + ql, dsp[n][1]);
      }

      // dK += dSᵀ·Q (scaled at the end): A = dSᵀ (queries [16c, 16c + 16) from tiles 2c,
      // 2c + 1), B from Q rows via ldmatrix.trans.
#pragma unroll
      for (int c = 0; c < kSubQ / 16; ++c) {
        const uint32_t sa[4] = {dsp[2 * c][0], dsp[2 * c][1], dsp[2 * c + 1][0],
                                dsp[2 * c + 1][1]};
#pragma unroll
        for (int dp = 0; dp < kK16; ++dp) {
          uint32_t qb[4];
          LdMatrixX4Trans(qb, qs + (sq + c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd +
                                  dp * 16 + (lane >> 4) * 8);
          MmaBf16(dk[2 * dp], sa, qb[0], qb[1]);
          MmaBf16(dk[2 * dp + 1], sa, qb[2], qb[3]);
        }
      }
    }
    __syncthreads();  // dSᵀ of all four warps is in ds_s

    // dQ_tile (64 × HS) = dS·K over the 64 keys. Warp w: query rows [16w, 16w + 16), head
    // columns in chunks of kDqCols. A = dS = (dSᵀ)ᵀ via ldmatrix.trans of ds_s: matrices
    // (keys 0-7, queries 0-7), (keys 0-7, queries 8-15), (keys 8-15, queries 0-7),
    // (keys 8-15, queries 8-15) are A registers 0..3. B = K rows [16c, 16c + 16) via
    // ldmatrix.trans. The float32 results are atomically added to dq_acc (float2 atomics).
    const int mrow = warp * 16;
#pragma unroll 1
    for (int col0 = 0; col0 < HS; col0 += Cfg::kDqCols) {
      float dq[Cfg::kDqCols / 8][4];
#pragma unroll
      for (int n = 0; n < Cfg::kDqCols / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
#pragma unroll 1
      for (int c = 0; c < kTile / 16; ++c) {
        uint32_t sa[4];
        LdMatrixX4Trans(sa, ds_s + (c * 16 + (lane & 7) + ((lane >> 4) << 3)) * kLdS + mrow +
                                ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int dp = 0; dp < Cfg::kDqCols / 16; ++dp) {
          uint32_t kb[4];
          LdMatrixX4Trans(kb, k_s + (c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd + col0 +
                                  dp * 16 + (lane >> 4) * 8);
          MmaBf16(dq[2 * dp], sa, kb[0], kb[1]);
          MmaBf16(dq[2 * dp + 1], sa, kb[2], kb[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int q = q0 + mrow + g + r * 8;
        if (q < T) {
          float* const dst = dq_acc + out_off + static_cast<size_t>(q) * C + col0 + 2 * t;
#pragma unroll
          for (int n = 0; n < Cfg::kDqCols / 8; ++n) {
            // sm_90 vector atomic: two adjacent floats (8-byte aligned: even column).
            atomicAdd(reinterpret_cast<float2*>(dst + n * 8),
                      make_float2(dq[n][2 * r], dq[n][2 * r + 1]));
          }
        }
      }
    }
    // No barrier here: the next iteration writes ds_s only after its first barrier, which
    // every warp reaches after finishing this dQ phase; see also the stage note above.
  }

  // dK (times the 1/√hs of the scores) and dV of this warp's keys, bf16, into dqkv.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = k0 + key_row + g + r * 8;
    if (key < T) {
      bf16* const dst = dqkv + qkv_off + static_cast<size_t>(key) * ld + C + 2 * t;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dst + n * 8) =
            PackBf16(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
        *reinterpret_cast<uint32_t*>(dst + C + n * 8) = PackBf16(dv[n][2 * r], dv[n][2 * r + 1]);
      }
    }
  }
}

// dqkv[(b·T + t)·3C + c] = bf16(scale · dq_acc[(b·T + t)·C + c]) for c < C: the q columns.
// One thread per 8 consecutive columns (C % 8 == 0): two float4 loads, one 16-byte store;
// grid-stride.
__global__ void AttentionDqConvertKernel(bf16* __restrict__ dqkv, const float* __restrict__ dq_acc,
                                         size_t groups, int C, float scale) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < groups;
       i += stride) {
    const size_t e = i * 8;
    const size_t row = e / C, col = e % C;
    const float4 a = reinterpret_cast<const float4*>(dq_acc)[2 * i];
    const float4 c = reinterpret_cast<const float4*>(dq_acc)[2 * i + 1];
    uint4 v;
    v.x = PackBf16(a.x * scale, a.y * scale);
    v.y = PackBf16(a.z * scale, a.w * scale);
    v.z = PackBf16(c.x * scale, c.y * scale);
    v.w = PackBf16(c.z * scale, c.w * scale);
    *reinterpret_cast<uint4*>(dqkv + row * 3 * static_cast<size_t>(C) + col) = v;
  }
}

// ---- launchers ----

constexpr int kElementwiseThreads = 256;
constexpr size_t kMaxElementwiseBlocks = 4096;

int ElementwiseGrid(size_t work) {
  const size_t blocks = (work + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<int>(blocks < 1 ? 1
                                     : (blocks > kMaxElementwiseBlocks ? kMaxElementwiseBlocks
                                                                       : blocks));
}

bool Aligned(const void* p, size_t bytes) {
  return p != nullptr && reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The shape checks shared by both directions; hs is set on success.
bool ValidShape(int B, int T, int C, int NH, int* hs) {
  if (B < 1 || T < 1 || NH < 1 || C < NH || C % NH != 0) return false;
  *hs = C / NH;
  if (!AttentionSupportsHeadSize(*hs)) return false;
  // Blocks of the attention grids: ⌈T/64⌉·B·NH must fit grid.x.
  const size_t blocks = static_cast<size_t>(CeilDiv(static_cast<size_t>(T), kTile)) * B * NH;
  return blocks <= 0x7fffffffu;
}

// Raises the kernel's dynamic shared-memory limit when it needs more than the default 48 KB.
template <typename Kernel>
cudaError_t PrepareSmem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

template <int HS>
cudaError_t LaunchForward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                          cudaStream_t stream) {
  constexpr size_t kSmem = ForwardConfig<HS>::kSmemBytes;
  if (const cudaError_t e = PrepareSmem(AttentionForwardKernel<HS>, kSmem); e != cudaSuccess) {
    return e;
  }
  const int BNH = B * NH;
  const int blocks = CeilDiv(static_cast<size_t>(T), kTile) * BNH;
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(HS));
  AttentionForwardKernel<HS><<<blocks, kThreads, kSmem, stream>>>(out, lse, qkv, T, C, NH, BNH,
                                                                   scale_log2);
  return cudaGetLastError();
}

template <int HS>
cudaError_t LaunchBackward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                           const float* lse, int B, int T, int C, int NH, void* scratch,
                           cudaStream_t stream) {
  constexpr size_t kSmem = BackwardConfig<HS>::kSmemBytes;
  if (const cudaError_t e = PrepareSmem(AttentionBackwardKernel<HS>, kSmem); e != cudaSuccess) {
    return e;
  }
  const size_t btc = static_cast<size_t>(B) * T * C;
  const size_t rows = static_cast<size_t>(B) * T * NH;
  float* const dq_acc = static_cast<float*>(scratch);
  float* const D = dq_acc + btc;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));

  if (const cudaError_t e = cudaMemsetAsync(dq_acc, 0, btc * sizeof(float), stream);
      e != cudaSuccess) {
    return e;
  }
  AttentionRowDotKernel<HS><<<ElementwiseGrid(rows), kElementwiseThreads, 0, stream>>>(
      D, dout, out, rows, T, NH);
  const int BNH = B * NH;
  const int blocks = CeilDiv(static_cast<size_t>(T), kTile) * BNH;
  AttentionBackwardKernel<HS><<<blocks, kThreads, kSmem, stream>>>(
      dqkv, dq_acc, dout, qkv, lse, D, T, C, NH, BNH, scale, scale * kLog2e);
  AttentionDqConvertKernel<<<ElementwiseGrid(btc / 8), kElementwiseThreads, 0, stream>>>(
      dqkv, dq_acc, btc / 8, C, scale);
  return cudaGetLastError();
}

}  // namespace

bool AttentionSupportsHeadSize(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }

cudaError_t AttentionForward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                             int NH, cudaStream_t stream) {
  int hs = 0;
  if (!ValidShape(B, T, C, NH, &hs) || !Aligned(out, 16) || !Aligned(qkv, 16) ||
      !Aligned(lse, alignof(float))) {
    return cudaErrorInvalidValue;
  }
  switch (hs) {
    case 16: return LaunchForward<16>(out, lse, qkv, B, T, C, NH, stream);
    case 32: return LaunchForward<32>(out, lse, qkv, B, T, C, NH, stream);
    case 64: return LaunchForward<64>(out, lse, qkv, B, T, C, NH, stream);
    case 128: return LaunchForward<128>(out, lse, qkv, B, T, C, NH, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t AttentionBackward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                              const float* lse, int B, int T, int C, int NH, void* scratch,
                              cudaStream_t stream) {
  int hs = 0;
  if (!ValidShape(B, T, C, NH, &hs) || !Aligned(dqkv, 16) || !Aligned(dout, 16) ||
      !Aligned(qkv, 16) || !Aligned(out, 16) || !Aligned(lse, alignof(float)) ||
      !Aligned(scratch, 16)) {
    return cudaErrorInvalidValue;
  }
  switch (hs) {
    case 16: return LaunchBackward<16>(dqkv, dout, qkv, out, lse, B, T, C, NH, scratch, stream);
    case 32: return LaunchBackward<32>(dqkv, dout, qkv, out, lse, B, T, C, NH, scratch, stream);
    case 64: return LaunchBackward<64>(dqkv, dout, qkv, out, lse, B, T, C, NH, scratch, stream);
    case 128: return LaunchBackward<128>(dqkv, dout, qkv, out, lse, B, T, C, NH, scratch, stream);
    default: return cudaErrorInvalidValue;
  }
}

size_t AttentionBackwardScratchBytes(int B, int T, int C, int NH) {
  if (B < 1 || T < 1 || C < 1 || NH < 1) return 0;
  // The float32 dq accumulator (B, T, C), then D (B, NH, T).
  return (static_cast<size_t>(B) * T * C + static_cast<size_t>(B) * NH * T) * sizeof(float);
}

}  // namespace cohort::engine::cuda
