#include "engine/kernels/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/kernels/cpu/fast_math.h"
#include "engine/kernels/cpu/matmul.h"

namespace cohort::engine::cpu {
namespace {

// Rows per block: products only cover the causal (lower-triangular) part block by block.
constexpr int kBlock = 64;

// In place: row[0..n) = softmax(row[0..n)).
COHORT_CPU_CLONES void RowSoftmax(float* row, int n) {
  float mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; ++j) mx = std::max(mx, row[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    row[j] = FastExp(row[j] - mx);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j < n; ++j) row[j] *= inv;
}

// In place: r[j] = scale · p[j] · (r[j] − Σ_k p[k]·r[k]) for j < n (softmax backward).
COHORT_CPU_CLONES void RowSoftmaxBackward(float* r, const float* p, int n, float scale) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int j = 0; j < n; ++j) dot += p[j] * r[j];
#pragma omp simd
  for (int j = 0; j < n; ++j) r[j] = scale * p[j] * (r[j] - dot);
}

}  // namespace

void AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  UseOpenMpForBlas();
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for schedule(dynamic, 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const float* q = qkv + static_cast<size_t>(b) * T * C3 + h * hs;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* a = att + static_cast<size_t>(bh) * T * T;
    float* o = out + static_cast<size_t>(b) * T * C + h * hs;
    for (int i0 = 0; i0 < T; i0 += kBlock) {
      const int i1 = std::min(T, i0 + kBlock), m = i1 - i0;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, hs, scale,
                  q + static_cast<size_t>(i0) * C3, C3, k, C3, 0.0f,
                  a + static_cast<size_t>(i0) * T, T);
      for (int i = i0; i < i1; ++i) {
        float* row = a + static_cast<size_t>(i) * T;
        RowSoftmax(row, i + 1);
        std::fill(row + i + 1, row + T, 0.0f);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, i1, 1.0f,
                  a + static_cast<size_t>(i0) * T, T, v, C3, 0.0f,
                  o + static_cast<size_t>(i0) * C, C);
    }
  }
}

void AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att,
                       int B, int T, int C, int NH) {
  UseOpenMpForBlas();
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel
  {
    std::vector<float> dp(static_cast<size_t>(T) * T);  // dP, then dS, of one (b, h)
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const size_t qoff = static_cast<size_t>(b) * T * C3 + h * hs;
      const float* q = qkv + qoff;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + qoff;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + static_cast<size_t>(bh) * T * T;
      const float* d = dout + static_cast<size_t>(b) * T * C + h * hs;
      float* s = dp.data();
      for (int i0 = 0; i0 < T; i0 += kBlock) {
        const int i1 = std::min(T, i0 + kBlock), m = i1 - i0;
        // dP = dO · Vᵀ on the causal block; dV += Pᵀ · dO for rows [i0, T).
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, hs, 1.0f,
                    d + static_cast<size_t>(i0) * C, C, v, C3, 0.0f,
                    s + static_cast<size_t>(i0) * T, T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, hs, T - i0, 1.0f,
                    a + static_cast<size_t>(i0) * T + i0, T, d + static_cast<size_t>(i0) * C, C,
                    1.0f, dv + static_cast<size_t>(i0) * C3, C3);
        // dS = scale · P ⊙ (dP − Σ_j P·dP), zero above the diagonal.
        for (int i = i0; i < i1; ++i) {
          const float* p = a + static_cast<size_t>(i) * T;
          float* r = s + static_cast<size_t>(i) * T;
          RowSoftmaxBackward(r, p, i + 1, scale);
          std::fill(r + i + 1, r + T, 0.0f);
        }
      }
      for (int i0 = 0; i0 < T; i0 += kBlock) {
        const int i1 = std::min(T, i0 + kBlock), m = i1 - i0;
        // dQ += dS · K on the causal block; dK += dSᵀ · Q for rows [i0, T).
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, i1, 1.0f,
                    s + static_cast<size_t>(i0) * T, T, k, C3, 1.0f,
                    dq + static_cast<size_t>(i0) * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, hs, T - i0, 1.0f,
                    s + static_cast<size_t>(i0) * T + i0, T, q + static_cast<size_t>(i0) * C3,
                    C3, 1.0f, dk + static_cast<size_t>(i0) * C3, C3);
      }
    }
  }
}

}  // namespace cohort::engine::cpu
