// The inference path's ops on the GPU (CPU reference: kernels/cpu/kv_attention.h):
// embeddings at arbitrary positions, writing keys and values into the block cache, and
// causal attention of new tokens over the cache. bf16 data, float32 scores and sums.
//
// Row-wise descriptors are built by the caller on the host and copied to the device:
// for every new token (row) its cache slot (block · block_size + offset), its context
// length (its position + 1) and the offset of its sequence's block table in `tables`.
// Cache layout per layer: (num_blocks, block_size, C) bf16 for keys and for values.
#pragma once

#include "engine/kernels/cuda/common.cuh"

namespace cohort::engine::cuda {

// out (N, C) = wte[tokens[r]] + wpe[positions[r]] (sum in float32, rounded once).
void EmbedAtPositions(bf16* out, const int32_t* tokens, const int32_t* positions, const bf16* wte,
                      const bf16* wpe, int N, int C, cudaStream_t stream);

// k_cache[slots[r]] = qkv[r, C:2C), v_cache[slots[r]] = qkv[r, 2C:3C) for r < N.
void KvCacheWrite(bf16* k_cache, bf16* v_cache, const bf16* qkv, const int32_t* slots, int N, int C,
                  cudaStream_t stream);

// out (N, C): for row r and head h, softmax(q·kᵀ/√hs) · v over positions 0..context[r]-1
// of its sequence, read through tables[table_offset[r] + j / block_size]. One block of
// threads per (row, head), its warps splitting the positions (flash-decoding: each warp an
// online softmax over its range, combined at the end). cudaErrorInvalidValue (nothing
// launched) for an odd head size or n_embd (keys and values are read in bf16 pairs), a head
// size over KvAttentionMaxHeadSize() or a context over KvAttentionMaxContext().
cudaError_t KvAttentionForward(bf16* out, const bf16* qkv, const bf16* k_cache, const bf16* v_cache,
                               const int32_t* context, const int32_t* table_offset,
                               const int32_t* tables, int N, int max_context, int block_size, int C,
                               int NH, cudaStream_t stream);
int KvAttentionMaxContext();
int KvAttentionMaxHeadSize();

}  // namespace cohort::engine::cuda
