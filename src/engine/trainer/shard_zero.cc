#include "engine/trainer/shard_zero.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/model/gpt_shard.h"
#include "engine/optim/grad_clip.h"

namespace cohort::engine {

Result<std::unique_ptr<ShardZero>> ShardZero::Create(const GptShardLayout& layout,
                                                     comm::Communicator& data,
                                                     const ZeroPartition& partition, int stage,
                                                     bool prefetch) {
  if (stage != 2 && stage != 3) {
    return Errorf(ErrorCode::kInvalidArgument, "ShardZero: stage {} (built: 2 and 3)", stage);
  }
  std::unique_ptr<ShardZero> z(new ShardZero(layout, data, partition));
  const size_t piece = MaxShardPiece(layout);
  z->grads_ = std::make_unique<ShardedGradients>(data, partition, piece, /*overlap=*/true,
                                                 ShardedGradients::Pieces::kCallerMemory);
  if (stage == 3) {
    std::vector<int> all(static_cast<size_t>(data.size()));
    for (int r = 0; r < data.size(); ++r) all[static_cast<size_t>(r)] = r;
    auto split = data.Split(all);
    if (!split) return std::unexpected(WithContext(split.error(), "ZeRO-3 gather group"));
    z->gather_comm_ = std::move(*split);
    z->params_ = GatheredParams::FromShard(*z->gather_comm_, partition,
                                           std::vector<float>(partition.size(data.rank())),
                                           ShardParamPieceSizes(layout), prefetch);
  }
  z->backwards_.assign(layout.chunks.size(), 0);
  return z;
}

void ShardZero::BeginRound(int microbatches, bool forward_only) {
  if (params_) params_->BeginRound(microbatches * 2 + (forward_only ? 1 : 0));
  if (forward_only) return;
  microbatches_ = microbatches;
  std::fill(backwards_.begin(), backwards_.end(), 0);
  deferred_.clear();
  grads_->Begin();
}

bool ShardZero::IsTiedWte(size_t offset) const {
  for (size_t c = 0; c < layout_.chunks.size(); ++c) {
    const ShardChunkSpec& spec = layout_.spec.chunks[c];
    const ShardChunkOffsets& co = layout_.chunks[c];
    if ((spec.embedding && offset == co.wte) || (spec.head && offset == co.head_wte)) return true;
  }
  return false;
}

GradReadyFn ShardZero::BackwardReady(int chunk, std::span<const float> grads) {
  if (chunk < 0 || chunk >= static_cast<int>(backwards_.size()) ||
      ++backwards_[static_cast<size_t>(chunk)] != microbatches_) {
    return {};
  }
  return [this, grads](size_t offset, size_t count) {
    if (IsTiedWte(offset)) {
      deferred_.push_back({offset, count});
    } else {
      grads_->Submit(grads.data() + offset, offset, count);
    }
  };
}

Result<void> ShardZero::ReduceDataShards(std::span<const float> grads) {
  for (const Deferred& d : deferred_) grads_->Submit(grads.data() + d.offset, d.offset, d.count);
  deferred_.clear();
  return grads_->Finish();
}

Result<double> ShardZero::SquaredNorm() {
  const size_t lo = partition_.begin(data_.rank()), hi = partition_.end(data_.rank());
  std::span<const float> shard = grads_->shard();
  double sq = 0;
  for (const ShardTensor& t : layout_.tensors) {
    if (!t.counts_in_norm) continue;
    const size_t a = std::max(lo, t.local.offset), b = std::min(hi, t.local.offset + t.local.numel);
    if (b > a) sq += ::cohort::engine::SquaredNorm(shard.subspan(a - lo, b - a));
  }
  return SumOverRanks(data_, sq);
}

size_t ShardZero::scratch_bytes() const {
  return grads_->scratch_bytes() + (params_ ? params_->gather_bytes() : 0);
}

}  // namespace cohort::engine
