// GatheredParams: ZeRO-3's parameter memory (Rajbhandari et al., section 5.3). A rank keeps
// only its shard of the parameters (ZeroPartition), persistently; the model
// (GptModel::SetParamSource) asks for each piece just before it computes with it (the
// embeddings, a layer's block, ln_f, the head: gpt.h ParamSource), and the piece is
// all-gathered from every rank's part of it into one buffer, which the next piece reuses
// (the piece is freed after use). AdamW steps the shard in place (ZeroOptimizer::
// StepOwnShard): nothing is all-gathered after the step.
//
// Memory, counted where allocated: the shard, 4·size(r) bytes, and the gather buffer of
// max_piece floats (the largest piece: the embeddings, wte and wpe).
//
// Every rank's model asks for the same pieces in the same order (the order depends on the
// config only), so the all-gathers match across ranks. The prefetch of the next piece on a
// communication thread is not built yet: each gather runs on the training thread. A
// communicator error is kept (the model computes on whatever the buffer holds) and returned
// by TakeError, which the caller checks after each Forward and backward pass.
//
// Threads: the training thread only; the communicator is the data-parallel group's.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/model/gpt.h"
#include "engine/parallel/zero.h"

namespace cohort::engine {

class GatheredParams final : public ParamSource {
 public:
  // Keeps this rank's shard of `whole` (all the parameters); `comm` is the data-parallel
  // group (partition.ranks == comm.size()) and must outlive this object.
  GatheredParams(comm::Communicator& comm, const ZeroPartition& partition,
                 std::span<const float> whole, size_t max_piece);

  // ParamSource.
  const float* Gather(size_t offset, size_t count) override;
  void Release(size_t offset, size_t count) override;
  // The first error since the last call (a communicator's, or kInternal for a piece over
  // max_piece or a Gather without a Release).
  Result<void> TakeError();

  // This rank's shard: parameters [partition.begin(rank), partition.end(rank)).
  std::span<float> shard() { return shard_; }
  // Every parameter, all-gathered into a new buffer (checkpoints by any layout, export):
  // a collective.
  Result<std::vector<float>> GatherAll();
  size_t gather_bytes() const { return buffer_.size() * sizeof(float); }

 private:
  comm::Communicator& comm_;
  const ZeroPartition partition_;
  const int rank_;
  std::vector<float> shard_;
  std::vector<float> buffer_;  // the gathered piece
  bool held_ = false;
  Result<void> status_;
};

}  // namespace cohort::engine
