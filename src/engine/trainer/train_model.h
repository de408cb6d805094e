// TrainModel: the model and optimizer one rank of `cohort train` trains, on the device the
// config names (train.device). "cpu": the float32 reference GptModel with AdamW and
// ClipGradNorm, everything in host memory. "cuda": GptCudaModel with GptCudaAdamW on this
// rank's GPU (bf16 activations, float32 master weights, gradients and optimizer state),
// parameters, gradients and moments in device memory. The training loop (trainer.cc) sees
// only this interface, so both devices share the data path, the schedule, the checkpoints
// (the same flat layout: a checkpoint written on one device resumes on the other), the log
// and data parallelism (DdpReducer over the gradients wherever they live).
//
// Collectives. A communicator moves host memory (gloo) or device memory (nccl), and the
// CUDA model always trains with nccl: the trainer's own collectives on host values (the
// resume header, the loss average) go through BroadcastHost/AllReduceHost, which stage
// them through device memory on CUDA (a CUDA model split over ranks sends them over its
// host communicator instead). Parameters and optimizer state are broadcast where they live.
//
// Models split over ranks (MakeParallelCpuTrainModel, MakeParallelCudaTrainModel: tensor and
// pipeline parallelism, one class over a ShardEngine per device, shard_engine.h) implement
// the same interface; they train whole steps (TrainMicrobatches) rather than
// single micro-batches, hold only their shard (num_params() is still the whole model's),
// and their checkpoint state, export and sampling are collectives (model_parallel()).
//
// Threads: the training thread calls everything; DdpReducer's thread calls the function
// grad_wait() returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/gpt.h"
#include "engine/optim/adamw.h"
#include "engine/parallel/ddp.h"
#include "engine/parallel/layout.h"
#include "engine/parallel/zero.h"
#include "engine/trainer/device_peak.h"

namespace cohort::engine {

class TrainModel {
 public:
  virtual ~TrainModel() = default;

  virtual const GptConfig& config() const = 0;
  virtual size_t num_params() const = 0;

  // As GptModel (gpt.h): gradients accumulate over Backward calls until ZeroGrad.
  virtual Result<void> ZeroGrad() = 0;
  virtual Result<float> Forward(std::span<const int32_t> tokens,
                                std::span<const int32_t> targets, int B, int T) = 0;
  virtual Result<void> Backward(float loss_scale, const GradReadyFn& ready) = 0;
  // Fills micro-batch `a` of a step: B·T input ids and B·T targets.
  using LoadMicrobatch =
      std::function<Result<void>(int a, std::span<int32_t> inputs, std::span<int32_t> targets)>;

  // One step's forward and backward passes over `count` micro-batches of B × T tokens:
  // zeroes the gradients, scales each micro-batch's loss by 1/count and leaves the
  // gradient of the mean loss, averaged over the data-parallel ranks, in grads(). Returns
  // the mean loss of this rank's micro-batches (of its replica, for a model split over
  // ranks: the same value on every rank of the replica). The default is the data-parallel
  // loop: Forward and Backward per micro-batch, `reducer` (may be null) all-reducing the
  // buckets during the last backward pass.
  virtual Result<double> TrainMicrobatches(int count, int B, int T, const LoadMicrobatch& load,
                                           DdpReducer* reducer);
  // That loop with the backward pass given: zeroes the gradients, then per micro-batch loads
  // it, runs Forward and `backward(scale, last)` (scale 1/count; `last`: the step's last
  // micro-batch). Returns the mean loss. For models whose last backward does more (a
  // reducer's buckets, ZeRO's final round, the offload's copies).
  using MicrobatchBackward = std::function<Result<void>(float scale, bool last)>;
  Result<double> MicrobatchLoop(int count, int B, int T, const LoadMicrobatch& load,
                                const MicrobatchBackward& backward);
  // The mean loss over `count` micro-batches, forward only (evaluation).
  virtual Result<double> EvalMicrobatches(int count, int B, int T, const LoadMicrobatch& load);

  // True when the model is split over ranks (tensor or pipeline parallelism): then
  // StateForCheckpoint, Export and NextTokenLogits are collectives that every rank calls
  // (rank 0 gets the result), and the model reduces its own gradients (the trainer makes
  // no DdpReducer).
  virtual bool model_parallel() const { return false; }
  // What the last training step of a model split over ranks measured (the log's bubble
  // and the benchmarks); nullopt for a model on one rank.
  struct ParallelStats {
    int pipeline = 1;
    double bubble = 0;           // measured: 1 − compute / span, averaged over the stages
    double theory = 0;           // the schedule's (p − 1) / (v·m + p − 1)
    std::string schedule;        // "1f1b"
    size_t peak_activation_bytes = 0;  // this rank: activations stashed at once, at most
    size_t microbatch_activation_bytes = 0;  // this rank: one micro-batch's, all its chunks
    size_t shard_floats = 0;     // this rank's parameters (and gradients, and each moment)
    // This rank's data-parallel gradient buckets (0 without overlap or data parallelism),
    // and how many the last step issued while its backward still had pieces to finish.
    size_t reduce_buckets = 0, reduce_buckets_overlapped = 0;
  };
  virtual std::optional<ParallelStats> parallel_stats() const { return std::nullopt; }

  // ZeRO (parallel/zero.h): the optimizer sharded over the data-parallel group, or null.
  virtual const ZeroOptimizer* zero() const { return nullptr; }
  // The ZeRO stage, the ranks its state is sharded over and whether the optimizer is
  // offloaded to host memory, for the log: zero()'s by default (stage 0 over 1 rank without
  // it); the CUDA model's own (cuda_zero.h).
  struct ZeroShape {
    int stage = 0;
    int ranks = 1;
    bool offload = false;
  };
  virtual ZeroShape zero_shape() const {
    if (const ZeroOptimizer* z = zero()) return {z->stage(), z->partition().ranks, false};
    return {};
  }
  // What the reducer calls after each bucket (DdpReducer::ReducedFn; the CUDA optimizer
  // offload's device -> host copy of the bucket's gradients in stage 1), or empty.
  virtual DdpReducer::ReducedFn grad_reduced() { return {}; }
  // The CUDA optimizer offload of stages 0 and 1 (this rank's gradient part, in values): how
  // many of them the last step brought to the host while its backward ran (the reducer's
  // buckets; on one rank the last micro-batch's pieces), of the part; the rest crossed at
  // the step. Zeros elsewhere.
  struct OffloadCopies {
    size_t during_backward = 0, part = 0;
  };
  virtual OffloadCopies offload_copies() const { return {}; }
  // The model states this rank holds, counted where the model allocates them (bytes), and
  // the scratch that ZeRO-2 adds for its gradient pieces (zero_grads.h), counted apart.
  struct ModelStateBytes {
    size_t params = 0, grads = 0, optimizer = 0;
    size_t scratch = 0;
    // Of all the above, the bytes in host memory (`parallel.offload` on CUDA: the offloaded
    // AdamW state, master copy, pinned gradient part and staging; 0 elsewhere, where the CPU
    // model's memory is all host memory and not counted here).
    size_t host = 0;
  };
  virtual ModelStateBytes model_state_bytes() = 0;
  // ZeRO-3's parameter gathers on this rank since the model was made (zero_params.h):
  // requests served by a prefetch, gathered on demand, the seconds the training thread
  // waited for them, the most bytes of gathered pieces held at once, and the piece buffers
  // allocated (the other gathers reused a kept one); nullopt without ZeRO-3.
  struct GatherStats {
    int64_t hits = 0, misses = 0;
    double wait_seconds = 0;
    size_t peak_gathered_bytes = 0;
    int64_t allocations = 0;
  };
  virtual std::optional<GatherStats> gather_stats() const { return std::nullopt; }
  // Parameter values this rank generated from the seed when it was made (GenerateInitialRuns'
  // count; 0 when they came from a whole model): a ZeRO-3 rank generates its part only.
  virtual size_t initial_values() const { return 0; }

  // Clips the gradients to max_norm (torch's clip_grad_norm_; <= 0: no clipping) and
  // applies one AdamW step with `lr`. Returns the gradient norm before clipping.
  virtual Result<double> ClipAndStep(double max_norm, float lr) = 0;

  // The gradient buffer DdpReducer averages (host or device memory, see DdpReducer) and
  // the wait it runs before each bucket (empty when reported gradients are already final).
  // Empty for ZeRO-2, which reduces its gradient pieces into its shard itself.
  virtual std::span<float> grads() = 0;
  virtual DdpReducer::WaitReadyFn grad_wait() = 0;

  // Collectives on host values through `comm` (root 0 for the broadcast).
  virtual Result<void> BroadcastHost(comm::Communicator& comm, void* data, size_t count,
                                     comm::DataType type) = 0;
  virtual Result<void> AllReduceHost(comm::Communicator& comm, float* data, size_t count,
                                     comm::ReduceOp op) = 0;

  // Resume by range (checkpoint.h LoadCheckpointRanges, every rank): the runs of the logical
  // arrays this rank holds, pointing into where the model keeps them (its parameters, or its
  // ZeRO-3 part of them; its AdamW moments, or its ZeRO part; a split model's shard slices)
  // or into host buffers of that size that FinishRestore uploads (CUDA), so that a rank
  // reads and holds nothing else. The outs stay valid until FinishRestore, which takes what
  // was read and sets AdamW's step count to `adam_t` (or DropRestore, when nothing was
  // read). The model's state is undefined between a failed read and a successful one.
  virtual CheckpointReadRequest RestoreRequest() = 0;
  virtual Result<void> FinishRestore(int64_t adam_t) = 0;
  virtual void DropRestore() {}
  // Resume from a whole checkpoint in memory on rank 0 (its buffers may be moved from; the
  // other ranks pass null), through the same request: rank 0 broadcasts each array over
  // `comm` (BroadcastHost) in chunks of kRestoreChunk values and every rank keeps the parts
  // its RestoreRequest asks for, then FinishRestore. Not the trainer's path (every rank
  // reads its own ranges): the tests' and benchmarks' in-memory reference for it.
  // kInvalidArgument when rank 0's arrays are not num_params() long.
  static constexpr size_t kRestoreChunk = 1024;  // fits the CUDA model's host staging
  Result<void> RestoreState(comm::Communicator* comm, Checkpoint* ckpt, int64_t adam_t);
  // Fresh start: every rank takes rank 0's initial parameters.
  virtual Result<void> BroadcastParams(comm::Communicator& comm) = 0;
  // Points view.params, adam_m, adam_v at host copies of the state and sets adam_t; the
  // spans stay valid until the next call on the model.
  virtual Result<void> StateForCheckpoint(CheckpointView& view) = 0;
  // What this rank writes into a checkpoint (SaveCheckpointRanges, every rank): the ranges
  // of the logical parameters and AdamW moments it owns, for data replica `replica` of
  // `replicas`. A model on one rank holds the whole state: replica r writes its r-th share
  // of each array (so the replicas write in parallel). A model split over ranks writes its
  // shard's slices (gpt_shard_layout.h CheckpointRuns), shared out among the replicas that
  // hold the same shard. The values stay valid until the next call on the model; *adam_t is
  // set.
  virtual Result<std::vector<CheckpointRange>> CheckpointRanges(int replica, int replicas,
                                                                int64_t* adam_t);

  // Sampling: runs the model on `window` (1 to max_window() ids) and returns the
  // vocab_size logits of its last position.
  virtual Result<std::vector<float>> NextTokenLogits(std::span<const int32_t> window) = 0;
  virtual int max_window() const = 0;

  // Writes the parameters as GPT-2 safetensors (checkpoint/gpt2_safetensors.h).
  virtual Result<void> Export(const std::string& path) = 0;
};

// The ranks of `comm` as a CheckpointGroup (checkpoint.h), through `model`'s host collectives
// (staged through device memory on CUDA): the group every rank of `cohort train` writes and
// reads its ranges in.
class TrainModelCheckpointGroup final : public CheckpointGroup {
 public:
  TrainModelCheckpointGroup(TrainModel& model, comm::Communicator& comm)
      : model_(model), comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  Result<void> Broadcast(std::span<int64_t> values) override {
    return model_.BroadcastHost(comm_, values.data(), values.size(), comm::DataType::kInt64);
  }
  Result<void> Max(std::span<float> values) override {
    return model_.AllReduceHost(comm_, values.data(), values.size(), comm::ReduceOp::kMax);
  }

 private:
  TrainModel& model_;
  comm::Communicator& comm_;
};

// The CPU reference: takes the (initialised) model.
Result<std::unique_ptr<TrainModel>> MakeCpuTrainModel(GptModel model, const AdamWConfig& adamw);

// The CPU reference with ZeRO stage 1, 2 or 3 over `data` (the data-parallel group, which must
// outlive the model): AdamW state for this rank's shard only (parallel/zero.h); with stage 2
// also the gradients (parallel/zero_grads.h: the model reduces them itself, grads() is empty);
// with stage 3 also the parameters (parallel/zero_params.h), the next piece's gather
// prefetched on a communicator split from `data` when `prefetch` (parallel.prefetch).
Result<std::unique_ptr<TrainModel>> MakeZeroCpuTrainModel(GptModel model, const AdamWConfig& adamw,
                                                          comm::Communicator& data, int stage,
                                                          bool prefetch = false);

// ZeRO-3 over `data` for a model of shape `config` initialised from `seed` (GptModel::
// InitRandom's values) without the whole model: the GptModel allocates no buffers and this
// rank generates its shard alone (GenerateInitialRuns). The same training as
// MakeZeroCpuTrainModel(stage 3) of an InitRandom(seed) model, bit for bit.
Result<std::unique_ptr<TrainModel>> MakeZero3CpuTrainModelFromSeed(const GptConfig& config,
                                                                   uint64_t seed,
                                                                   const AdamWConfig& adamw,
                                                                   comm::Communicator& data,
                                                                   bool prefetch = false);

// The device a CUDA rank trains on, chosen by SelectCudaDevice.
struct CudaDeviceChoice {
  int device = 0;     // ordinal among the GPUs this process sees
  int visible = 0;    // how many it sees
  std::string name;   // "NVIDIA H100 80GB HBM3"
  size_t memory = 0;  // bytes
  DevicePeak peak;    // dense bf16; flops 0 when the GPU is not in the table
};

// Makes this rank's GPU current on the calling thread: GPU `local_rank` of those this
// process sees, or GPU 0 when it sees exactly one (a launcher that gives each task its
// own GPU through CUDA_VISIBLE_DEVICES). Errors, before anything else is touched:
// kUnsatisfiable "train.device is cuda but this build has no CUDA support" in a build
// without CUDA; kUnavailable "train.device is cuda but no CUDA device is usable: <reason>"
// when there is no GPU or driver, or local_rank names a GPU this process does not see.
Result<CudaDeviceChoice> SelectCudaDevice(int local_rank);

// ZeRO and offload for the CUDA model (trainer/cuda_zero.h). stage 0 without offload: the
// replicated GptCudaAdamW. Otherwise AdamW's state is sharded over `data` (null: one rank,
// which holds the whole shard), stage 1, 2 or 3 (0 with offload counts as 1), on the device
// or, with `offload`, in host memory with the step on the CPU; `offload_params` (stage 3
// with offload: `parallel.offload: optimizer+params`) keeps the bf16 parameter shard in
// pinned host memory too.
struct CudaZeroOptions {
  comm::Communicator* data = nullptr;  // the data-parallel group; must outlive the model
  int stage = 0;
  bool offload = false;
  bool offload_params = false;
};

// The CUDA model (on the current device) for micro-batches of up to max_batch sequences
// of up to max_seq tokens, starting from `initial`'s parameters (the same weights as a CPU
// run with the same seed). kUnsatisfiable without CUDA in the build; the model's errors
// (gpt_cuda.h) otherwise; kInvalidArgument for a stage outside 0..3 or offload_params
// without stage 3 and offload.
// `description` receives a line for the log (memory).
Result<std::unique_ptr<TrainModel>> MakeCudaTrainModel(const GptModel& initial,
                                                       const AdamWConfig& adamw, int max_batch,
                                                       int max_seq, std::string* description,
                                                       const CudaZeroOptions& zero = {});

// Where a split model's initial parameters come from: GPT-2 initialisation from `seed`, each
// rank generating only its slices (GenerateInitialParams: no rank holds the whole model), or
// `from`, a whole model every rank holds (an imported GPT-2 file).
struct InitialParams {
  uint64_t seed = 0;
  const GptModel* from = nullptr;
};

// How a model split over ranks moves a step's data between ranks. The defaults are what
// `cohort train` runs; the alternatives are the earlier paths, kept to compare against (the
// tests check that both give the same bits; bench_parallel_train times both).
struct ParallelStepOptions {
  // With data parallelism: each bucket of the gradient is averaged over the data-parallel
  // group on a communication thread (parallel/ddp.h DdpReducer) as soon as the last micro-
  // batch's backward has finished it, while the backward goes on; only the tied embedding's
  // copies (summed over the embedding group first) wait for the end of the step. False: the
  // whole gradient is averaged after the step's last backward.
  bool overlap_grad_reduce = true;
  size_t bucket_bytes = size_t{4} << 20;  // train.bucket_mb
  // CUDA: the pipeline's messages cross the host (device -> host, gloo over `host`, host ->
  // device) instead of going device to device over `world` (nccl send/recv).
  bool host_pipeline_messages = false;
};

// A CPU model of shape `config` split over `world` by `layout` (tensor and/or pipeline > 1):
// this rank's shard, its own AdamW, and the communicators of its groups, split from `world`
// (every rank calls this at the same point, with the same config and initial parameters).
// `description` receives a line for the log (parameters and memory of this rank).
// zero_stage 1-3: ZeRO in the data-parallel group of this tensor/pipeline position (stage 1
// the AdamW state of part of the shard per data rank; 2 also the gradients, 3 also the
// parameters: trainer/shard_zero.h), with ZeRO-3's next piece prefetched when `prefetch`.
Result<std::unique_ptr<TrainModel>> MakeParallelCpuTrainModel(const GptConfig& config,
                                                              const InitialParams& initial,
                                                              const AdamWConfig& adamw,
                                                              const ParallelLayout& layout,
                                                              comm::Communicator& world,
                                                              std::string* description,
                                                              int zero_stage = 0,
                                                              bool prefetch = false,
                                                              const ParallelStepOptions& step = {});

// The same split on CUDA (this rank's GPU, current on the calling thread): GptShardCudaModel
// with the device AdamW (model/cuda_adamw.h) over its float32 master parameters, bf16
// activations. `world` must reach device memory (nccl; gloo over the CPU emulator's
// host-backed device memory in tests): the tensor, data and embedding groups are split from
// it and reduce device buffers, and the pipeline's messages go device to device over channels
// split from it (unless step.host_pipeline_messages). `host` (the same ranks, host memory:
// gloo, or `world` itself where that reaches host memory) carries the loss, the norm's sum,
// the sampling logits, the checkpoint and export state, and the trainer's host collectives
// (BroadcastHost/AllReduceHost on `world` go there). Both must outlive the model.
// zero_stage 1 to 3: ZeRO in the data-parallel group of this tensor/pipeline position (the
// moments of part of the shard per data rank; 2 also the gradients, reduce-scattered during
// each chunk's last backward; 3 also the parameters, each piece gathered as the model uses
// it: trainer/cuda_shard_engine.cc). `offload` (`parallel.offload: optimizer`; with
// zero_stage 0 ZeRO-1's): the AdamW state and float32 master of the data rank's part on the
// host, stepped on the CPU (trainer/host_shard_adamw.h); `offload_params` (optimizer+params,
// zero_stage 3): the bf16 part in pinned host memory too, also with one data replica.
// kUnsatisfiable in a build without CUDA; the shard model's errors (gpt_shard_cuda.h: shapes
// the CUDA kernels refuse) otherwise.
Result<std::unique_ptr<TrainModel>> MakeParallelCudaTrainModel(const GptConfig& config,
                                                               const InitialParams& initial,
                                                               const AdamWConfig& adamw,
                                                               const ParallelLayout& layout,
                                                               comm::Communicator& world,
                                                               comm::Communicator& host,
                                                               std::string* description,
                                                               const ParallelStepOptions& step = {},
                                                               int zero_stage = 0,
                                                               bool offload = false,
                                                               bool offload_params = false);

// True when this binary was built with the CUDA engine.
bool CudaTrainingBuilt();

}  // namespace cohort::engine
