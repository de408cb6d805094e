// Shared pieces of the CUDA kernels (src/engine/kernels/cuda): the bf16 type, error
// checks and launch helpers. Every kernel family mirrors its float32 CPU reference in
// kernels/cpu (same layouts, same accumulate-or-overwrite rules unless a header says
// otherwise) so the parity tests compare op by op.
//
// Precision (issue 5): activations and the weights' bf16 copies are __nv_bfloat16;
// master weights, parameter gradients, optimizer state, LayerNorm statistics, the
// attention log-sum-exp and the loss are float32. Every reduction accumulates in float32.
//
// Launchers are host functions that enqueue work on `stream` and return at once; they
// never synchronize. A launch error surfaces through cudaGetLastError at the caller's
// next check point (COHORT_CUDA_CHECK(cudaGetLastError()), common/cuda_status.h). Shapes are the caller's responsibility (the model
// validates them once); launchers with shape limits say so and return
// cudaErrorInvalidValue.
//
// .cu files are compiled as C++20 by nvcc, which has no std::expected: no .cu/.cuh file
// includes common/error.h or common/cuda_status.h. Host-only code that returns Result
// (matmul.h, the model) is plain C++23 in .cc files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cohort::engine::cuda {

using bf16 = __nv_bfloat16;

// True when `p` is 16-byte aligned: the vectorised (8 × bf16 / 4 × float) paths need it.
inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Eight bf16 moved as one 16-byte access.
struct alignas(16) Bf16x8 {
  bf16 v[8];
};

// Blocks for a grid-stride loop over `work` items with `threads` per block: enough to give
// each thread one item, at least 1, at most `max_blocks`.
inline int GridStrideBlocks(size_t work, int threads, size_t max_blocks) {
  const size_t blocks = (work + threads - 1) / threads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

// ceil(a / b) for launch grids.
constexpr inline int CeilDiv(size_t a, size_t b) { return static_cast<int>((a + b - 1) / b); }

// dst[i] = bf16(src[i]) (round to nearest even), n elements.
void ConvertToBf16(bf16* dst, const float* src, size_t n, cudaStream_t stream);
// dst[i] = float(src[i]).
void ConvertToFloat(float* dst, const bf16* src, size_t n, cudaStream_t stream);
// dst[i] += src[i], n elements (ZeRO's gradient shard accumulating a reduced piece).
void Add(float* dst, const float* src, size_t n, cudaStream_t stream);
// Sets n floats to `value` (cudaMemsetAsync cannot write non-zero floats).
void Fill(float* dst, float value, size_t n, cudaStream_t stream);

}  // namespace cohort::engine::cuda
