#include "engine/kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "engine/kernels/cpu/fast_math.h"
#include "engine/kernels/cpu/parallel.h"

namespace cohort::engine::cpu {
namespace {

// log Σ_v e^{row[v]} over the first V entries.
COHORT_CPU_CLONES float RowLogSumExp(const float* row, int V) {
  float mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int v = 0; v < V; ++v) mx = std::max(mx, row[v]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; ++v) sum += FastExp(row[v] - mx);
  return mx + std::log(sum);
}

// Σ e^{row[v] − mx} over the first V entries (the same reduction as RowLogSumExp, so a
// single shard reproduces it bit for bit).
COHORT_CPU_CLONES float RowSumExp(const float* row, int V, float mx) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; ++v) sum += FastExp(row[v] - mx);
  return sum;
}

// row[v] = scale · e^{row[v] − lse} over the first V entries.
COHORT_CPU_CLONES void RowScaledSoftmax(float* row, int V, float lse, float scale) {
#pragma omp simd
  for (int v = 0; v < V; ++v) row[v] = scale * FastExp(row[v] - lse);
}

}  // namespace

double CrossEntropyForward(float* lse, const float* logits, const int32_t* targets, int N,
                           int V, int Vp, int* count) {
  double total = 0.0;
  int valid = 0;
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * Vp >= kParallelMinElements) reduction(+ : total, valid)
  for (int n = 0; n < N; ++n) {
    const float* row = logits + static_cast<size_t>(n) * Vp;
    const float l = RowLogSumExp(row, V);
    lse[n] = l;
    if (targets[n] >= 0) {
      total += static_cast<double>(l) - static_cast<double>(row[targets[n]]);
      ++valid;
    }
  }
  *count = valid;
  return total;
}

void CrossEntropyBackwardInPlace(float* logits, const float* lse, const int32_t* targets,
                                 int N, int V, int Vp, float scale) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * Vp >= kParallelMinElements)
  for (int n = 0; n < N; ++n) {
    float* row = logits + static_cast<size_t>(n) * Vp;
    const int t = targets[n];
    if (t < 0) {
      std::fill(row, row + Vp, 0.0f);
      continue;
    }
    RowScaledSoftmax(row, V, lse[n], scale);
    row[t] -= scale;
    std::fill(row + V, row + Vp, 0.0f);
  }
}

void CrossEntropyShardMax(float* row_max, const float* logits, int N, int Vs, int v0, int V) {
  const int real = std::clamp(V - v0, 0, Vs);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * Vs >= kParallelMinElements)
  for (int n = 0; n < N; ++n) {
    const float* row = logits + static_cast<size_t>(n) * Vs;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < real; ++v) mx = std::max(mx, row[v]);
    row_max[n] = mx;
  }
}

void CrossEntropyShardSums(float* sum_exp, float* target_logit, const float* logits,
                           const int32_t* targets, const float* max, int N, int Vs, int v0,
                           int V) {
  const int real = std::clamp(V - v0, 0, Vs);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * Vs >= kParallelMinElements)
  for (int n = 0; n < N; ++n) {
    const float* row = logits + static_cast<size_t>(n) * Vs;
    const float mx = max[n];
    sum_exp[n] = RowSumExp(row, real, mx);
    const int t = targets[n] - v0;
    target_logit[n] = targets[n] >= 0 && t >= 0 && t < real ? row[t] : 0.0f;
  }
}

void CrossEntropyShardBackwardInPlace(float* logits, const float* lse, const int32_t* targets,
                                      int N, int Vs, int v0, int V, float scale) {
  const int real = std::clamp(V - v0, 0, Vs);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * Vs >= kParallelMinElements)
  for (int n = 0; n < N; ++n) {
    float* row = logits + static_cast<size_t>(n) * Vs;
    if (targets[n] < 0) {
      std::fill(row, row + Vs, 0.0f);
      continue;
    }
    RowScaledSoftmax(row, real, lse[n], scale);
    const int t = targets[n] - v0;
    if (t >= 0 && t < real) row[t] -= scale;
    std::fill(row + real, row + Vs, 0.0f);
  }
}

}  // namespace cohort::engine::cpu
