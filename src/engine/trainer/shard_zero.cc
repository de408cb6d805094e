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
    z->params_ = GatheredParams::FromShard(
        *z->gather_comm_, partition, std::vector<float>(partition.size(data.rank())), piece,
        prefetch);
  }
  return z;
}

void ShardGradRounds::Begin(int microbatches) {
  microbatches_ = microbatches;
  std::fill(backwards_.begin(), backwards_.end(), 0);
  deferred_.clear();
}

bool ShardGradRounds::HoldsTiedWte(size_t offset, size_t count) const {
  // The CPU model reports wte as a piece of its own; the CUDA model's pieces hold it with wpe
  // (the embedding piece) or with ln_f (the head piece).
  const size_t wte = static_cast<size_t>(layout_.vocab_end - layout_.vocab_begin) *
                     static_cast<size_t>(layout_.spec.config.n_embd);
  auto overlaps = [&](size_t at) { return offset < at + wte && at < offset + count; };
  for (size_t c = 0; c < layout_.chunks.size(); ++c) {
    const ShardChunkSpec& spec = layout_.spec.chunks[c];
    const ShardChunkOffsets& co = layout_.chunks[c];
    if ((spec.embedding && overlaps(co.wte)) || (spec.head && overlaps(co.head_wte))) return true;
  }
  return false;
}

GradReadyFn ShardGradRounds::BackwardReady(int chunk, SubmitFn submit) {
  if (chunk < 0 || chunk >= static_cast<int>(backwards_.size()) ||
      ++backwards_[static_cast<size_t>(chunk)] != microbatches_) {
    return {};
  }
  return [this, submit = std::move(submit)](size_t offset, size_t count) {
    if (HoldsTiedWte(offset, count)) {
      deferred_.push_back({offset, count});
    } else {
      submit(offset, count);
    }
  };
}

void ShardZero::BeginRound(int microbatches, bool forward_only) {
  if (params_) params_->BeginRound(microbatches * 2 + (forward_only ? 1 : 0));
  if (forward_only) return;
  rounds_.Begin(microbatches);
  grads_->Begin();
}

GradReadyFn ShardZero::BackwardReady(int chunk, std::span<const float> grads) {
  return rounds_.BackwardReady(chunk, [this, grads](size_t offset, size_t count) {
    grads_->Submit(grads.data() + offset, offset, count);
  });
}

Result<void> ShardZero::ReduceDataShards(std::span<const float> grads) {
  for (const ShardGradRounds::Piece& d : rounds_.TakeDeferred()) {
    grads_->Submit(grads.data() + d.offset, d.offset, d.count);
  }
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
