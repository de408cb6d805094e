// ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models") inside the data-parallel group: the flat parameter buffer is cut into one
// contiguous shard per data rank (ZeroPartition), and each rank keeps the AdamW moments of
// its shard only and updates only its shard of the parameters (ZeroOptimizer):
//
//   stage 1  gradients all-reduced as in DDP (DdpReducer); each rank clips and steps its
//            shard, then the parameters are all-gathered;
//   stage 2  each rank holds only its shard of the gradients (zero_grads.h): the backward
//            pass writes each piece into bucket-sized scratch that is reduce-scattered into
//            the shards as soon as it is done (every micro-batch: accumulation accumulates
//            into the shard), then as stage 1 (StepShard).
//
// Clipping uses the global norm over all shards (each rank's sum of squares, all-gathered as
// a float pair and summed in double): the norm a single rank computes, to ~1e-12.
// AdamW is elementwise, so a shard's update is exactly the replicated one; losses equal DDP's
// up to the clip factor's last bits.
//
// The parallel logic (partition, norm, all-gather) is written once against spans and a
// Communicator; the update underneath is AdamW's (optim/adamw.h). Inside a tensor/pipeline
// layout the "buffer" is the rank's shard and the group its data-parallel group (stage 1,
// StepWithNorm; stages 2 and 3, StepShardWithNorm and StepOwnShardWithNorm, with the norm
// the caller summed over the model group and the data shards). Stage 3 also shards the parameters (zero_params.h: gathered per piece as the
// model computes, StepOwnShard steps the shard in place). The CUDA model's stages 1 and 2 and
// the optimizer offload (trainer/cuda_zero.h) use the partition and SumOverRanks from here.
//
// Threads: the training thread; the communicator is the data-parallel group's, idle while
// these run.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/optim/adamw.h"

namespace cohort::engine {

// The shards of `total` values over `ranks`: rank r holds [total·r/ranks, total·(r+1)/ranks).
// (The checkpoint's per-replica share uses the same split.)
struct ZeroPartition {
  size_t total = 0;
  int ranks = 1;
  size_t begin(int r) const { return total * static_cast<size_t>(r) / static_cast<size_t>(ranks); }
  size_t end(int r) const { return begin(r + 1); }
  size_t size(int r) const { return end(r) - begin(r); }
  // size(r) for every rank (the counts of ReduceScatter and AllGather).
  std::vector<size_t> counts() const;
  // How many of [lo, hi) fall in each rank's shard.
  std::vector<size_t> counts_in(size_t lo, size_t hi) const;
};

// "ZeRO-2 over 4 ranks" / "no ZeRO" for stage 0.
std::string ZeroDescription(int stage, int ranks);

// The sum of `local` over every rank of `comm`, in double and the same on every rank: each
// rank's value as a (float, float remainder) pair, all-gathered and added in rank order (a
// float32 all-reduce would round the sum). A collective; for gradient norms' squares.
Result<double> SumOverRanks(comm::Communicator& comm, double local);
// As above through `all_gather` over `ranks` ranks (counts[r] floats from rank r into recv,
// in rank order): for a group whose collectives cannot reach host memory (nccl; the CUDA
// model stages the pairs through device memory).
using HostAllGather =
    std::function<Result<void>(const float* send, float* recv, const std::vector<size_t>& counts)>;
Result<double> SumOverRanks(const HostAllGather& all_gather, int ranks, double local);

class ZeroOptimizer {
 public:
  // AdamW over this rank's shard of a buffer of `total` parameters whose tensors are
  // `tensors` (DecayRanges over [0, total), as for AdamW::Create). `comm` is the
  // data-parallel group; it must outlive the optimizer.
  static Result<ZeroOptimizer> Create(comm::Communicator& comm, int stage, size_t total,
                                      const std::vector<DecayRange>& tensors,
                                      const AdamWConfig& config);

  // Clips to max_norm over all shards (<= 0: no clipping), steps this rank's shard of
  // `params` with its shard of `grads` (already averaged over the group: all-reduced in
  // stage 1, reduce-scattered in stage 2), and all-gathers `params`. Returns the global norm
  // before clipping. The communicator's errors.
  Result<double> Step(std::span<float> params, std::span<float> grads, double max_norm, float lr);
  // As Step with only this rank's shard of the averaged gradient (`shard`: partition().size
  // of this rank, ShardedGradients): stage 2's gradient memory.
  Result<double> StepShard(std::span<float> params, std::span<float> shard, double max_norm,
                           float lr);
  // Stage 3: clips and steps this rank's shard of the parameters in place (`my_params` and
  // `my_grads` both partition().size of this rank); nothing is all-gathered.
  Result<double> StepOwnShard(std::span<float> my_params, std::span<float> my_grads,
                              double max_norm, float lr);
  // As Step with the global norm computed by the caller (a tensor/pipeline shard's norm over
  // its model group, every data rank holding the whole averaged gradient: stage 1).
  Result<void> StepWithNorm(std::span<float> params, std::span<float> grads, double norm,
                            double max_norm, float lr);
  // Inside tensor/pipeline layouts, with the norm over the model group and the data shards
  // computed by the caller: stage 2 (StepShard's arguments; all-gathers `params`) and stage 3
  // (StepOwnShard's; nothing is all-gathered).
  Result<void> StepShardWithNorm(std::span<float> params, std::span<float> my_grads, double norm,
                                 double max_norm, float lr);
  Result<void> StepOwnShardWithNorm(std::span<float> my_params, std::span<float> my_grads,
                                    double norm, double max_norm, float lr);

  int stage() const { return stage_; }
  const ZeroPartition& partition() const { return partition_; }
  int rank() const { return rank_; }
  // This rank's shard: [shard_begin, shard_begin + m().size()).
  size_t shard_begin() const { return partition_.begin(rank_); }
  AdamW& adamw() { return adamw_; }

 private:
  // The global norm of the gradient over every rank's shard (a collective).
  Result<double> GlobalNorm(std::span<const float> my_grads);
  // StepShardWithNorm without the size checks (callers checked them).
  Result<void> StepAndGather(std::span<float> params, std::span<float> my_grads, double norm,
                             double max_norm, float lr);
  Result<void> CheckShardSizes(size_t params, size_t params_want, size_t grads) const;
  ZeroOptimizer(comm::Communicator& comm, int stage, ZeroPartition p, AdamW adamw)
      : comm_(&comm), stage_(stage), rank_(comm.rank()), partition_(p), adamw_(std::move(adamw)) {}
  comm::Communicator* comm_;
  int stage_;
  int rank_;
  ZeroPartition partition_;
  AdamW adamw_;
  std::vector<float> scratch_;  // this rank's updated shard, sent by the all-gather
};

}  // namespace cohort::engine
