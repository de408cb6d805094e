// A batch-invariant matrix product for serving: out (N, OC) = inp (N, C) · wᵀ + bias (OC;
// may be null), w (OC × C) packed once by PackRowInvariantWeights, in which every output
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
// Speed at the decode step's few rows comes from the packing: the weights are cut into
// panels of kRowInvariantPanel columns, each stored C × 32 contiguously (k-major, the
// last panel padded with zero columns) and 64-byte aligned, so a tile streams its panel
// front to back (the hardware prefetcher follows it; a transposed C × OC matrix instead
// touched a new 4 KiB page at every k). Tiles hold up to 6 rows × 64 columns of
// accumulators: fewer passes over the panels per row than OpenBLAS at 1-32 rows.
//
// Thread-safe for distinct outputs; OpenMP parallelises over pairs of panels inside (not
// at all when the calling thread's OpenMP thread count is 1).
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

namespace cohort::engine::cpu {

inline constexpr int kRowInvariantPanel = 32;  // columns per panel

// The packed weights of one product. Movable, not copyable.
class RowInvariantWeights {
 public:
  RowInvariantWeights() = default;
  int C() const { return C_; }
  int OC() const { return OC_; }
  int panels() const { return (OC_ + kRowInvariantPanel - 1) / kRowInvariantPanel; }
  // Panel p: C rows of kRowInvariantPanel floats.
  const float* panel(int p) const {
    return data_.get() + static_cast<size_t>(p) * C_ * kRowInvariantPanel;
  }
  size_t bytes() const { return static_cast<size_t>(panels()) * C_ * kRowInvariantPanel * sizeof(float); }

 private:
  friend RowInvariantWeights PackRowInvariantWeights(const float* w, int OC, int C);
  struct Free {
    void operator()(float* p) const;
  };
  int C_ = 0, OC_ = 0;
  std::unique_ptr<float[], Free> data_;
};

// w (OC × C, row-major, as the model stores it) -> panels.
RowInvariantWeights PackRowInvariantWeights(const float* w, int OC, int C);

// out (N, w.OC()) = inp (N, w.C()) · wᵀ + bias.
void MatmulForwardRowInvariant(float* out, const float* inp, const RowInvariantWeights& w, const float* bias,
                               int N);

// The same on a given instruction set ("avx512", "avx2", "scalar"): false (nothing done)
// when this CPU lacks it. Every one gives the same bits (the tests check it).
bool MatmulForwardRowInvariantOn(std::string_view isa, float* out, const float* inp, const RowInvariantWeights& w,
                                 const float* bias, int N);

// The instruction set the product runs with here: "avx512", "avx2" or "scalar".
const char* RowInvariantMatmulIsa();

}  // namespace cohort::engine::cpu
