// CudaZeroOptimizer: ZeRO stages 1, 2 and 3 (parallel/zero.h) for GptCudaModel in the
// data-parallel group, and the offloads (`parallel.offload: optimizer`, and with stage 3
// `optimizer+params`). Built only with the CUDA engine; the CUDA TrainModel
// (cuda_train_model.cc) owns one when the config asks for ZeRO or offload.
//
// Rank r of N owns the shard [Ψ·r/N, Ψ·(r+1)/N) (ZeroPartition) and keeps AdamW's state for
// it only:
//
//   on the device  CudaAdamW (model/cuda_adamw.h) over the shard: m and v in device memory,
//                  the fused update of the shard's decay runs (CutDecayRanges) on the model's
//                  stream, the shard's Σ g² by the norm kernel (kernels/cuda/grad_norm.cuh);
//   offloaded      HostShardAdamW (host_shard_adamw.h, shared with the CUDA shard engine):
//                  AdamW (optim/adamw.h, OpenMP threads as the CPU trainer) over the shard
//                  on the host, with its float32 master copy of the shard and the gradient
//                  shard in pinned host memory (cudaMallocHost; m and v never cross the bus
//                  and stay pageable), clipped and stepped on the CPU, overlapped with the
//                  device: the gradient shard reaches the host piece by piece during the
//                  last backward (stage 1: DdpReducer's buckets, GradsReduced, and on one
//                  rank the CUDA TrainModel's copy thread piece by piece; stages 2, 3:
//                  ShardedDeviceGrads' final round), each part's Σ g² computed by a host
//                  thread as it arrives (stages 2, 3), and the step runs on that thread in
//                  chunks while the training thread copies each finished chunk's parameters
//                  back on a copy stream (the step's tail is the slower of the two, not their
//                  sum).
//
// Gradients. Stage 1 all-reduces the whole gradient buffer (the trainer's DdpReducer) and
// steps its shard of it; offloaded, each bucket's part of the shard is copied to the host on
// a copy stream by the reducer's thread as soon as it is averaged (GradsReduced; on one rank,
// with no reducer, each piece of the last micro-batch's backward as it is finished). Stages 2
// and 3 hold no whole gradient buffer (the model is created without one): the backward
// writes each piece into a ShardedDeviceGrads (cuda_zero_pieces.h), reduce-scattered into
// the device gradient shard of size(r) floats every micro-batch.
//
// Parameters. Stages 1 and 2 keep the model's whole float32 parameters and their bf16 copy:
// after the update each rank's shard is all-gathered into every rank's parameters (the
// send copy goes through consumed gradient memory) and the bf16 copy refreshed. Stage 3
// keeps only the shard: float32 (device memory, or offloaded the host master) and bf16
// (device memory, or with optimizer+params pinned host memory), which the update refreshes
// in place; the model gathers each piece from the bf16 shards as it computes
// (GatheredDeviceParams) and nothing is all-gathered after the step.
//
// Clipping uses the global norm: every shard's Σ g² summed over the ranks in double
// (SumOverRanks), the factor computed as the device kernel computes it (ClipFactor with
// max_norm rounded to float).
//
// Threads: the training thread, except GradsReduced (the reducer's thread, between the
// reducer's Begin and Finish); `data` is idle while the training thread's calls run, and
// used by the collective thread (cuda_zero_pieces.h) while a pass runs in stages 2 and 3.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/cuda_adamw.h"
#include "engine/model/gpt_cuda.h"
#include "engine/optim/adamw.h"
#include "engine/parallel/ddp.h"
#include "engine/parallel/zero.h"
#include "engine/trainer/cuda_zero_pieces.h"
#include "engine/trainer/host_shard_adamw.h"

namespace cohort::engine {

class CudaZeroOptimizer {
 public:
  // The optimizer of `model` for ZeRO `stage` (1 to 3) over `data` (null: one rank, the
  // shard is the whole model), AdamW state on the device or, with `offload`, on the host;
  // `offload_params` (stage 3 and offload only) keeps the bf16 parameter shard in pinned
  // host memory. The model must have been created without gradients for stage 2 and without
  // parameters and gradients for stage 3 (GptCudaStorage); its sink and source are set here.
  // `initial`: every parameter (host), of which the shard is kept (stage 3; stages 1 and 2
  // read the model's). `host_all_gather` all-gathers host floats over `data` (staged through
  // device memory for nccl); unused without `data`. kInvalidArgument for another stage or
  // storage; allocation failures as CudaAdamW::Create (kResourceExhausted naming the bytes).
  struct Options {
    int stage = 1;
    bool offload = false;
    bool offload_params = false;
  };
  static Result<std::unique_ptr<CudaZeroOptimizer>> Create(GptCudaModel& model,
                                                           comm::Communicator* data,
                                                           const Options& options,
                                                           const AdamWConfig& config,
                                                           std::span<const float> initial,
                                                           HostAllGather host_all_gather);
  ~CudaZeroOptimizer();
  CudaZeroOptimizer(const CudaZeroOptimizer&) = delete;
  CudaZeroOptimizer& operator=(const CudaZeroOptimizer&) = delete;

  int stage() const { return stage_; }
  bool offload() const { return offload_; }
  bool offload_params() const { return offload_params_; }
  int rank() const { return rank_; }
  const ZeroPartition& partition() const { return partition_; }
  size_t shard_begin() const { return partition_.begin(rank_); }
  size_t shard_size() const { return partition_.size(rank_); }

  // Offloaded stage 1 (DdpReducer::ReducedFn, the reducer's thread; on one rank the CUDA
  // TrainModel's copy thread, as the last micro-batch's backward finishes each piece):
  // gradients [offset, offset + count) are final; copies this rank's part of them to the
  // host gradient shard and returns when copied. CUDA errors.
  Result<void> GradsReduced(size_t offset, size_t count);
  // Offloaded stage 1: gradient values GradsReduced brought to the host during the last
  // step's backward (the rest crossed at the step).
  size_t copied_during_backward() const { return copied_during_backward_; }

  // Stages 2 and 3, around the model's calls: the gradient shard to 0 (the step's first
  // micro-batch), and a micro-batch's backward pass (its pieces reduced into the shard).
  // `final`: the step's last micro-batch (offloaded, its pieces go to the host as they are
  // reduced); every micro-batch may say true (the last one's copy wins), at the cost of
  // the copies.
  Result<void> ZeroGrad();
  Result<void> Backward(float loss_scale, bool final);

  // After the backward passes (and the reducer's Finish): clips by the global norm, steps
  // the shard, and (stages 1, 2) all-gathers the parameters and refreshes the bf16 copy.
  // Returns the global norm before clipping. Collectives over `data`; CUDA errors; offloaded
  // stage 1 over more than one rank, kInternal unless GradsReduced copied exactly the shard
  // during the backward (a reducer not given grad_reduced()); on one rank what it did not
  // copy is copied here.
  Result<double> Step(double max_norm, float lr);

  // Resume by range (TrainModel::RestoreRequest): the runs of this rank's shard of the
  // moments and, stage 3, of the parameters, into host memory: offloaded, straight into the
  // host AdamW's m and v (and stage 3's master shard); on the device, into host buffers of
  // the shard's size, which FinishRestore uploads and frees. Stages 1 and 2 ask for no
  // parameters (the model holds them whole: the caller reads and writes those first).
  CheckpointReadRequest RestoreRequest();
  // Takes what RestoreRequest's runs received: the moments, stage 3's parameter shard (its
  // bf16 copy refreshed), for stages 1 and 2 the offloaded master from the model's
  // parameters; sets the step count to `t`. Returns when copied. CUDA errors; t < 0:
  // kInvalidArgument.
  Result<void> FinishRestore(int64_t t);
  // Frees RestoreRequest's host buffers (nothing was read, or it failed).
  void DropRestore();
  // After the parameters were written by other means (a fresh start's broadcast): stages 1,
  // 2 take the model's (the offloaded master shard copies them); stage 3 takes its shard of
  // `whole_device` (Ψ floats of DEVICE memory; ignored by stages 1, 2) and refreshes the bf16
  // shard. Returns when copied.
  Result<void> TakeParams(const float* whole_device = nullptr);
  // Stage 3: every parameter, float32, into `whole_device` (Ψ floats of device memory on
  // every rank): an all-gather of the shards (export). Returns when done.
  Result<void> GatherAll(float* whole_device);

  // This rank's checkpoint ranges (replica must be rank(), replicas the group's size): its
  // shard of the parameters and of both moments, from host copies that stay valid until the
  // next call. kInternal on a mismatch.
  Result<std::vector<CheckpointRange>> CheckpointRanges(int replica, int replicas,
                                                        int64_t* adam_t);

  int64_t t() const;
  // Model-state bytes as allocated: parameters held by this object (stage 3: the float32
  // and bf16 shards, 6·size(r); else 0: the model's), the gradient shard (stages 2, 3:
  // 4·size(r); else 0), AdamW state (m and v; offloaded stages 1, 2: plus the host master
  // shard) and scratch (the gradient piece and receive buffers, the gather buffers,
  // offload's pinned gradient shard, optimizer+params' device send buffer, and offloaded
  // stage 3's pinned bf16 staging when the bf16 shard is on the device).
  size_t param_bytes() const;
  size_t grad_shard_bytes() const;
  size_t optimizer_bytes() const;
  size_t scratch_bytes() const;
  // Of the four above, the bytes in host memory (offloaded: the moments, the master, the
  // pinned gradient shard and bf16 staging, optimizer+params' bf16 shard; else 0).
  size_t host_bytes() const;
  // Stage 3: pieces the model asked for and those the prefetch had gathered by then.
  uint64_t pieces_asked() const { return params_ ? params_->asked() : 0; }
  uint64_t pieces_prefetched() const { return params_ ? params_->prefetched() : 0; }

 private:
  CudaZeroOptimizer(GptCudaModel& model, comm::Communicator* data, const Options& options,
                    HostAllGather host_all_gather);
  // The device gradient shard the step reads: size(r) floats.
  const float* grad_shard() const;
  // The float32 parameter shard the device update writes (stage 3's own, else the model's).
  float* param_shard();
  cuda::bf16* bf16_shard_device();
  // Stages 1, 2: every rank's updated shard into every rank's float32 parameters, bf16
  // refreshed.
  Result<void> GatherParams();
  // Stage 3: the float32 shard takes `shard` (size(r) floats of device memory, or of host
  // memory when `from_host`) and the bf16 shard is refreshed from it. Returns when done.
  Result<void> TakeShard(const float* shard, bool from_host = false);
  // Offloaded, stages 2 and 3 (the collective thread): shard elements [lo, hi) are final;
  // copies them to the host and posts their Σ g² to the host thread.
  Result<void> ShardFinal(size_t lo, size_t hi);
  // Offloaded: where the host step's chunks go (stages 1, 2: the float32 shard of the
  // model's; stage 3: the bf16 shard, on the device or, optimizer+params, on the host).
  HostShardAdamW::Destination HostDestination();
  // Offloaded stage 3: the bf16 shard from the host master (host conversion), to wherever
  // the bf16 shard lives.
  Result<void> RefreshBf16FromMaster();
  Result<void> Copy(void* dst, const void* src, size_t bytes, int kind);
  // The shard's Σ g² on the device (Result: the sum, read back; synchronises).
  Result<double> DeviceSquaredNorm();

  GptCudaModel& model_;
  comm::Communicator* data_;
  const int stage_;
  const bool offload_, offload_params_;
  const int rank_;
  const ZeroPartition partition_;
  HostAllGather host_all_gather_;

  std::unique_ptr<CudaAdamW> device_;     // on the device
  double* norm_sq_ = nullptr;             // on the device: the shard's Σ g²
  float* clip_scale_ = nullptr;           // on the device: the clip factor the update reads
  void* norm_scratch_ = nullptr;          // on the device: GradNormScratchBytes(size(r))
  double* norm_host_ = nullptr;           // pinned
  float* scale_host_ = nullptr;           // pinned
  // Offloaded: AdamW over the shard on the host, its pinned float32 master and gradient
  // shard (and stage 3's pinned bf16 staging when the bf16 shard is on the device).
  std::unique_ptr<HostShardAdamW> host_;
  // Stage 3: the float32 shard (device; offloaded: master_) and the bf16 shard (device, or
  // pinned host with offload_params).
  float* param_shard_ = nullptr;
  cuda::bf16* bf16_shard_ = nullptr;
  // Stages 2, 3. Declared last: destroyed first (the pieces drain the thread; the thread
  // joins before the buffers above are freed).
  size_t copied_during_backward_ = 0;  // offloaded stage 1: the last Step's count
  std::unique_ptr<SerialThread> thread_;
  std::unique_ptr<ShardedDeviceGrads> grads_;
  std::unique_ptr<GatheredDeviceParams> params_;
  std::vector<float> params_host_, m_host_, v_host_;  // checkpoint copies (on the device)
  // RestoreRequest's host buffers until FinishRestore (on the device: the moments' shards;
  // stage 3 not offloaded: the parameter shard).
  std::vector<float> restore_params_, restore_m_, restore_v_;
};

}  // namespace cohort::engine
