// Residual connection: out = a + b, and its backward. float32, OpenMP over elements.
#pragma once

#include <cstddef>

namespace cohort::engine::cpu {

// out = a + b (out may alias a or b).
void ResidualForward(float* out, const float* a, const float* b, size_t n);
// da += dout; db += dout.
void ResidualBackward(float* da, float* db, const float* dout, size_t n);

}  // namespace cohort::engine::cpu
