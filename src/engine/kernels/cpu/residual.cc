#include "engine/kernels/cpu/residual.h"

#include "engine/kernels/cpu/parallel.h"

namespace cohort::engine::cpu {

void ResidualForward(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void ResidualBackward(float* da, float* db, const float* dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (size_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

}  // namespace cohort::engine::cpu
