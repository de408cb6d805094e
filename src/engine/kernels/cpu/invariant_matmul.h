// A batch-invariant matrix product for serving: out (N, OC) = inp (N, C) · wt (C × OC, the
// weights transposed: TransposeWeights) + bias (OC; may be null), in which every output
// row is bitwise the same whatever N is, whatever the other rows hold and however the work
// is split between threads.
//
// OpenBLAS's sgemm (matmul.h) chooses kernels and blockings by the shape: row 0 of a
// product rounds differently when it comes with 3 other rows than alone (measured on the
// dev VM: 701 of 768 outputs differ in their last bits, M=4 against M=1). A server that
// batches requests continuously then gives a stream different logits, and with sampling
// different tokens, depending on what else was in its batch, and a stream moved to another
// replica mid-way (prefilled there with the tokens already sent) does not continue as it
// would have. Here each output is one chain of fused multiply-adds over k in order from
// zero, then + bias: AVX-512, AVX2 and the scalar std::fma round every step the same, so
// the bits do not depend on the tile an output fell in, nor on the CPU's vector width.
//
// Thread-safe for distinct outputs; OpenMP parallelises over column blocks inside.
#pragma once

#include <string_view>
#include <vector>

namespace cohort::engine::cpu {

// w (OC × C, row-major, as the model stores it) -> wt (C × OC).
std::vector<float> TransposeWeights(const float* w, int OC, int C);

void MatmulForwardRowInvariant(float* out, const float* inp, const float* wt, const float* bias, int N, int C,
                               int OC);

// The same on a given instruction set ("avx512", "avx2", "scalar"): false (nothing done)
// when this CPU lacks it. Every one gives the same bits (the tests check it).
bool MatmulForwardRowInvariantOn(std::string_view isa, float* out, const float* inp, const float* wt,
                                 const float* bias, int N, int C, int OC);

// The instruction set the product runs with here: "avx512", "avx2" or "scalar".
const char* RowInvariantMatmulIsa();

}  // namespace cohort::engine::cpu
