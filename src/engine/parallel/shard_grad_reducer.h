// ShardGradReducer: the gradient reductions of one rank of a model split over ranks (tensor
// and/or pipeline parallelism, trainer/parallel_train_model.cc) in a step: the tied
// embedding's two copies (wte on the first stage, the output head's copy on the last) summed
// over the embedding group, as Megatron does, and every gradient averaged over the data-
// parallel group.
//
// Overlap (Megatron's overlap_grad_reduce, PyTorch DDP's buckets). With `overlap` and a
// data-parallel group, a DdpReducer (ddp.h) averages the gradient bucket by bucket on its
// communication thread while the backward passes go on: the model's last micro-batch reports
// each piece of a chunk's gradient as its Backward finishes it (Ready; ShardGradPieces order,
// gpt_shard_layout.h), and a bucket is issued once all of it is reported, buckets in a fixed
// order (from the end of the buffer) so that every rank of the group issues the same
// collectives. The buckets cover the buffer except the tied copy, which needs its sum over the
// embedding group first and is final on the first stage only at the end of the step: the tied
// range must lie at one end of the buffer (wte is the first tensor of the first stage, the
// head's copy the last of the last stage). Finish waits for the buckets, then sums the tied
// copy over the embedding group and averages it over the data group. Without overlap, Finish
// does it all after the backward: the tied sum, then one average of the whole buffer.
//
// Numbers. Every element is averaged by one all-reduce over the same ranks either way; an
// all-reduce's element is the same sum whatever the call's other elements when the group has
// two ranks (a + b = b + a, then a division by 2), so overlap gives the bits of the reduction
// after the step for data 2 (tested). With more ranks, the backends' algorithms (gloo's ring,
// nccl's ring or tree) may order an element's additions by its position in the call, so the
// two can differ in the last bits of a float sum.
//
// Memory: `grads` may be device memory (nccl); the reducer never dereferences it. A device's
// backward reports pieces when their kernels are queued: `wait_ready` blocks until a range is
// written (the model's events), on the communication thread before each bucket's collective,
// and `wait_all` (Finish's argument) before the tied sum.
//
// `reduced` (optional) hears each bucket after its average, with its range of `grads`, on the
// communication thread (DdpReducer::ReducedFn); the tied copy and, without overlap, the whole
// buffer are averaged in Finish and are not reported.
//
// Threads: the training thread calls everything; the data-parallel communicator belongs to the
// communication thread between Begin and Finish (the caller must not use it then).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/ddp.h"

namespace cohort::engine {

class ShardGradReducer {
 public:
  // `grads`: the rank's gradient buffer (must outlive the reducer). `tied`: the tied copy's
  // range in it (count 0 without an embedding group). `embedding`, `data`: the groups (null
  // where there is none; both must outlive the reducer). kInvalidArgument if `tied` lies
  // outside the buffer, or, with overlap and a data group, at neither end of it.
  static Result<std::unique_ptr<ShardGradReducer>> Create(std::span<float> grads,
                                                          ShardGradPiece tied,
                                                          comm::Communicator* embedding,
                                                          comm::Communicator* data, bool overlap,
                                                          size_t bucket_bytes,
                                                          DdpReducer::WaitReadyFn wait_ready,
                                                          DdpReducer::ReducedFn reduced = {});
  ~ShardGradReducer();

  // True when Ready must be called (a data group and overlap).
  bool overlaps() const { return ddp_ != nullptr; }
  // Starts a step (before its first backward).
  void Begin();
  // grads[offset, offset + count) is final for this step (the last micro-batch's Backward
  // wrote it, or queued its writes: see wait_ready). Each element once per step; the tied
  // copy's range is ignored here.
  void Ready(size_t offset, size_t count);
  // After the step's last backward: waits for the buckets, then `wait_all` (every gradient in
  // memory), the tied copy's sum and the remaining average. The first error (a bucket's
  // collective, kFailedPrecondition for elements never reported, the sum's).
  Result<void> Finish(const std::function<Result<void>()>& wait_all);
  // After a failed step: lets the buckets already issued drain (nothing else is reduced).
  void Abandon();

  // The data-parallel buckets (0 without overlap), and how many of them the last step
  // issued before the last piece of the gradient was reported: the buckets whose reduction
  // could run beside the rest of the backward (all but those the last piece completes).
  size_t buckets() const { return ddp_ ? ddp_->num_buckets() : 0; }
  size_t overlapped_buckets() const { return overlapped_; }

 private:
  ShardGradReducer(std::span<float> grads, ShardGradPiece tied, comm::Communicator* embedding,
                   comm::Communicator* data);

  std::span<float> grads_;
  ShardGradPiece tied_;
  comm::Communicator* embedding_;
  comm::Communicator* data_;
  size_t lo_ = 0, hi_ = 0;  // the buckets' range: the buffer without the tied copy
  std::unique_ptr<DdpReducer> ddp_;  // over grads_[lo_, hi_), with overlap
  size_t overlapped_ = 0;            // buckets issued before the step's latest Ready
};

}  // namespace cohort::engine
