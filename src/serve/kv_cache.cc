#include "serve/kv_cache.h"

#include <algorithm>
#include <cmath>

namespace cohort::serve {

Result<KvCachePlan> PlanKvCache(const engine::GptConfig& config, int block_size,
                                size_t budget_bytes, size_t elem_bytes) {
  if (block_size < 1 || block_size > 1024) {
    return FieldError("--kv-block-size", "must be between 1 and 1024, got {}", block_size);
  }
  KvCachePlan plan;
  plan.block_size = block_size;
  plan.bytes_per_block = 2 * static_cast<size_t>(config.n_layer) * block_size *
                         static_cast<size_t>(config.n_embd) * elem_bytes;
  const size_t blocks = budget_bytes / plan.bytes_per_block;
  const int one_sequence = BlocksFor(config.max_seq_len, block_size);
  if (blocks < static_cast<size_t>(one_sequence)) {
    // The smallest budget that holds one whole sequence, rounded up to 1/1000 MiB.
    const double need_mib =
        std::ceil(static_cast<double>(one_sequence) * plan.bytes_per_block / 1048576.0 * 1000) / 1000;
    return FieldError("--kv-cache-mb",
                      "{:g} MiB holds {} blocks of {} positions ({} bytes each); one sequence "
                      "of max_seq_len {} needs {}: give --kv-cache-mb {:g} or more",
                      budget_bytes / 1048576.0, blocks, block_size, plan.bytes_per_block,
                      config.max_seq_len, one_sequence, need_mib);
  }
  plan.num_blocks = static_cast<int>(std::min<size_t>(blocks, 1 << 30));
  return plan;
}

KvBlockAllocator::KvBlockAllocator(int num_blocks) : total_(num_blocks) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

std::vector<int> KvBlockAllocator::Allocate(int n) {
  if (n < 0 || n > free()) return {};
  std::vector<int> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - static_cast<size_t>(n));
  return out;
}

void KvBlockAllocator::Free(const std::vector<int>& blocks) {
  free_.insert(free_.end(), blocks.rbegin(), blocks.rend());
}

}  // namespace cohort::serve
