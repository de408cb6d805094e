// ShardZero: ZeRO stages 2 and 3 inside a tensor/pipeline layout, on the CPU. Each (tensor,
// pipeline) position's shard buffer (gpt_shard_layout.h) is cut over the position's
// data-parallel group (ZeroPartition); the pieces are parallel/zero_grads.h's and
// zero_params.h's, here driven by the shard model (gpt_shard.h) instead of GptModel.
//
// Gradients. The rank holds no whole gradient buffer for its shard: the shard model writes
// each Backward's gradient piece by piece into this object (it is the model's GradSink,
// GptShardModel::SetGradSink). A block, ln_f or wpe goes into one of ShardedGradients' two
// piece buffers (zeroed), whose thread reduce-scatters it (average over the data group) and
// adds this rank's part into its gradient shard while the backward goes on: every micro-batch
// is reduced this way, so gradient accumulation accumulates into the shard (DeepSpeed's
// choice, and the data-parallel model's), whatever order the pipeline's schedule runs the
// micro-batches in. wte's slice goes in row chunks like the other pieces where one chunk holds
// both the embedding and the head (pipeline 1); with a pipeline, the first stage's wte and the
// last stage's tied copy are the exception: they accumulate over the step in a buffer of the
// slice each (tied_grads), because the two copies need their sum over the embedding group,
// which the two stages reach at different times, before the data group's average;
// ReduceDataShards reduce-scatters them in row chunks after that sum and waits for every
// piece.
//
// Parameters (stage 3). The model reads each piece through a GatheredParams over a second
// communicator of the data group (the gradients' thread owns the first), with the next
// piece prefetched when asked: the model holds its shard of the parameters only.
//
// The norm: each rank's Σ g² over its gradient shard's elements that count
// (ShardTensor::counts_in_norm), summed over the data group in double (SumOverRanks); the
// caller adds the model group's, giving the norm one rank computes.
//
// ShardGradRounds serves the CUDA shard engine's ZeRO-2 (cuda_shard_engine.cc, with
// ShardedDeviceGrads in caller memory, cuda_zero_pieces.h), whose model accumulates into a
// whole gradient buffer: which backward of a step is each chunk's last, and which of its
// pieces are the tied wte copies that wait for the embedding group's sum. ShardZero itself
// reduces every micro-batch and needs no rounds.
//
// Memory: the gradient shard (4·size(r) bytes), and apart, as scratch, two piece buffers of
// MaxShardGradPiece and a receive buffer (zero_grads.h), the tied wte slices (pipeline's
// first and last stage), and stage 3's gathered pieces (zero_params.h).
//
// Threads: the training thread calls everything; the two helpers run their own threads
// (zero_grads.h, zero_params.h).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/zero.h"
#include "engine/parallel/zero_grads.h"
#include "engine/parallel/zero_params.h"

namespace cohort::engine {

class ShardGradRounds {
 public:
  explicit ShardGradRounds(const GptShardLayout& layout)
      : layout_(layout), backwards_(layout.chunks.size(), 0) {}

  // A training step of `microbatches` starts: the backward counts and the deferred pieces
  // are reset.
  void Begin(int microbatches);
  // The function the model's Backward of `chunk` reports to: empty unless this is the
  // chunk's last backward of the step; then each piece goes to `submit` as reported, except
  // those holding a tied wte copy, kept for TakeDeferred.
  using SubmitFn = std::function<void(size_t offset, size_t count)>;
  GradReadyFn BackwardReady(int chunk, SubmitFn submit);
  // The tied wte pieces of this step, in report order (cleared).
  struct Piece {
    size_t offset, count;
  };
  std::vector<Piece> TakeDeferred() { return std::exchange(deferred_, {}); }

 private:
  // Whether [offset, offset + count) overlaps a tied wte copy (the embedding's or the head's).
  bool HoldsTiedWte(size_t offset, size_t count) const;

  const GptShardLayout& layout_;
  int microbatches_ = 0;
  std::vector<int> backwards_;  // per chunk: backward passes this step
  std::vector<Piece> deferred_;  // wte slices of this step, in report order
};

class ShardZero final : public GradSink {
 public:
  // Stage 2 or 3 over `data` (>= 2 ranks; it must outlive this object) for a shard of
  // `layout`; `partition` is the ZeroOptimizer's. Stage 3 splits a second communicator from
  // `data` (a collective of the data group). kInvalidArgument for another stage.
  static Result<std::unique_ptr<ShardZero>> Create(const GptShardLayout& layout,
                                                   comm::Communicator& data,
                                                   const ZeroPartition& partition, int stage,
                                                   bool prefetch);

  // A round starts (ShardEngine::BeginRound): a training step's starts the gradient round
  // of `microbatches` backward passes per chunk.
  void BeginRound(int microbatches, bool forward_only);
  // The step's first micro-batch: the gradient shard and wte's slices to 0.
  void ZeroGrad();
  // GradSink (the shard model's Backward).
  float* Acquire(size_t offset, size_t count) override;
  void Done(size_t offset, size_t count) override;
  // The buffer of the tied wte slice at `offset` of the shard buffer (`count` floats), which
  // the caller sums over the embedding group before ReduceDataShards; empty if none is there.
  std::span<float> tied_grads(size_t offset, size_t count);
  // wte's slices (after the embedding group's sum), then waits for every piece: the first
  // error of the round (zero_grads.h Finish).
  Result<void> ReduceDataShards();
  // Σ g² of the counting elements over every data rank's shard (a collective of the group).
  Result<double> SquaredNorm();

  std::span<float> grad_shard() { return grads_->shard(); }
  GatheredParams* params() { return params_.get(); }  // stage 3; null for stage 2
  // Floats of this rank's shard (of the gradients; of the parameters under stage 3).
  size_t shard_floats() const { return partition_.size(data_.rank()); }
  bool shards_params() const { return params_ != nullptr; }
  size_t scratch_bytes() const;

 private:
  ShardZero(const GptShardLayout& layout, comm::Communicator& data, const ZeroPartition& p)
      : layout_(layout), data_(data), partition_(p) {}
  // wte's slice starting at `offset`, or null.
  struct Tied {
    size_t offset = 0;
    std::vector<float> grads;
  };
  Tied* TiedAt(size_t offset);

  const GptShardLayout& layout_;
  comm::Communicator& data_;
  const ZeroPartition partition_;
  size_t max_piece_ = 1;  // ShardedGradients' piece limit
  std::unique_ptr<ShardedGradients> grads_;
  std::unique_ptr<comm::Communicator> gather_comm_;  // stage 3: the gathers' own
  std::unique_ptr<GatheredParams> params_;           // stage 3
  std::vector<Tied> tied_;  // wte's slices: the embedding's and the head's copy
};

}  // namespace cohort::engine
