// KvCachePlan and KvBlockAllocator: the server's key/value cache, cut into fixed-size
// blocks under a memory budget (vLLM's paged cache).
//
// A block holds `block_size` positions of keys and values for every layer
// (2 · n_layer · block_size · n_embd elements). PlanKvCache turns a byte budget into a
// number of blocks; the model backend allocates exactly that many once, so the cache never
// grows past the budget. The allocator hands out block indices; a sequence holds the blocks
// its prompt and max_tokens need from admission to its end (the batcher reserves them all
// up front, so a running sequence never waits for memory and nothing is ever preempted).
//
// Threads: KvBlockAllocator is used by the batcher's thread only; used()/total() are
// plain reads for that thread (the batcher publishes them to other threads itself).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "engine/model/gpt.h"

namespace cohort::serve {

struct KvCachePlan {
  int block_size = 16;        // positions per block
  int num_blocks = 0;         // blocks the budget holds
  size_t bytes_per_block = 0; // keys and values of every layer
  size_t bytes() const { return bytes_per_block * static_cast<size_t>(num_blocks); }
};

// The plan for `budget_bytes` of cache with `elem_bytes` per element (4 for float32, 2
// for bf16). kInvalidArgument naming the flag: block_size outside [1, 1024], or a budget
// that holds fewer blocks than one full-context sequence needs ("--kv-cache-mb: 1 MiB
// holds 3 blocks of 16 positions; one sequence of max_seq_len 1024 needs 64").
Result<KvCachePlan> PlanKvCache(const engine::GptConfig& config, int block_size,
                                size_t budget_bytes, size_t elem_bytes);

// Blocks a sequence of `positions` tokens needs.
inline int BlocksFor(int positions, int block_size) {
  return (positions + block_size - 1) / block_size;
}

class KvBlockAllocator {
 public:
  explicit KvBlockAllocator(int num_blocks);

  // `n` free blocks, or an empty vector (and nothing taken) when fewer are free.
  std::vector<int> Allocate(int n);
  // Returns blocks taken by Allocate; each exactly once.
  void Free(const std::vector<int>& blocks);

  int total() const { return total_; }
  int free() const { return static_cast<int>(free_.size()); }
  int used() const { return total_ - free(); }

 private:
  int total_;
  std::vector<int> free_;  // a stack: the most recently freed block is reused first
};

}  // namespace cohort::serve
