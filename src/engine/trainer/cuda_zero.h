// CudaZeroOptimizer: ZeRO stages 1 and 2 (parallel/zero.h) for GptCudaModel in the
// data-parallel group, and the optimizer offload (`parallel.offload: optimizer`). Built only
// with the CUDA engine; the CUDA TrainModel (cuda_train_model.cc) owns one when the config
// asks for ZeRO or offload.
//
// The model keeps its whole float32 parameters, their bf16 copy and its whole gradient
// buffer (the backward pass writes there; gradients accumulate there over micro-batches).
// Rank r of N owns the shard [Ψ·r/N, Ψ·(r+1)/N) (ZeroPartition) and keeps AdamW's state for
// it only:
//
//   on the device  CudaAdamW (model/cuda_adamw.h) over the shard: m and v in device memory,
//                  the fused update of the shard's decay runs (CutDecayRanges) on the model's
//                  stream, the shard's Σ g² by the norm kernel (kernels/cuda/grad_norm.cuh);
//   offloaded      AdamW (optim/adamw.h, OpenMP threads as the CPU trainer) over the shard
//                  on the host, with its float32 master copy of the shard and the gradient
//                  shard in pinned host memory (cudaMallocHost; m and v never cross the bus
//                  and stay pageable): each bucket's part of the gradient shard is copied
//                  device -> host on a copy stream as soon as the reducer has averaged it,
//                  while the backward pass goes on (GradsReduced; on one rank, with no
//                  reducer, the whole shard after the backward), then clipped and stepped on
//                  the CPU, and the updated shard copied back.
//
// Stage 1 all-reduces the whole gradient (the trainer's DdpReducer) and steps its shard of
// it; stage 2 reduce-scatters it bucket by bucket during the last micro-batch's backward
// pass straight into a device gradient shard of size(r) floats (DdpReducer's ShardTarget),
// so a rank receives and steps only its part. Either way the clipping uses the global norm:
// every shard's Σ g² summed over the ranks in double (SumOverRanks), the factor computed as
// the device kernel computes it (ClipFactor with max_norm rounded to float). After the
// update each rank's shard is all-gathered into every rank's float32 parameters (the send
// copy goes through the model's gradient buffer, which the step has consumed) and the bf16
// copy is refreshed.
//
// Not built yet (docs/ARCHITECTURE.md): freeing the model's whole gradient buffer in stage 2
// (the backward would have to write bucket-sized pieces, as the CPU model's BackwardToSink),
// and stage 3.
//
// Threads: the training thread, except GradsReduced (the reducer's thread, between the
// reducer's Begin and Finish); `data` is idle while the training thread's calls run.
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

namespace cohort::engine {

class CudaZeroOptimizer {
 public:
  // The optimizer of `model` for ZeRO stage 1 or 2 over `data` (null: one rank, the shard
  // is the whole model; offload's case), AdamW state on the device or, with `offload`, on
  // the host. `host_all_gather` all-gathers host floats over `data` (staged through device
  // memory for nccl); unused without `data`. kInvalidArgument for another stage; allocation
  // failures as CudaAdamW::Create (kResourceExhausted naming the bytes).
  static Result<std::unique_ptr<CudaZeroOptimizer>> Create(GptCudaModel& model,
                                                           comm::Communicator* data, int stage,
                                                           bool offload, const AdamWConfig& config,
                                                           HostAllGather host_all_gather);
  ~CudaZeroOptimizer();
  CudaZeroOptimizer(const CudaZeroOptimizer&) = delete;
  CudaZeroOptimizer& operator=(const CudaZeroOptimizer&) = delete;

  int stage() const { return stage_; }
  bool offload() const { return offload_; }
  int rank() const { return rank_; }
  const ZeroPartition& partition() const { return partition_; }
  size_t shard_begin() const { return partition_.begin(rank_); }
  size_t shard_size() const { return partition_.size(rank_); }

  // Stage 2 over more than one rank: where DdpReducer reduce-scatters (the device gradient
  // shard); nullopt otherwise (the reducer all-reduces the whole buffer).
  std::optional<DdpReducer::ShardTarget> reduce_target();
  // Offloaded (DdpReducer::ReducedFn, the reducer's thread): gradients [offset, offset +
  // count) are averaged; copies this rank's part of them to the host gradient shard and
  // returns when copied. CUDA errors.
  Result<void> GradsReduced(size_t offset, size_t count);

  // After the backward passes (and the reducer's Finish): clips by the global norm, steps
  // the shard, all-gathers the parameters and refreshes the bf16 copy. Returns the global
  // norm before clipping. Collectives over `data`; CUDA errors; offloaded over more than one
  // rank, kInternal unless GradsReduced copied exactly the shard during the backward (a
  // reducer not given grad_reduced()).
  Result<double> Step(double max_norm, float lr);

  // Resume: takes this rank's shard of a whole moment (m or v) that lies in DEVICE memory
  // (Ψ floats, the same on every rank: the CUDA model broadcasts it through its gradient
  // buffer). Returns when copied.
  Result<void> RestoreMoment(bool second, const float* whole_device);
  // After the model's float32 parameters were written by other means (a broadcast): the
  // offloaded master shard takes them (nothing to do on the device). Returns when copied.
  Result<void> TakeParams();
  // Resume: sets the step count and takes the parameters (TakeParams), which must hold the
  // restored values.
  Result<void> Restored(int64_t t);

  // This rank's checkpoint ranges (replica must be rank(), replicas the group's size): its
  // shard of the parameters and of both moments, from host copies that stay valid until the
  // next call. kInternal on a mismatch.
  Result<std::vector<CheckpointRange>> CheckpointRanges(int replica, int replicas,
                                                        int64_t* adam_t);

  int64_t t() const;
  // Bytes of gradient shard (stage 2 on > 1 rank: the device shard; else 0: the model's
  // buffer holds the gradients), of AdamW state (m and v; offloaded: plus the host master
  // shard) and of host staging (offload's pinned gradient shard).
  size_t grad_shard_bytes() const;
  size_t optimizer_bytes() const;
  size_t staging_bytes() const;

 private:
  CudaZeroOptimizer(GptCudaModel& model, comm::Communicator* data, int stage, bool offload,
                    HostAllGather host_all_gather);
  // The device gradient shard the step reads: size(r) floats.
  const float* grad_shard() const;
  // Every rank's updated shard into every rank's float32 parameters, bf16 refreshed.
  Result<void> GatherParams();
  Result<void> Copy(void* dst, const void* src, size_t bytes, int kind);

  GptCudaModel& model_;
  comm::Communicator* data_;
  const int stage_;
  const bool offload_;
  const int rank_;
  const ZeroPartition partition_;
  HostAllGather host_all_gather_;
  // The shard's Σ g² on the device (Result: the sum, read back; synchronises).
  Result<double> DeviceSquaredNorm();

  std::unique_ptr<CudaAdamW> device_;     // on the device
  double* norm_sq_ = nullptr;             // on the device: the shard's Σ g²
  float* clip_scale_ = nullptr;           // on the device: the clip factor the update reads
  void* norm_scratch_ = nullptr;          // on the device: GradNormScratchBytes(size(r))
  double* norm_host_ = nullptr;           // pinned
  float* scale_host_ = nullptr;           // pinned
  std::optional<AdamW> host_;             // offloaded
  float* grad_shard_ = nullptr;           // device, stage 2 on > 1 rank
  float* master_ = nullptr;               // pinned host, offloaded: the float32 shard
  float* grads_host_ = nullptr;           // pinned host, offloaded: the gradient shard
  cudaStream_t copy_stream_ = nullptr;    // offloaded: GradsReduced's copies
  std::atomic<size_t> copied_{0};         // offloaded: values GradsReduced copied this step
  std::vector<float> params_host_, m_host_, v_host_;  // checkpoint copies (on the device)
};

}  // namespace cohort::engine
