#include "engine/kernels/cpu/invariant_matmul.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace cohort::engine::cpu {

namespace {

// Outputs (r, o) for rows [r0, r0 + rows) and columns [o0, o1), one fma chain each.
void Scalar(float* out, const float* inp, const float* wt, const float* bias, int C, int OC, int r0, int rows,
            int o0, int o1) {
  for (int r = r0; r < r0 + rows; ++r) {
    const float* a = inp + static_cast<size_t>(r) * C;
    for (int o = o0; o < o1; ++o) {
      float s = 0.0f;
      for (int k = 0; k < C; ++k) s = std::fma(a[k], wt[static_cast<size_t>(k) * OC + o], s);
      out[static_cast<size_t>(r) * OC + o] = bias != nullptr ? s + bias[o] : s;
    }
  }
}

// R rows × 32 columns at o: two 16-wide accumulators per row.
template <int R>
__attribute__((target("avx512f"))) void Tile512(float* out, const float* inp, const float* wt, const float* bias,
                                                int C, int OC, int r0, int o) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const float* a[R];
  for (int r = 0; r < R; ++r) a[r] = inp + static_cast<size_t>(r0 + r) * C;
  for (int k = 0; k < C; ++k) {
    const float* w = wt + static_cast<size_t>(k) * OC + o;
    const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r][k]);
      acc[r][0] = _mm512_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, w1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* dst = out + static_cast<size_t>(r0 + r) * OC + o;
    if (bias != nullptr) {
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_loadu_ps(bias + o));
      acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_loadu_ps(bias + o + 16));
    }
    _mm512_storeu_ps(dst, acc[r][0]);
    _mm512_storeu_ps(dst + 16, acc[r][1]);
  }
}

// R rows × 16 columns at o: two 8-wide accumulators per row.
template <int R>
__attribute__((target("avx2,fma"))) void Tile256(float* out, const float* inp, const float* wt, const float* bias,
                                                 int C, int OC, int r0, int o) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const float* a[R];
  for (int r = 0; r < R; ++r) a[r] = inp + static_cast<size_t>(r0 + r) * C;
  for (int k = 0; k < C; ++k) {
    const float* w = wt + static_cast<size_t>(k) * OC + o;
    const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_set1_ps(a[r][k]);
      acc[r][0] = _mm256_fmadd_ps(x, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, w1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* dst = out + static_cast<size_t>(r0 + r) * OC + o;
    if (bias != nullptr) {
      acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(bias + o));
      acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(bias + o + 8));
    }
    _mm256_storeu_ps(dst, acc[r][0]);
    _mm256_storeu_ps(dst + 8, acc[r][1]);
  }
}

enum class Isa { kAvx512, kAvx2, kScalar };

Isa Detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kScalar;
}

const Isa kIsa = Detect();

using TileFn = void (*)(float*, const float*, const float*, const float*, int, int, int, int);

// Rows [0, N) × columns [o0, o1) with tiles of Big rows, then Mid, 4 and 1, and `Width`
// columns (more rows per tile: fewer passes over the block of wt); the columns past the
// last whole tile go the scalar way.
template <int Width, int Big, TileFn TBig, int Mid, TileFn TMid, TileFn T4, TileFn T1>
void Tiled(float* out, const float* inp, const float* wt, const float* bias, int N, int C, int OC, int o0, int o1) {
  const int vec_end = o0 + (o1 - o0) / Width * Width;
  int r = 0;
  for (; r + Big <= N; r += Big) {
    for (int o = o0; o < vec_end; o += Width) TBig(out, inp, wt, bias, C, OC, r, o);
  }
  for (; r + Mid <= N; r += Mid) {
    for (int o = o0; o < vec_end; o += Width) TMid(out, inp, wt, bias, C, OC, r, o);
  }
  for (; r + 4 <= N; r += 4) {
    for (int o = o0; o < vec_end; o += Width) T4(out, inp, wt, bias, C, OC, r, o);
  }
  for (; r < N; ++r) {
    for (int o = o0; o < vec_end; o += Width) T1(out, inp, wt, bias, C, OC, r, o);
  }
  if (vec_end < o1) Scalar(out, inp, wt, bias, C, OC, 0, N, vec_end, o1);
}

}  // namespace

std::vector<float> TransposeWeights(const float* w, int OC, int C) {
  std::vector<float> wt(static_cast<size_t>(OC) * C);
  for (int o = 0; o < OC; ++o) {
    for (int k = 0; k < C; ++k) wt[static_cast<size_t>(k) * OC + o] = w[static_cast<size_t>(o) * C + k];
  }
  return wt;
}


const char* RowInvariantMatmulIsa() {
  switch (kIsa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kScalar: return "scalar";
  }
  return "scalar";
}

namespace {

void Run(Isa isa, float* out, const float* inp, const float* wt, const float* bias, int N, int C, int OC) {
  // Column blocks of 64: a block of wt (C × 64) stays in cache across the rows.
  constexpr int kBlock = 64;
  const long blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1)
  for (long b = 0; b < blocks; ++b) {
    const int o0 = static_cast<int>(b * kBlock), o1 = std::min(OC, o0 + kBlock);
    switch (isa) {
      case Isa::kAvx512:
        Tiled<32, 12, Tile512<12>, 8, Tile512<8>, Tile512<4>, Tile512<1>>(out, inp, wt, bias, N, C, OC, o0, o1);
        break;
      case Isa::kAvx2: Tiled<16, 6, Tile256<6>, 4, Tile256<4>, Tile256<4>, Tile256<1>>(out, inp, wt, bias, N, C, OC, o0, o1); break;
      case Isa::kScalar: Scalar(out, inp, wt, bias, C, OC, 0, N, o0, o1); break;
    }
  }
}

}  // namespace

void MatmulForwardRowInvariant(float* out, const float* inp, const float* wt, const float* bias, int N, int C,
                               int OC) {
  Run(kIsa, out, inp, wt, bias, N, C, OC);
}

bool MatmulForwardRowInvariantOn(std::string_view isa, float* out, const float* inp, const float* wt,
                                 const float* bias, int N, int C, int OC) {
  Isa chosen;
  if (isa == "avx512" && kIsa == Isa::kAvx512) {
    chosen = Isa::kAvx512;
  } else if (isa == "avx2" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    chosen = Isa::kAvx2;
  } else if (isa == "scalar") {
    chosen = Isa::kScalar;
  } else {
    return false;
  }
  Run(chosen, out, inp, wt, bias, N, C, OC);
  return true;
}

}  // namespace cohort::engine::cpu
