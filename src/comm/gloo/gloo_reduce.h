// Element-wise reduction kernels for the Gloo backend, one per (DataType, ReduceOp), in
// the shape Gloo's algorithms call them: fn(out, a, b, n) sets out[i] = a[i] op b[i] for
// n elements (out may alias a or b). Half types (bfloat16, float16, stored as raw 16-bit
// patterns) are widened to float, combined, and rounded back to nearest even; integers
// wrap on overflow instead of being undefined. kAvg reduces as kSum; the caller divides
// by the group size afterwards (DivideInPlace). Pure functions: any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"

namespace cohort::comm::gloo_backend {

using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// The kernel for `type` and `op` (kAvg gives the kSum kernel).
ReduceFn ReduceFunction(DataType type, ReduceOp op);

// buf[i] /= divisor for `count` elements: floats divide in float (half types round to
// nearest even), integers truncate toward zero.
void DivideInPlace(void* buf, size_t count, DataType type, int divisor);

// IEEE binary16 and bfloat16 conversions; float→half rounds to nearest even, overflows
// to infinity and keeps NaN a (quiet) NaN.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace cohort::comm::gloo_backend
