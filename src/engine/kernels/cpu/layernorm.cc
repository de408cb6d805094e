#include "engine/kernels/cpu/layernorm.h"

#include <omp.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/kernels/cpu/parallel.h"

namespace cohort::engine::cpu {
namespace {
constexpr float kEps = 1e-5f;
}  // namespace

void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                      const float* b, int N, int C) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C >= kParallelMinElements)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float* y = out + static_cast<size_t>(n) * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const float m = sum / C;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) {
      float d = x[c] - m;
      var += d * d;
    }
    const float s = 1.0f / std::sqrt(var / C + kEps);
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void LayerNormBackward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int N, int C) {
  // dw and db are sums over rows: each thread sums its rows into a private partial, then
  // the partials are added in thread order (deterministic for a given thread count).
  std::vector<float> partial;
#pragma omp parallel if (static_cast<size_t>(N) * C >= kParallelMinElements)
  {
    const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
#pragma omp single
    partial.assign(static_cast<size_t>(nth) * 2 * C, 0.0f);
    float* pdw = partial.data() + static_cast<size_t>(tid) * 2 * C;
    float* pdb = pdw + C;
    Slice rows = SliceFor(N, tid, nth);
    for (size_t n = rows.begin; n < rows.end; ++n) {
      const float* x = inp + n * C;
      const float* d = dout + n * C;
      float* dx = dinp + n * C;
      const float m = mean[n], s = rstd[n];
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; ++c) {
        float norm = (x[c] - m) * s;
        float dnorm = w[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        float norm = (x[c] - m) * s;
        float dnorm = w[c] * d[c];
        pdw[c] += norm * d[c];
        pdb[c] += d[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
#pragma omp barrier
    Slice ch = SliceFor(C, tid, nth);
    for (int t = 0; t < nth; ++t) {
      const float* p = partial.data() + static_cast<size_t>(t) * 2 * C;
      for (size_t c = ch.begin; c < ch.end; ++c) {
        dw[c] += p[c];
        db[c] += p[C + c];
      }
    }
  }
}

}  // namespace cohort::engine::cpu
