// ShardEngine: what differs between training one rank's shard of a model split over ranks
// (tensor and pipeline parallelism) on the CPU and on a CUDA device, under the one step
// logic of trainer/parallel_train_model.cc (the pipeline runner, the tied embedding's sum,
// the data-parallel average, clipping over the model-parallel group, loss and bubble to
// every stage, checkpoints by range, evaluation, sampling, export). Three things differ:
//   the shard model   GptShardModel (gpt_shard.h) or GptShardCudaModel (gpt_shard_cuda.h),
//                     driven one (chunk, micro-batch slot) at a time; its pipeline messages
//                     live in message_memory(): host memory for the CPU, device memory for
//                     CUDA (sent device to device), or host memory that the CUDA engine
//                     stages through device buffers (MakeCudaShardEngine's host_messages);
//   where the state   host memory, or device memory: grads() is the gradient buffer where it
//   lives             lives, and the step's gradient collectives run on it over communicators
//                     that reach that memory (gloo on the host; nccl on a GPU, or gloo over
//                     the CPU emulator's host-backed device memory). Initial parameters,
//                     checkpoint state and export cross in host memory (SetParams,
//                     StateOnHost, Restore);
//   the optimizer     AdamW or ZeRO 1-3 (parallel/zero.h) on the host; CudaAdamW
//                     (model/cuda_adamw.h, the single-device CUDA model's fused update) over
//                     the shard's float32 master parameters, then the bf16 copy refreshed
//                     (ZeRO 1-2: over the data rank's part, the parts all-gathered; ZeRO-3:
//                     the rank's part only, the model reading each piece gathered over the
//                     data group, cuda_shard_engine.cc); with `parallel.offload` AdamW
//                     and the float32 master of the data rank's part on the host instead
//                     (HostShardAdamW, host_shard_adamw.h), optimizer+params the bf16 part
//                     too.
// Both clip with the global norm the caller computed (the norm a single rank computes).
//
// Threads: the training thread calls everything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/gpt_shard.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/optim/adamw.h"
#include "engine/parallel/ddp.h"
#include "engine/parallel/pipeline_messages.h"
#include "engine/parallel/tensor_parallel.h"
#include "engine/parallel/zero.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {

class ShardEngine {
 public:
  virtual ~ShardEngine() = default;

  virtual const GptShardLayout& layout() const = 0;

  // GptShardModel's contract (gpt_shard.h): stashes per (chunk, slot); the messages
  // (input, output, doutput, dinput) in message_memory(), read and written when the call
  // returns. Backward's `ready` (optional) gets each piece of the chunk's gradient as the
  // call finishes it (ShardGradPieces); on a device, once its kernels are queued: wait with
  // grad_wait() before reading it from another thread.
  virtual Result<float> Forward(int chunk, int slot, const MicrobatchTokens& batch,
                                const float* input, float* output) = 0;
  virtual Result<void> Backward(int chunk, int slot, float loss_scale, const float* doutput,
                                float* dinput, const GradReadyFn& ready) = 0;
  // Where the pipeline's messages live (the links allocate their buffers there).
  virtual MessageMemory& message_memory() = 0;
  virtual void Release(int chunk, int slot) = 0;
  virtual Result<std::vector<float>> Logits(int chunk, int slot, int position) = 0;
  virtual size_t activation_bytes() const = 0;
  virtual size_t peak_activation_bytes() const = 0;
  virtual void ResetPeak() = 0;

  // A round of the pipeline starts: a training step of `microbatches` (after ZeroGrad), or an
  // evaluation or sampling pass (`forward_only`). ZeRO-3's prefetch keys its record of the
  // piece order by it; ZeRO-2 and 3 learn which backward is each chunk's last.
  virtual void BeginRound(int microbatches, bool forward_only) {
    (void)microbatches;
    (void)forward_only;
  }

  virtual Result<void> ZeroGrad() = 0;
  // The gradients (layout().total floats) where they live: host or device memory.
  virtual std::span<float> grads() = 0;
  // Returns once the backward passes launched so far have written grads() (a stream
  // synchronisation on CUDA): call before a collective reads them.
  virtual Result<void> WaitGrads() = 0;
  // ZeRO-2 and 3 (zero_grads.h): the engine reduce-scatters each piece of the gradients over
  // the data-parallel group into its shard as the step's last backward of its chunk finishes
  // it, except wte's slices, whose tied copies the caller sums over the embedding group
  // first. Then ReduceDataShards (a collective of the data group) reduces those and waits
  // for every piece: the gradient shard holds the shard of the averaged gradient. An engine
  // that does not (false) leaves the data-parallel average of grads() to the caller.
  virtual bool reduces_data_shards() const { return false; }
  virtual Result<void> ReduceDataShards() { return {}; }
  // Where the tied embedding copy `tied` (a range of the shard buffer) accumulates when the
  // engine holds no whole gradient buffer (ZeRO-2 and 3: a buffer of the copy alone, which
  // the caller sums over the embedding group before ReduceDataShards); empty: in grads().
  virtual std::span<float> tied_grads(const ShardGradPiece& tied) {
    (void)tied;
    return {};
  }
  // What DdpReducer runs before a bucket's collective (any thread): blocks until the pieces
  // Backward's `ready` reported in that range are in memory; empty where they are once
  // reported (host memory).
  virtual DdpReducer::WaitReadyFn grad_wait() { return {}; }
  // What DdpReducer runs after a bucket's average (the reducer's thread), with the bucket's
  // range of grads(): its values are final there. The CUDA optimizer offload of stages 0 and
  // 1 copies the bucket's part of the optimizer's range to the host here, while the backward
  // goes on; empty elsewhere.
  virtual DdpReducer::ReducedFn grad_reduced() { return {}; }
  // TrainModel::offload_copies: the optimizer offload of stages 0 and 1 (what the last
  // step's buckets brought through grad_reduced, of the part).
  virtual TrainModel::OffloadCopies offload_copies() const { return {}; }
  // Σ g² (in double) over the tensors that count in the norm (ShardTensor::counts_in_norm):
  // with ZeRO-2 and 3, over every data rank's gradient shard (summed over the data group:
  // a collective of it).
  virtual Result<double> SquaredGradNorm() = 0;
  // Scales the gradients by ClipToNorm's factor for the global `norm` (none when max_norm
  // <= 0) and applies one AdamW step with `lr` (to the optimizer's part of the shard under
  // ZeRO); the next Forward reads the new parameters.
  virtual Result<void> Step(double norm, double max_norm, float lr) = 0;

  // Host copies of the state, valid until the next call on the engine: the shard's
  // parameters [params_begin, params_begin + params.size()) (the whole shard, or ZeRO-3's
  // part of it), the AdamW moments of the optimizer's part [opt_begin, opt_begin + m.size())
  // of the shard, and its step count.
  struct HostState {
    std::span<const float> params, m, v;
    size_t opt_begin = 0;
    int64_t t = 0;
    size_t params_begin = 0;
  };
  virtual Result<HostState> StateOnHost() = 0;
  // The whole shard's parameters on the host (layout().total; ZeRO-3 gathers them over the
  // data group: a collective of it).
  virtual Result<std::vector<float>> WholeParams() {
    const HostState st = COHORT_TRY(StateOnHost());
    return std::vector<float>(st.params.begin(), st.params.end());
  }
  // Sets the parameters (host, layout().total floats).
  virtual Result<void> SetParams(std::span<const float> params) = 0;
  // The part of the shard's parameters this rank holds ([0, layout().total), except under
  // ZeRO-3: its data rank's part), and SetParams of that part alone (part.size() floats), so
  // that a sharded init generates nothing else.
  virtual ShardPiece param_part() const { return {0, layout().total}; }
  virtual Result<void> SetParamPart(std::span<const float> part) { return SetParams(part); }
  // Sets the parameters and the optimizer's part of `m` and `v` (each layout().total floats,
  // host) and the step count. The engine's errors (sizes, t < 0: kInvalidArgument).
  virtual Result<void> Restore(std::span<const float> params, std::span<const float> m,
                               std::span<const float> v, int64_t t) = 0;

  // Resume by range (TrainModel::RestoreRequest): the logical runs (LogicalRunsOf) of the
  // part of the shard's parameters this rank holds and of the optimizer's part of the
  // moments, into host memory; FinishRestore takes them (Restore) with step count t. By
  // default they are read into host buffers of the whole shard, which FinishRestore hands to
  // Restore and frees (an engine without ZeRO: the CUDA shard); the CPU engine reads into
  // its own memory.
  virtual CheckpointReadRequest RestoreRequest() {
    const size_t n = layout().total;
    restore_.params.resize(n);
    restore_.m.resize(n);
    restore_.v.resize(n);
    return {LogicalRunsOf(layout(), 0, n, restore_.params.data()),
            LogicalRunsOf(layout(), 0, n, restore_.m.data()),
            LogicalRunsOf(layout(), 0, n, restore_.v.data())};
  }
  virtual Result<void> FinishRestore(int64_t t) {
    auto restored = Restore(restore_.params, restore_.m, restore_.v, t);
    DropRestore();
    return restored;
  }
  virtual void DropRestore() { restore_ = {}; }

  virtual TrainModel::ModelStateBytes state_bytes() const = 0;
  virtual std::optional<TrainModel::GatherStats> gather_stats() const { return std::nullopt; }
  virtual const ZeroOptimizer* zero() const { return nullptr; }
  // The ZeRO stage and the data ranks it shards over (stage 0: none): zero()'s on the CPU,
  // the CUDA engine's own.
  virtual TrainModel::ZeroShape zero_shape() const {
    if (const ZeroOptimizer* z = zero()) return {z->stage(), z->partition().ranks, false};
    return {};
  }
  // What this rank's state takes, for the log ("1.2 MB of ...").
  virtual std::string DescribeMemory() const = 0;

 private:
  struct Staged {
    std::vector<float> params, m, v;
  };
  Staged restore_;  // the default RestoreRequest's buffers, until FinishRestore
};

// An engine over shard model `Model` (GptShardModel or GptShardCudaModel): the model's own
// contract forwarded as it is.
template <typename Model>
class ShardEngineOver : public ShardEngine {
 public:
  const GptShardLayout& layout() const override { return shard_->layout(); }
  Result<float> Forward(int chunk, int slot, const MicrobatchTokens& batch, const float* input,
                        float* output) override {
    return shard_->Forward(chunk, slot, batch, input, output);
  }
  Result<void> Backward(int chunk, int slot, float loss_scale, const float* doutput,
                        float* dinput, const GradReadyFn& ready) override {
    return shard_->Backward(chunk, slot, loss_scale, doutput, dinput, ready);
  }
  void Release(int chunk, int slot) override { shard_->Release(chunk, slot); }
  Result<std::vector<float>> Logits(int chunk, int slot, int position) override {
    return shard_->Logits(chunk, slot, position);
  }
  size_t activation_bytes() const override { return shard_->activation_bytes(); }
  size_t peak_activation_bytes() const override { return shard_->peak_activation_bytes(); }
  void ResetPeak() override { shard_->ResetPeak(); }

 protected:
  explicit ShardEngineOver(std::unique_ptr<Model> shard) : shard_(std::move(shard)) {}
  std::unique_ptr<Model> shard_;
};

// The decay ranges of a shard's tensors (one per tensor: matrices and embeddings decay).
inline std::vector<DecayRange> ShardDecayRanges(const GptShardLayout& layout) {
  std::vector<DecayRange> ranges;
  for (const ShardTensor& t : layout.tensors) {
    ranges.push_back({t.local.offset, t.local.numel, t.local.weight_decay});
  }
  return ranges;
}

// The CPU shard (float32, kernels/cpu): GptShardModel and AdamW over the whole shard, or ZeRO
// `zero_stage` 1-3 over `data` (the data-parallel group of this tensor/pipeline position;
// null for one replica, which needs no ZeRO; zero_layouts.h). `tp` and `data` must outlive
// the engine. `prefetch`: ZeRO-3 gathers the next piece while the model computes.
Result<std::unique_ptr<ShardEngine>> MakeCpuShardEngine(const ShardSpec& spec,
                                                        TensorParallelGroup& tp,
                                                        const AdamWConfig& adamw,
                                                        comm::Communicator* data,
                                                        int zero_stage, bool prefetch = false);

// The CUDA shard on the current device: GptShardCudaModel (float32 master parameters and
// gradients, bf16 copy and activations) with CudaAdamW. `tp`'s communicator must reach
// device memory; it must outlive the engine. Pipeline messages are device memory, unless
// `host_messages`: then they are host memory, copied to and from device buffers around each
// call (the path before device-to-device sends; the same bits). `zero_stage` 1 to 3: ZeRO
// over `data` (the data group of this position, reaching device memory; null or one rank:
// no ZeRO, except for the parameter offload), as cuda_shard_engine.cc describes; kInvalidArgument for another. `offload`
// (`parallel.offload: optimizer`; with zero_stage 0, ZeRO-1's): AdamW over the data rank's
// part on the host (HostShardAdamW); `offload_params` (optimizer+params, zero_stage 3 and
// offload only, else kInvalidArgument): the bf16 part in pinned host memory too (with one
// replica, stage 3's pieces over the replica itself). kUnsatisfiable in a build without
// CUDA; the model's and the allocation's errors otherwise.
Result<std::unique_ptr<ShardEngine>> MakeCudaShardEngine(const ShardSpec& spec,
                                                         TensorParallelGroup& tp,
                                                         const AdamWConfig& adamw,
                                                         bool host_messages = false,
                                                         comm::Communicator* data = nullptr,
                                                         int zero_stage = 0, bool offload = false,
                                                         bool offload_params = false);

}  // namespace cohort::engine
