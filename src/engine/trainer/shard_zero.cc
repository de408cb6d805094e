#include "engine/trainer/shard_zero.h"

#include <algorithm>
#include <cstring>

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
  // wte's slices that another stage holds a copy of: the embedding chunk's, and a head
  // chunk's own copy. A chunk that holds both hands its wte over in row chunks instead.
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    const ShardChunkPieces p = ShardParamPieces(layout, static_cast<int>(c));
    if (p.wte.size() > 0 && p.head_wte.size() > 0) continue;
    for (const ShardPiece& w : {p.wte, p.head_wte}) {
      if (w.size() > 0 && !z->TiedAt(w.begin)) z->tied_.push_back({w.begin, std::vector<float>(w.size())});
    }
  }
  // Every other piece goes through ShardedGradients (and wte's slices in row chunks).
  z->max_piece_ = MaxShardGradPiece(layout);
  z->grads_ = std::make_unique<ShardedGradients>(data, partition, z->max_piece_, /*overlap=*/true);
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

ShardZero::Tied* ShardZero::TiedAt(size_t offset) {
  for (Tied& t : tied_) {
    if (t.offset == offset) return &t;
  }
  return nullptr;
}

void ShardZero::BeginRound(int microbatches, bool forward_only) {
  if (params_) params_->BeginRound(microbatches * 2 + (forward_only ? 1 : 0));
  if (forward_only) return;
  // Every micro-batch reports each piece but wte's slices, which are reduced once.
  size_t tied = 0;
  for (const Tied& t : tied_) tied += t.grads.size();
  grads_->Begin(static_cast<size_t>(microbatches) * (partition_.total - tied) + tied);
}

void ShardZero::ZeroGrad() {
  grads_->ZeroShard();
  for (Tied& t : tied_) std::fill(t.grads.begin(), t.grads.end(), 0.0f);
}

float* ShardZero::Acquire(size_t offset, size_t count) {
  if (Tied* t = TiedAt(offset)) {
    if (count == t->grads.size()) return t->grads.data();  // accumulates over the step
  }
  float* piece = grads_->Acquire(offset, count);
  std::memset(piece, 0, count * sizeof(float));
  return piece;
}

void ShardZero::Done(size_t offset, size_t count) {
  if (Tied* t = TiedAt(offset); t && count == t->grads.size()) return;
  grads_->Done(offset, count);
}

std::span<float> ShardZero::tied_grads(size_t offset, size_t count) {
  Tied* t = TiedAt(offset);
  if (!t || t->grads.size() != count) return {};
  return t->grads;
}

Result<void> ShardZero::ReduceDataShards() {
  const size_t C = static_cast<size_t>(layout_.spec.config.n_embd);
  const size_t rows = std::max<size_t>(1, max_piece_ / C);
  for (const Tied& t : tied_) {
    for (size_t lo = 0; lo < t.grads.size(); lo += rows * C) {
      const size_t n = std::min(rows * C, t.grads.size() - lo);
      grads_->Submit(t.grads.data() + lo, t.offset + lo, n);
    }
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
  size_t tied = 0;
  for (const Tied& t : tied_) tied += t.grads.size() * sizeof(float);
  return grads_->scratch_bytes() + tied + (params_ ? params_->gather_bytes() : 0);
}

}  // namespace cohort::engine
