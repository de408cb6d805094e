// CudaZeroOptimizer (cuda_zero.h): ZeRO stages 1 to 3 and the offloads for the CUDA model. Compiled only with the CUDA engine.
#if COHORT_HAVE_CUDA_ENGINE
#include "engine/trainer/cuda_zero.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/cuda_status.h"
#include "engine/kernels/cuda/grad_norm.cuh"
#include "engine/model/cuda_arena.h"
#include "engine/optim/grad_clip.h"

namespace cohort::engine {

CudaZeroOptimizer::CudaZeroOptimizer(GptCudaModel& model, comm::Communicator* data,
                                     const Options& options, HostAllGather host_all_gather)
    : model_(model),
      data_(data),
      stage_(options.stage),
      offload_(options.offload),
      offload_params_(options.offload_params),
      rank_(data ? data->rank() : 0),
      partition_{model.num_parameters(), data ? data->size() : 1},
      host_all_gather_(std::move(host_all_gather)) {}

CudaZeroOptimizer::~CudaZeroOptimizer() {
  (void)cudaStreamSynchronize(model_.stream());
  // The pieces first (they drain the collective thread), then the thread, then the memory
  // its ops read.
  params_.reset();
  grads_.reset();
  thread_.reset();
  host_.reset();
  for (void* p : {static_cast<void*>(norm_sq_), static_cast<void*>(clip_scale_), norm_scratch_,
                  static_cast<void*>(param_shard_)}) {
    if (p != nullptr) (void)cudaFree(p);
  }
  if (bf16_shard_ != nullptr) {
    if (offload_params_) {
      (void)cudaFreeHost(bf16_shard_);
    } else {
      (void)cudaFree(bf16_shard_);
    }
  }
  if (norm_host_ != nullptr) (void)cudaFreeHost(norm_host_);
  if (scale_host_ != nullptr) (void)cudaFreeHost(scale_host_);
}

Result<std::unique_ptr<CudaZeroOptimizer>> CudaZeroOptimizer::Create(
    GptCudaModel& model, comm::Communicator* data, const Options& options,
    const AdamWConfig& config, std::span<const float> initial, HostAllGather host_all_gather) {
  const int stage = options.stage;
  if (stage < 1 || stage > 3) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "CudaZeroOptimizer: ZeRO stage {} (built on CUDA: 1, 2 and 3)", stage);
  }
  if (options.offload_params && (stage != 3 || !options.offload)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "CudaZeroOptimizer: parameter offload needs stage 3 and the optimizer offload "
                  "(stage {}, optimizer offload {})",
                  stage, options.offload);
  }
  const GptCudaStorage& storage = model.storage();
  if (storage.grads != (stage < 2) || storage.params != (stage < 3)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "CudaZeroOptimizer: ZeRO-{} needs a model created with{} parameters and "
                  "with{} gradients",
                  stage, stage < 3 ? "" : "out", stage < 2 ? "" : "out");
  }
  if (stage == 3 && initial.size() != model.num_parameters()) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "CudaZeroOptimizer: {} initial parameters for a model of {}", initial.size(),
                  model.num_parameters());
  }
  std::unique_ptr<CudaZeroOptimizer> z(
      new CudaZeroOptimizer(model, data, options, std::move(host_all_gather)));
  const size_t lo = z->shard_begin(), n = z->shard_size();
  const int dev = model.device();
  COHORT_CUDA_CHECK(cudaSetDevice(dev));
  std::vector<DecayRange> ranges;
  for (const ParamTensor& t : model.tensors()) {
    ranges.push_back({t.offset, t.numel, t.weight_decay});
  }
  const size_t bytes = std::max<size_t>(1, n) * sizeof(float);
  void* pinned = nullptr;
  if (!options.offload) {
    z->device_ = COHORT_TRY(CudaAdamW::Create(CutDecayRanges(ranges, lo, lo + n), config,
                                              model.options().fused_adamw, dev, model.stream()));
    z->norm_sq_ = static_cast<double*>(COHORT_TRY(DeviceAlloc(sizeof(double), "the ZeRO norm", dev)));
    z->clip_scale_ = static_cast<float*>(COHORT_TRY(DeviceAlloc(sizeof(float), "the clip factor", dev)));
    z->norm_scratch_ = COHORT_TRY(DeviceAlloc(std::max<size_t>(1, cuda::GradNormScratchBytes(n)),
                                              "the ZeRO norm's scratch", dev));
    COHORT_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(double)));
    z->norm_host_ = static_cast<double*>(pinned);
    COHORT_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(float)));
    z->scale_host_ = static_cast<float*>(pinned);
  } else {
    z->host_ = COHORT_TRY(HostShardAdamW::Create(n, CutDecayRanges(ranges, lo, lo + n), config, dev));
  }
  if (stage >= 2) {
    z->thread_ = std::make_unique<SerialThread>(dev);
    z->grads_ = COHORT_TRY(ShardedDeviceGrads::Create(data, z->partition_,
                                                      GptCudaModel::MaxGradPiece(model.config()), dev,
                                                      model.stream(), *z->thread_));
    model.SetGradSink(z->grads_.get());
    if (options.offload) {
      CudaZeroOptimizer* self = z.get();
      z->grads_->set_final([self](size_t lo, size_t hi) { return self->ShardFinal(lo, hi); });
    }
  }
  if (stage == 3) {
    const size_t bf16_bytes = std::max<size_t>(1, n) * sizeof(cuda::bf16);
    if (!options.offload) {
      z->param_shard_ = static_cast<float*>(COHORT_TRY(
          DeviceAlloc(bytes, fmt::format("the ZeRO-3 parameter shard ({} values)", n), dev)));
    }
    if (options.offload_params) {
      COHORT_CUDA_CHECK(cudaMallocHost(&pinned, bf16_bytes));
      z->bf16_shard_ = static_cast<cuda::bf16*>(pinned);
    } else {
      if (options.offload) {  // the host step's bf16 chunks, copied to the device shard
        COHORT_TRY_VOID(z->host_->ReserveBf16Staging());
      }
      z->bf16_shard_ = static_cast<cuda::bf16*>(COHORT_TRY(DeviceAlloc(
          bf16_bytes, fmt::format("the ZeRO-3 bf16 parameter shard ({} values)", n), dev)));
    }
    z->params_ = COHORT_TRY(GatheredDeviceParams::Create(
        data, z->partition_,
        {GptCudaModel::ParamPieces(model.config(), /*backward=*/false),
         GptCudaModel::ParamPieces(model.config(), /*backward=*/true)},
        z->bf16_shard_, options.offload_params, dev, model.stream(), *z->thread_));
    model.SetParamSource(z->params_.get());
    // The shard of the initial parameters, through device memory (the gradient shard, free
    // until the first backward) so that the bf16 shard is the device's rounding.
    float* through = z->grads_->shard();
    COHORT_TRY_VOID(z->Copy(through, initial.data() + lo, n * sizeof(float), cudaMemcpyHostToDevice));
    COHORT_TRY_VOID(z->TakeShard(through));
    COHORT_TRY_VOID(z->grads_->ZeroShard());
    COHORT_CUDA_CHECK(cudaStreamSynchronize(model.stream()));
    return z;
  }
  if (options.offload) COHORT_TRY_VOID(z->TakeParams());  // the master starts as the model's
  return z;
}

Result<void> CudaZeroOptimizer::Copy(void* dst, const void* src, size_t bytes, int kind) {
  if (bytes == 0) return {};
  COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, static_cast<cudaMemcpyKind>(kind),
                                    model_.stream()));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(model_.stream()));
  return {};
}

Result<void> CudaZeroOptimizer::GradsReduced(size_t offset, size_t count) {
  const size_t lo = std::max(offset, shard_begin());
  const size_t hi = std::min(offset + count, shard_begin() + shard_size());
  if (!offload_ || grads_ || hi <= lo) return {};
  // The reducer's thread. The collective returned, so the bucket's average is in device
  // memory.
  const size_t at = lo - shard_begin();
  return host_->Arrived(grad_shard() + at, at, hi - lo, /*norm=*/false);
}

Result<void> CudaZeroOptimizer::ZeroGrad() {
  if (!grads_) return model_.ZeroGrad();
  return grads_->ZeroShard();
}

Result<void> CudaZeroOptimizer::Backward(float loss_scale, bool final) {
  const bool to_host = final && offload_;
  if (to_host) COHORT_TRY_VOID(host_->BeginRound());
  grads_->Begin(to_host);
  auto backward = model_.Backward(loss_scale);
  // Every piece handed to the sink is reduced (or skipped after an error) before returning.
  auto reduced = grads_->Finish();
  COHORT_TRY_VOID(backward);
  return reduced;
}

Result<double> CudaZeroOptimizer::DeviceSquaredNorm() {
  cudaStream_t st = model_.stream();
  // max_norm 0: the kernel writes Σ g² and a factor of 1, which StepShard's upload replaces.
  cuda::GlobalNormAndClipScale(norm_sq_, clip_scale_, grad_shard(), shard_size(), 0.0f,
                               norm_scratch_, st);
  COHORT_CUDA_CHECK(cudaGetLastError());
  COHORT_CUDA_CHECK(cudaMemcpyAsync(norm_host_, norm_sq_, sizeof(double), cudaMemcpyDeviceToHost, st));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(st));
  return *norm_host_;
}

const float* CudaZeroOptimizer::grad_shard() const {
  if (grads_) return grads_->shard();
  return model_.grads_device().data() + shard_begin();
}

float* CudaZeroOptimizer::param_shard() {
  if (stage_ == 3) return param_shard_;
  return model_.params_device().data() + shard_begin();
}

cuda::bf16* CudaZeroOptimizer::bf16_shard_device() {
  if (stage_ == 3) return offload_params_ ? nullptr : bf16_shard_;
  return model_.params_bf16_device() + shard_begin();
}

Result<double> CudaZeroOptimizer::Step(double max_norm, float lr) {
  COHORT_CUDA_CHECK(cudaSetDevice(model_.device()));
  const size_t n = shard_size();
  double squares = 0;
  if (offload_ && grads_) {
    // The final round's pieces reached the host during the backward (ShardFinal), each
    // part's Σ g² computed on the host thread: summed here in their (fixed) order.
    squares = COHORT_TRY(host_->PartialsSquaredNorm());
    const size_t copied = host_->TakeCopied();
    if (copied != n) {
      return Errorf(ErrorCode::kInternal,
                    "optimizer offload: the last backward brought {} of the gradient shard's {} "
                    "values to the host (no final round?)",
                    copied, n);
    }
  } else if (offload_) {
    // Stage 1: over several ranks the reducer's buckets brought the shard to the host during
    // the backward (GradsReduced); on one rank the last micro-batch's pieces did (the CUDA
    // TrainModel's copy thread), or, where the caller did not copy them, the whole shard now.
    const size_t copied = host_->TakeCopied();
    copied_during_backward_ = copied;
    if (partition_.ranks == 1) {
      if (copied != n) {
        copied_during_backward_ = 0;
        COHORT_TRY_VOID(host_->CopyAll(grad_shard(), model_.stream()));
      }
    } else if (copied != n) {
      return Errorf(ErrorCode::kInternal,
                    "optimizer offload: the reducer copied {} of the gradient shard's {} values "
                    "to the host during the backward (DdpReducer without grad_reduced()?)",
                    copied, n);
    }
    squares = host_->SquaredNorm();
  } else {
    squares = COHORT_TRY(DeviceSquaredNorm());
  }
  if (data_ != nullptr && partition_.ranks > 1) {
    squares = COHORT_TRY(SumOverRanks(host_all_gather_, partition_.ranks, squares));
  }
  const double norm = std::sqrt(std::max(0.0, squares));
  // The device kernels' factor: max_norm as a float (GptCudaAdamW::Step).
  const double max_norm_f = static_cast<double>(static_cast<float>(max_norm));
  if (offload_) {
    COHORT_TRY_VOID(host_->Step(norm, max_norm_f, lr, HostDestination()));
  } else {
    // The factor reaches the update through device memory, as GptCudaAdamW's own does.
    cudaStream_t st = model_.stream();
    *scale_host_ = ClipFactor(norm, max_norm_f);
    COHORT_CUDA_CHECK(cudaMemcpyAsync(clip_scale_, scale_host_, sizeof(float),
                                      cudaMemcpyHostToDevice, st));
    COHORT_TRY_VOID(device_->Step(param_shard(), bf16_shard_device(), grad_shard(), lr,
                                  clip_scale_));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(st));
  }
  if (stage_ == 3) return norm;  // the shards are the parameters: nothing to gather
  COHORT_TRY_VOID(GatherParams());
  return norm;
}

Result<void> CudaZeroOptimizer::ShardFinal(size_t lo, size_t hi) {
  return host_->Arrived(grads_->shard() + lo, lo, hi - lo, /*norm=*/true);
}

HostShardAdamW::Destination CudaZeroOptimizer::HostDestination() {
  HostShardAdamW::Destination to;
  if (stage_ < 3) {
    to.device_f32 = param_shard();
  } else if (offload_params_) {
    to.host_bf16 = reinterpret_cast<uint16_t*>(bf16_shard_);
  } else {
    to.device_bf16 = bf16_shard_;
  }
  return to;
}

Result<void> CudaZeroOptimizer::RefreshBf16FromMaster() {
  return host_->RefreshBf16(HostDestination(), model_.stream());
}

Result<void> CudaZeroOptimizer::GatherParams() {
  if (data_ != nullptr && partition_.ranks > 1) {
    // The send copy of this rank's shard goes through consumed gradient memory (the
    // model's buffer, or stage 2's shard; the next step's ZeroGrad clears either): the
    // receive buffer holds the shard.
    float* params = model_.params_device().data();
    float* send = grads_ ? grads_->shard() : model_.grads_device().data() + shard_begin();
    COHORT_TRY_VOID(Copy(send, params + shard_begin(), shard_size() * sizeof(float),
                         cudaMemcpyDeviceToDevice));
    COHORT_TRY_VOID(data_->AllGather(send, params, partition_.counts(), comm::DataType::kFloat32));
  }
  return model_.ParamsWritten();
}

Result<void> CudaZeroOptimizer::GatherAll(float* whole_device) {
  if (stage_ != 3) {
    return MakeError(ErrorCode::kFailedPrecondition, "GatherAll: the model holds the parameters");
  }
  const size_t n = shard_size();
  // This rank's float32 shard in device memory (offloaded: the master's copy) as the send
  // buffer: its own place in `whole_device`, sent from a copy (the gradient shard, free
  // between steps).
  float* send = grads_->shard();
  if (offload_) {
    COHORT_TRY_VOID(Copy(send, host_->master(), n * sizeof(float), cudaMemcpyHostToDevice));
  } else {
    COHORT_TRY_VOID(Copy(send, param_shard_, n * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  if (data_ != nullptr && partition_.ranks > 1) {
    COHORT_TRY_VOID(
        data_->AllGather(send, whole_device, partition_.counts(), comm::DataType::kFloat32));
  } else {
    COHORT_TRY_VOID(Copy(whole_device, send, n * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  return grads_->ZeroShard();
}

Result<void> CudaZeroOptimizer::TakeShard(const float* shard, bool from_host) {
  const size_t n = shard_size();
  if (offload_) {
    COHORT_TRY_VOID(Copy(host_->master(), shard, n * sizeof(float),
                         from_host ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost));
    return RefreshBf16FromMaster();
  }
  COHORT_TRY_VOID(Copy(param_shard_, shard, n * sizeof(float),
                       from_host ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice));
  cuda::ConvertToBf16(bf16_shard_, param_shard_, n, model_.stream());
  COHORT_CUDA_CHECK(cudaGetLastError());  // ConvertToBf16 (ZeRO-3 shard)
  COHORT_CUDA_CHECK(cudaStreamSynchronize(model_.stream()));
  return {};
}

Result<void> CudaZeroOptimizer::TakeParams(const float* whole_device) {
  if (stage_ == 3) {
    if (whole_device == nullptr) {
      return MakeError(ErrorCode::kInternal, "ZeRO-3 TakeParams without the parameters");
    }
    return TakeShard(whole_device + shard_begin());
  }
  if (!offload_) return {};
  return Copy(host_->master(), model_.params_device().data() + shard_begin(),
              shard_size() * sizeof(float), cudaMemcpyDeviceToHost);
}

CheckpointReadRequest CudaZeroOptimizer::RestoreRequest() {
  const size_t lo = shard_begin(), n = shard_size();
  CheckpointReadRequest req;
  if (n == 0) return req;
  if (offload_) {
    // Straight into the host state: the moments, and stage 3's master (its parameters).
    if (stage_ == 3) req.params.push_back({lo, n, host_->master()});
    req.adam_m.push_back({lo, n, host_->m().data()});
    req.adam_v.push_back({lo, n, host_->v().data()});
    return req;
  }
  restore_m_.resize(n);
  restore_v_.resize(n);
  if (stage_ == 3) {
    restore_params_.resize(n);
    req.params.push_back({lo, n, restore_params_.data()});
  }
  req.adam_m.push_back({lo, n, restore_m_.data()});
  req.adam_v.push_back({lo, n, restore_v_.data()});
  return req;
}

Result<void> CudaZeroOptimizer::FinishRestore(int64_t t) {
  Result<void> done;
  if (offload_) {
    // m and v were read in place; stage 3's master too (the bf16 shard from it), stages 1
    // and 2 copy theirs from the model's parameters, which the caller wrote.
    done = stage_ == 3 ? RefreshBf16FromMaster() : TakeParams();
    if (done) done = host_->RestoreStep(t);
  } else {
    if (stage_ == 3 && shard_size() > 0) done = TakeShard(restore_params_.data(), /*from_host=*/true);
    if (done) {
      // An empty shard (more ranks than values) holds no moments: only the step count.
      done = shard_size() > 0 ? device_->Restore(restore_m_, restore_v_, t) : device_->SetStep(t);
    }
  }
  DropRestore();
  return done;
}

void CudaZeroOptimizer::DropRestore() {
  restore_params_ = {};
  restore_m_ = {};
  restore_v_ = {};
}

int64_t CudaZeroOptimizer::t() const { return offload_ ? host_->t() : device_->t(); }

Result<std::vector<CheckpointRange>> CudaZeroOptimizer::CheckpointRanges(int replica,
                                                                         int replicas,
                                                                         int64_t* adam_t) {
  if (replica != rank_ || replicas != partition_.ranks) {
    return Errorf(ErrorCode::kInternal, "ZeRO shard {} of {} asked for replica {} of {}", rank_,
                  partition_.ranks, replica, replicas);
  }
  *adam_t = t();
  const size_t lo = shard_begin(), n = shard_size();
  std::vector<CheckpointRange> out;
  if (n == 0) return out;
  std::span<const float> params, m, v;
  if (offload_) {
    // The master shard is what the device's shard was copied from: the same values.
    params = {host_->master(), n};
    m = host_->m();
    v = host_->v();
  } else {
    params_host_.resize(n);
    m_host_.resize(n);
    v_host_.resize(n);
    COHORT_TRY_VOID(Copy(params_host_.data(), param_shard(), n * sizeof(float),
                         cudaMemcpyDeviceToHost));
    COHORT_TRY_VOID(device_->CopyStateToHost(m_host_, v_host_));
    params = params_host_;
    m = m_host_;
    v = v_host_;
  }
  out.push_back({CheckpointArray::kParams, lo, n, n, 1, params});
  out.push_back({CheckpointArray::kAdamM, lo, n, n, 1, m});
  out.push_back({CheckpointArray::kAdamV, lo, n, n, 1, v});
  return out;
}

size_t CudaZeroOptimizer::param_bytes() const {
  return stage_ == 3 ? shard_size() * (sizeof(float) + sizeof(cuda::bf16)) : 0;
}

size_t CudaZeroOptimizer::grad_shard_bytes() const {
  return grads_ ? shard_size() * sizeof(float) : 0;
}

size_t CudaZeroOptimizer::optimizer_bytes() const {
  // m and v; offloaded stages 1 and 2, the float32 master shard besides (stage 3's master
  // is its parameter shard, counted there).
  return shard_size() * sizeof(float) * (offload_ && stage_ < 3 ? 3 : 2);
}

size_t CudaZeroOptimizer::scratch_bytes() const {
  return (offload_ ? shard_size() * sizeof(float) : 0) +
         (offload_ && host_->has_bf16_staging() ? shard_size() * sizeof(cuda::bf16) : 0) +
         (grads_ ? grads_->scratch_bytes() : 0) + (params_ ? params_->scratch_bytes() : 0);
}

size_t CudaZeroOptimizer::host_bytes() const {
  if (!offload_) return 0;
  const size_t n = shard_size();
  // The pinned buffers less the master (counted with the optimizer, or stage 3's parameters).
  return optimizer_bytes() + host_->pinned_bytes() - n * sizeof(float) +
         (stage_ == 3 ? n * sizeof(float) : 0) + (offload_params_ ? n * sizeof(cuda::bf16) : 0);
}

}  // namespace cohort::engine
#endif  // COHORT_HAVE_CUDA_ENGINE
