// Causal attention of new tokens against a key/value cache kept in fixed-size blocks
// (paged attention), float32 CPU reference: the inference path's op (src/serve). The
// training op (attention.h) recomputes the whole window; this one reads the keys and
// values of earlier positions from the cache, so each decoded token costs O(context), not
// O(context²).
//
// Cache layout, one per layer: v_cache is (num_blocks, block_size, C) floats, position p
// of a sequence in block blocks[p / block_size] at row p % block_size; k_cache is
// (num_blocks, C, block_size), each block's keys stored as columns, so the scores of 16
// consecutive positions are one vector fma per dimension.
//
// Every (query row, head) is computed alone, in a fixed order whatever the instruction
// set, so the bits do not depend on the batch, the threads or the CPU (as the serving
// product's, invariant_matmul.h): each score one fma chain over the head's dimensions in
// order, · 1/√hs; the softmax in plain float code (FastExp, the sum over positions in
// order); each output dimension one fma chain over the positions in order.
// The fused qkv input is the same as attention.h's: rows of 3C (q, k, v column blocks;
// head h in columns [h·hs, (h+1)·hs), hs = C / NH). Scores are scaled by 1/√hs; query i
// of a chunk that starts at position `start` sees positions 0..start+i.
//
// Threads: called from one thread; OpenMP parallelises over (query row, head) inside.
// The caller guarantees every block index is in range and that no two sequences of one
// call share a block they write.
#pragma once

#include <string_view>

namespace cohort::engine::cpu {

// One sequence's chunk of new tokens in a batched step.
struct KvChunk {
  int row = 0;           // its first row in qkv / out
  int n = 0;             // new tokens (rows)
  int start = 0;         // position of its first new token
  const int* blocks = nullptr;  // the sequence's block table (covers start + n positions)
};

// Copies the k and v columns of each chunk's rows into the cache at their positions.
void KvCacheWrite(float* k_cache, float* v_cache, const float* qkv, const KvChunk* chunks,
                  int num_chunks, int block_size, int C);

// out (rows, C): for each chunk row, the heads' attention over the cached positions
// 0..start+i (KvCacheWrite must have stored this step's keys and values first).
void KvAttentionForward(float* out, const float* qkv, const float* k_cache,
                        const float* v_cache, const KvChunk* chunks, int num_chunks,
                        int block_size, int C, int NH);

// The same on a given instruction set ("avx512", "avx2", "scalar"): false (nothing done)
// when this CPU lacks it. Every one gives the same bits.
bool KvAttentionForwardOn(std::string_view isa, float* out, const float* qkv, const float* k_cache,
                          const float* v_cache, const KvChunk* chunks, int num_chunks, int block_size, int C,
                          int NH);

}  // namespace cohort::engine::cpu
