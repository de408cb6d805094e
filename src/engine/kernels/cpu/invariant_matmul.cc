#include "engine/kernels/cpu/invariant_matmul.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/kernels/cpu/isa.h"

namespace cohort::engine::cpu {

namespace {

constexpr int kPanel = kRowInvariantPanel;
static_assert(kPanel == 32, "the tiles below hold a panel as two 16-float (or four 8-float) vectors");

// Outputs of rows [r0, r0 + rows) in panel p, one fma chain each over k in order.
void ScalarPanel(float* out, const float* inp, const RowInvariantWeights& w, const float* bias, int r0, int rows,
                 int p) {
  const int C = w.C(), OC = w.OC(), o0 = p * kPanel, cols = std::min(kPanel, OC - o0);
  const float* panel = w.panel(p);
  for (int r = r0; r < r0 + rows; ++r) {
    const float* a = inp + static_cast<size_t>(r) * C;
    for (int j = 0; j < cols; ++j) {
      float s = 0.0f;
      for (int k = 0; k < C; ++k) s = std::fma(a[k], panel[static_cast<size_t>(k) * kPanel + j], s);
      out[static_cast<size_t>(r) * OC + o0 + j] = bias != nullptr ? s + bias[o0 + j] : s;
    }
  }
}

// The lanes of a 16-float vector at column o that are real outputs (the last panel's
// padding columns are computed and dropped).
__attribute__((target("avx512f"))) inline __mmask16 Lanes16(int o, int OC) {
  const int n = OC - o;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}

// R rows × P panels at (r0, p0): 2·P 16-wide accumulators per row.
template <int R, int P>
__attribute__((target("avx512f"))) void Tile512(float* out, const float* inp, const RowInvariantWeights& w,
                                                const float* bias, int r0, int p0) {
  const int C = w.C(), OC = w.OC();
  __m512 acc[R][2 * P];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int v = 0; v < 2 * P; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const float* a[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) a[r] = inp + static_cast<size_t>(r0 + r) * C;
  const float* pw[P];
  #pragma GCC unroll 16
  for (int j = 0; j < P; ++j) pw[j] = w.panel(p0 + j);
  for (int k = 0; k < C; ++k) {
    __m512 wv[2 * P];
    #pragma GCC unroll 16
    for (int j = 0; j < P; ++j) {
      wv[2 * j] = _mm512_load_ps(pw[j] + static_cast<size_t>(k) * kPanel);
      wv[2 * j + 1] = _mm512_load_ps(pw[j] + static_cast<size_t>(k) * kPanel + 16);
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r][k]);
      #pragma GCC unroll 16
      for (int v = 0; v < 2 * P; ++v) acc[r][v] = _mm512_fmadd_ps(x, wv[v], acc[r][v]);
    }
  }
  #pragma GCC unroll 16
  for (int v = 0; v < 2 * P; ++v) {
    const int o = p0 * kPanel + 16 * v;
    const __mmask16 m = Lanes16(o, OC);
    if (m == 0) continue;
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(m, bias + o) : _mm512_setzero_ps();
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 y = bias != nullptr ? _mm512_add_ps(acc[r][v], b) : acc[r][v];
      _mm512_mask_storeu_ps(out + static_cast<size_t>(r0 + r) * OC + o, m, y);
    }
  }
}

// R rows × one panel at (r0, p): four 8-wide accumulators per row.
template <int R>
__attribute__((target("avx2,fma"))) void Tile256(float* out, const float* inp, const RowInvariantWeights& w,
                                                 const float* bias, int r0, int p) {
  const int C = w.C(), OC = w.OC();
  __m256 acc[R][4];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  const float* a[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) a[r] = inp + static_cast<size_t>(r0 + r) * C;
  const float* pw = w.panel(p);
  for (int k = 0; k < C; ++k) {
    __m256 wv[4];
    #pragma GCC unroll 16
    for (int v = 0; v < 4; ++v) wv[v] = _mm256_load_ps(pw + static_cast<size_t>(k) * kPanel + 8 * v);
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_set1_ps(a[r][k]);
      #pragma GCC unroll 16
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_fmadd_ps(x, wv[v], acc[r][v]);
    }
  }
  const int o0 = p * kPanel;
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* dst = out + static_cast<size_t>(r0 + r) * OC;
    if (o0 + kPanel <= OC) {
      #pragma GCC unroll 16
      for (int v = 0; v < 4; ++v) {
        __m256 y = acc[r][v];
        if (bias != nullptr) y = _mm256_add_ps(y, _mm256_loadu_ps(bias + o0 + 8 * v));
        _mm256_storeu_ps(dst + o0 + 8 * v, y);
      }
    } else {  // the last, padded panel: through a buffer
      alignas(32) float tmp[kPanel];
      #pragma GCC unroll 16
      for (int v = 0; v < 4; ++v) _mm256_store_ps(tmp + 8 * v, acc[r][v]);
      for (int j = 0; o0 + j < OC; ++j) dst[o0 + j] = bias != nullptr ? tmp[j] + bias[o0 + j] : tmp[j];
    }
  }
}

const Isa kIsa = BestIsa();

// Every row × panels [p0, p0 + np) (np 1 or 2): rows in tiles of 6, 4, 2 and 1, each
// streaming the panels once (a pair of panels is 2 · C · 128 bytes: in L2 for the tiles
// after the first).
template <int P>
void Rows512(float* out, const float* inp, const RowInvariantWeights& w, const float* bias, int N, int p0) {
  int r = 0;
  for (; r + 6 <= N; r += 6) Tile512<6, P>(out, inp, w, bias, r, p0);
  if (r + 4 <= N) Tile512<4, P>(out, inp, w, bias, r, p0), r += 4;
  if (r + 2 <= N) Tile512<2, P>(out, inp, w, bias, r, p0), r += 2;
  if (r < N) Tile512<1, P>(out, inp, w, bias, r, p0);
}

// One unit of work: every row × the panels [2g, 2g + 2) that exist.
void Group(Isa isa, float* out, const float* inp, const RowInvariantWeights& w, const float* bias, int N, int g) {
  const int p0 = 2 * g, np = std::min(2, w.panels() - p0);
  switch (isa) {
    case Isa::kAvx512:
      if (np == 2) Rows512<2>(out, inp, w, bias, N, p0);
      else Rows512<1>(out, inp, w, bias, N, p0);
      break;
    case Isa::kAvx2:
      for (int p = p0; p < p0 + np; ++p) {
        int r = 0;
        for (; r + 2 <= N; r += 2) Tile256<2>(out, inp, w, bias, r, p);
        if (r < N) Tile256<1>(out, inp, w, bias, r, p);
      }
      break;
    case Isa::kScalar:
      for (int p = p0; p < p0 + np; ++p) ScalarPanel(out, inp, w, bias, 0, N, p);
      break;
  }
}

void Run(Isa isa, float* out, const float* inp, const RowInvariantWeights& w, const float* bias, int N) {
  if (N <= 0 || w.OC() <= 0) return;
  const int groups = (w.panels() + 1) / 2;
  if (groups == 1 || omp_get_max_threads() == 1) {
    for (int g = 0; g < groups; ++g) Group(isa, out, inp, w, bias, N, g);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int g = 0; g < groups; ++g) Group(isa, out, inp, w, bias, N, g);
}

}  // namespace

void RowInvariantWeights::Free::operator()(float* p) const { std::free(p); }

RowInvariantWeights PackRowInvariantWeights(const float* w, int OC, int C) {
  RowInvariantWeights packed;
  packed.C_ = C;
  packed.OC_ = OC;
  const size_t floats = static_cast<size_t>(packed.panels()) * C * kPanel;
  // 64-byte aligned (a panel row is two cache lines), rounded up as aligned_alloc wants.
  const size_t bytes = std::max<size_t>(64, (floats * sizeof(float) + 63) / 64 * 64);
  packed.data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!packed.data_) std::abort();  // as operator new would: out of memory
  std::memset(packed.data_.get(), 0, bytes);
  float* d = packed.data_.get();
  for (int o = 0; o < OC; ++o) {
    const int p = o / kPanel, j = o % kPanel;
    float* col = d + static_cast<size_t>(p) * C * kPanel + j;
    const float* src = w + static_cast<size_t>(o) * C;
    for (int k = 0; k < C; ++k) col[static_cast<size_t>(k) * kPanel] = src[k];
  }
  return packed;
}

const char* RowInvariantMatmulIsa() {
  switch (kIsa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kScalar: return "scalar";
  }
  return "scalar";
}

void MatmulForwardRowInvariant(float* out, const float* inp, const RowInvariantWeights& w, const float* bias,
                               int N) {
  Run(kIsa, out, inp, w, bias, N);
}

bool MatmulForwardRowInvariantOn(std::string_view isa, float* out, const float* inp, const RowInvariantWeights& w,
                                 const float* bias, int N) {
  const std::optional<Isa> chosen = NamedIsa(isa);
  if (!chosen) return false;
  Run(*chosen, out, inp, w, bias, N);
  return true;
}

}  // namespace cohort::engine::cpu
