#include "engine/kernels/cpu/encoder.h"

#include <omp.h>

#include <cstddef>

#include "engine/kernels/cpu/parallel.h"

namespace cohort::engine::cpu {

void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                    int B, int T, int C) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(B) * T * C >= kParallelMinElements)
  for (int bt = 0; bt < B * T; ++bt) {
    const float* e = wte + static_cast<size_t>(tokens[bt]) * C;
    const float* p = wpe + static_cast<size_t>(bt % T) * C;
    float* o = out + static_cast<size_t>(bt) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                     int B, int T, int C) {
  // Each thread owns a slice of the channels, so rows of dwte shared by repeated tokens
  // are summed by one thread in (b, t) order: no atomics, and deterministic.
#pragma omp parallel if (static_cast<size_t>(B) * T * C >= kParallelMinElements)
  {
    Slice ch = SliceFor(C, omp_get_thread_num(), omp_get_num_threads(), 16);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const size_t bt = static_cast<size_t>(b) * T + t;
        const float* d = dout + bt * C;
        float* e = dwte + static_cast<size_t>(tokens[bt]) * C;
        float* p = dwpe + static_cast<size_t>(t) * C;
#pragma omp simd
        for (size_t c = ch.begin; c < ch.end; ++c) {
          e[c] += d[c];
          p[c] += d[c];
        }
      }
    }
  }
}

void EmbeddingShardForward(float* out, const int32_t* tokens, const float* wte_rows, int v0,
                           int rows, int N, int C) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C >= kParallelMinElements)
  for (int n = 0; n < N; ++n) {
    float* o = out + static_cast<size_t>(n) * C;
    const int row = tokens[n] - v0;
    if (row < 0 || row >= rows) {
      for (int c = 0; c < C; ++c) o[c] = 0.0f;
      continue;
    }
    const float* e = wte_rows + static_cast<size_t>(row) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = e[c];
  }
}

void EmbeddingShardBackward(float* dwte_rows, const float* dout, const int32_t* tokens, int v0,
                            int rows, int N, int C) {
#pragma omp parallel if (static_cast<size_t>(N) * C >= kParallelMinElements)
  {
    Slice ch = SliceFor(C, omp_get_thread_num(), omp_get_num_threads(), 16);
    for (int n = 0; n < N; ++n) {
      const int row = tokens[n] - v0;
      if (row < 0 || row >= rows) continue;
      const float* d = dout + static_cast<size_t>(n) * C;
      float* e = dwte_rows + static_cast<size_t>(row) * C;
#pragma omp simd
      for (size_t c = ch.begin; c < ch.end; ++c) e[c] += d[c];
    }
  }
}

void PositionForward(float* out, const float* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(B) * T * C >= kParallelMinElements)
  for (int bt = 0; bt < B * T; ++bt) {
    const float* p = wpe + static_cast<size_t>(bt % T) * C;
    float* o = out + static_cast<size_t>(bt) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] += p[c];
  }
}

void PositionBackward(float* dwpe, const float* dout, int B, int T, int C) {
#pragma omp parallel if (static_cast<size_t>(B) * T * C >= kParallelMinElements)
  {
    Slice ch = SliceFor(C, omp_get_thread_num(), omp_get_num_threads(), 16);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
        float* p = dwpe + static_cast<size_t>(t) * C;
#pragma omp simd
        for (size_t c = ch.begin; c < ch.end; ++c) p[c] += d[c];
      }
    }
  }
}

}  // namespace cohort::engine::cpu
