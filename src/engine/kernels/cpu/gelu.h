// GELU with the tanh approximation (torch's approximate="tanh"):
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). float32, OpenMP over elements; tanh comes
// from a vectorised exp (fast_math.h, absolute error < 1e-6).
#pragma once

#include <cstddef>

namespace cohort::engine::cpu {

void GeluForward(float* out, const float* inp, size_t n);
// dinp += gelu'(inp) · dout.
void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n);

}  // namespace cohort::engine::cpu
