#include "engine/kernels/cpu/gelu.h"

#include <omp.h>

#include "engine/kernels/cpu/fast_math.h"
#include "engine/kernels/cpu/parallel.h"

namespace cohort::engine::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;

COHORT_CPU_CLONES void GeluForwardRange(float* out, const float* inp, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCoeff * x * x * x);
    out[i] = 0.5f * x * (1.0f + FastTanh(u));
  }
}

COHORT_CPU_CLONES void GeluBackwardRange(float* dinp, const float* inp, const float* dout,
                                         size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCoeff * x * x * x);
    const float th = FastTanh(u);
    const float sech2 = 1.0f - th * th;
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * x * x);
    dinp[i] += (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * dout[i];
  }
}

}  // namespace

void GeluForward(float* out, const float* inp, size_t n) {
#pragma omp parallel if (n >= kParallelMinElements)
  {
    Slice s = SliceFor(n, omp_get_thread_num(), omp_get_num_threads(), 16);
    GeluForwardRange(out + s.begin, inp + s.begin, s.size());
  }
}

void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp parallel if (n >= kParallelMinElements)
  {
    Slice s = SliceFor(n, omp_get_thread_num(), omp_get_num_threads(), 16);
    GeluBackwardRange(dinp + s.begin, inp + s.begin, dout + s.begin, s.size());
  }
}

}  // namespace cohort::engine::cpu
