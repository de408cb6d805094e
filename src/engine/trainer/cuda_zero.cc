// CudaZeroOptimizer (cuda_zero.h): ZeRO stages 1 and 2 and the optimizer offload for the
// CUDA model. Compiled only with the CUDA engine.
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

CudaZeroOptimizer::CudaZeroOptimizer(GptCudaModel& model, comm::Communicator* data, int stage,
                                     bool offload, HostAllGather host_all_gather)
    : model_(model),
      data_(data),
      stage_(stage),
      offload_(offload),
      rank_(data ? data->rank() : 0),
      partition_{model.num_parameters(), data ? data->size() : 1},
      host_all_gather_(std::move(host_all_gather)) {}

CudaZeroOptimizer::~CudaZeroOptimizer() {
  (void)cudaStreamSynchronize(model_.stream());
  if (grad_shard_ != nullptr) (void)cudaFree(grad_shard_);
  if (master_ != nullptr) (void)cudaFreeHost(master_);
  if (grads_host_ != nullptr) (void)cudaFreeHost(grads_host_);
  if (copy_stream_ != nullptr) (void)cudaStreamDestroy(copy_stream_);
  for (void* p : {static_cast<void*>(norm_sq_), static_cast<void*>(clip_scale_), norm_scratch_}) {
    if (p != nullptr) (void)cudaFree(p);
  }
  if (norm_host_ != nullptr) (void)cudaFreeHost(norm_host_);
  if (scale_host_ != nullptr) (void)cudaFreeHost(scale_host_);
}

Result<std::unique_ptr<CudaZeroOptimizer>> CudaZeroOptimizer::Create(
    GptCudaModel& model, comm::Communicator* data, int stage, bool offload,
    const AdamWConfig& config, HostAllGather host_all_gather) {
  if (stage < 1 || stage > 2) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "CudaZeroOptimizer: ZeRO stage {} (built on CUDA: 1 and 2)", stage);
  }
  std::unique_ptr<CudaZeroOptimizer> z(
      new CudaZeroOptimizer(model, data, stage, offload, std::move(host_all_gather)));
  const size_t lo = z->shard_begin(), n = z->shard_size();
  COHORT_CUDA_CHECK(cudaSetDevice(model.device()));
  if (stage == 2 && z->partition_.ranks > 1) {
    z->grad_shard_ = static_cast<float*>(COHORT_TRY(DeviceAlloc(
        std::max<size_t>(1, n) * sizeof(float),
        fmt::format("the ZeRO-2 gradient shard ({} values)", n), model.device())));
  }
  std::vector<DecayRange> ranges;
  for (const ParamTensor& t : model.tensors()) {
    ranges.push_back({t.offset, t.numel, t.weight_decay});
  }
  if (!offload) {
    z->device_ = COHORT_TRY(CudaAdamW::Create(CutDecayRanges(ranges, lo, lo + n), config,
                                              model.options().fused_adamw, model.device(),
                                              model.stream()));
    const int dev = model.device();
    z->norm_sq_ = static_cast<double*>(COHORT_TRY(DeviceAlloc(sizeof(double), "the ZeRO norm", dev)));
    z->clip_scale_ = static_cast<float*>(COHORT_TRY(DeviceAlloc(sizeof(float), "the clip factor", dev)));
    z->norm_scratch_ = COHORT_TRY(DeviceAlloc(std::max<size_t>(1, cuda::GradNormScratchBytes(n)),
                                              "the ZeRO norm's scratch", dev));
    void* pinned = nullptr;
    COHORT_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(double)));
    z->norm_host_ = static_cast<double*>(pinned);
    COHORT_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(float)));
    z->scale_host_ = static_cast<float*>(pinned);
    return z;
  }
  z->host_ = COHORT_TRY(AdamW::Create(n, CutDecayRanges(ranges, lo, lo + n), config));
  void* pinned = nullptr;
  const size_t bytes = std::max<size_t>(1, n) * sizeof(float);
  COHORT_CUDA_CHECK(cudaMallocHost(&pinned, bytes));
  z->master_ = static_cast<float*>(pinned);
  COHORT_CUDA_CHECK(cudaMallocHost(&pinned, bytes));
  z->grads_host_ = static_cast<float*>(pinned);
  COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&z->copy_stream_, cudaStreamNonBlocking));
  COHORT_TRY_VOID(z->TakeParams());  // the master shard starts as the model's parameters
  return z;
}

Result<void> CudaZeroOptimizer::Copy(void* dst, const void* src, size_t bytes, int kind) {
  if (bytes == 0) return {};
  COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, static_cast<cudaMemcpyKind>(kind),
                                    model_.stream()));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(model_.stream()));
  return {};
}

std::optional<DdpReducer::ShardTarget> CudaZeroOptimizer::reduce_target() {
  if (grad_shard_ == nullptr) return std::nullopt;
  return DdpReducer::ShardTarget{partition_, {grad_shard_, shard_size()}};
}

Result<void> CudaZeroOptimizer::GradsReduced(size_t offset, size_t count) {
  const size_t lo = std::max(offset, shard_begin());
  const size_t hi = std::min(offset + count, shard_begin() + shard_size());
  if (!offload_ || hi <= lo) return {};
  // The reducer's thread: make the model's device current here. The collective returned,
  // so the bucket's average is in device memory.
  COHORT_CUDA_CHECK(cudaSetDevice(model_.device()));
  const size_t at = lo - shard_begin();
  COHORT_CUDA_CHECK(cudaMemcpyAsync(grads_host_ + at, grad_shard() + at, (hi - lo) * sizeof(float),
                                    cudaMemcpyDeviceToHost, copy_stream_));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  copied_ += hi - lo;
  return {};
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
  if (grad_shard_ != nullptr) return grad_shard_;
  return model_.grads_device().data() + shard_begin();
}

Result<double> CudaZeroOptimizer::Step(double max_norm, float lr) {
  COHORT_CUDA_CHECK(cudaSetDevice(model_.device()));
  const size_t n = shard_size();
  double squares = 0;
  if (offload_) {
    // Over several ranks the reducer's buckets brought the shard to the host during the
    // backward (GradsReduced); on one rank there is no reducer: the whole shard now.
    const size_t copied = copied_.exchange(0);
    if (partition_.ranks == 1) {
      COHORT_TRY_VOID(Copy(grads_host_, grad_shard(), n * sizeof(float), cudaMemcpyDeviceToHost));
    } else if (copied != n) {
      return Errorf(ErrorCode::kInternal,
                    "optimizer offload: the reducer copied {} of the gradient shard's {} values "
                    "to the host during the backward (DdpReducer without grad_reduced()?)",
                    copied, n);
    }
    squares = SquaredNorm({grads_host_, n});
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
    ClipToNorm({grads_host_, n}, norm, max_norm_f);
    host_->Step({master_, n}, {grads_host_, n}, lr);
    COHORT_TRY_VOID(Copy(model_.params_device().data() + shard_begin(), master_,
                         n * sizeof(float), cudaMemcpyHostToDevice));
  } else {
    // The factor reaches the update through device memory, as GptCudaAdamW's own does.
    cudaStream_t st = model_.stream();
    *scale_host_ = ClipFactor(norm, max_norm_f);
    COHORT_CUDA_CHECK(cudaMemcpyAsync(clip_scale_, scale_host_, sizeof(float),
                                      cudaMemcpyHostToDevice, st));
    const size_t lo = shard_begin();
    COHORT_TRY_VOID(device_->Step(model_.params_device().data() + lo,
                                  model_.params_bf16_device() + lo, grad_shard(), lr, clip_scale_));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(st));
  }
  COHORT_TRY_VOID(GatherParams());
  return norm;
}

Result<void> CudaZeroOptimizer::GatherParams() {
  if (data_ != nullptr && partition_.ranks > 1) {
    // The send copy of this rank's shard goes through the gradient buffer (consumed by the
    // step; the next step's ZeroGrad clears it): the receive buffer holds the shard.
    float* params = model_.params_device().data();
    float* send = model_.grads_device().data() + shard_begin();
    COHORT_TRY_VOID(Copy(send, params + shard_begin(), shard_size() * sizeof(float),
                         cudaMemcpyDeviceToDevice));
    COHORT_TRY_VOID(data_->AllGather(send, params, partition_.counts(), comm::DataType::kFloat32));
  }
  return model_.ParamsWritten();
}

Result<void> CudaZeroOptimizer::RestoreMoment(bool second, const float* whole_device) {
  const size_t n = shard_size();
  const float* mine = whole_device + shard_begin();
  if (offload_) {
    float* dst = second ? host_->v().data() : host_->m().data();
    return Copy(dst, mine, n * sizeof(float), cudaMemcpyDeviceToHost);
  }
  float* dst = second ? device_->v_device().data() : device_->m_device().data();
  return Copy(dst, mine, n * sizeof(float), cudaMemcpyDeviceToDevice);
}

Result<void> CudaZeroOptimizer::TakeParams() {
  if (!offload_) return {};
  return Copy(master_, model_.params_device().data() + shard_begin(),
              shard_size() * sizeof(float), cudaMemcpyDeviceToHost);
}

Result<void> CudaZeroOptimizer::Restored(int64_t t) {
  if (!offload_) return device_->SetStep(t);
  COHORT_TRY_VOID(TakeParams());
  // AdamW::Restore wants whole moments: its own, unchanged, with the new step count.
  std::vector<float> m(host_->m().begin(), host_->m().end());
  std::vector<float> v(host_->v().begin(), host_->v().end());
  return host_->Restore(m, v, t);
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
    params = {master_, n};
    m = host_->m();
    v = host_->v();
  } else {
    params_host_.resize(n);
    m_host_.resize(n);
    v_host_.resize(n);
    COHORT_TRY_VOID(Copy(params_host_.data(), model_.params_device().data() + lo,
                         n * sizeof(float), cudaMemcpyDeviceToHost));
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

size_t CudaZeroOptimizer::grad_shard_bytes() const {
  return grad_shard_ != nullptr ? shard_size() * sizeof(float) : 0;
}

size_t CudaZeroOptimizer::optimizer_bytes() const {
  // m and v; offloaded, the float32 master shard besides (pinned host memory).
  return shard_size() * sizeof(float) * (offload_ ? 3 : 2);
}

size_t CudaZeroOptimizer::staging_bytes() const {
  return offload_ ? shard_size() * sizeof(float) : 0;
}

}  // namespace cohort::engine
#endif  // COHORT_HAVE_CUDA_ENGINE
