// The CUDA ShardEngine: GptShardCudaModel on this rank's GPU with CudaAdamW (the fused update
// of the single-device model) over the shard's float32 master parameters. The gradient norm
// is summed per run of the tensors that count (kernels/cuda/grad_norm.cuh, one launch each,
// added on the host in double); the clipping factor for the global norm goes back to the
// device for the update to read. Pipeline messages are device buffers on the model's device
// (DeviceMessageMemory), or host buffers staged through two device buffers around each call.
// In a build without the CUDA engine the factory says so.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "engine/trainer/shard_engine.h"

#if COHORT_HAVE_CUDA_ENGINE
#include <cuda_runtime.h>

#include "common/cuda_status.h"
#include "engine/kernels/cuda/grad_norm.cuh"
#include "engine/model/cuda_adamw.h"
#include "engine/model/cuda_arena.h"
#include "engine/model/gpt_shard_cuda.h"
#endif

namespace cohort::engine {

#if COHORT_HAVE_CUDA_ENGINE

namespace {

namespace k = ::cohort::engine::cuda;

struct Range {
  size_t offset = 0, count = 0;
};

// Pipeline messages in this device's memory.
class DeviceMessageMemory final : public MessageMemory {
 public:
  explicit DeviceMessageMemory(int device) : device_(device) {}
  bool on_device() const override { return true; }
  Result<float*> Allocate(size_t count) override {
    return static_cast<float*>(COHORT_TRY(DeviceAlloc(count * sizeof(float),
                                                      "a pipeline message buffer", device_)));
  }
  void Free(float* data) override {
    if (data == nullptr) return;
    (void)cudaSetDevice(device_);
    (void)cudaFree(data);
  }

 private:
  const int device_;
};

class CudaShardEngine final : public ShardEngineOver<GptShardCudaModel> {
 public:
  CudaShardEngine(std::unique_ptr<GptShardCudaModel> shard, bool host_messages)
      : ShardEngineOver(std::move(shard)), host_messages_(host_messages),
        device_messages_(shard_->device()) {}
  ~CudaShardEngine() override {
    (void)cudaSetDevice(shard_->device());
    (void)cudaStreamSynchronize(shard_->stream());
    if (arena_ != nullptr) (void)cudaFree(arena_);
    device_messages_.Free(stage_in_);
    device_messages_.Free(stage_out_);
  }

  MessageMemory& message_memory() override {
    if (host_messages_) return host_memory_;
    return device_messages_;
  }

  // Host messages go through device buffers: the copies the model made before it took device
  // messages, so the bits are the same.
  Result<float> Forward(int chunk, int slot, const MicrobatchTokens& batch, const float* input,
                        float* output) override {
    if (!host_messages_) return shard_->Forward(chunk, slot, batch, input, output);
    const size_t n = MessageSize(batch.B, batch.T);
    COHORT_TRY_VOID(Stage(n));
    if (input != nullptr) COHORT_TRY_VOID(CopyIn(input, n));
    const float loss = COHORT_TRY(shard_->Forward(chunk, slot, batch, input ? stage_in_ : nullptr,
                                                  output ? stage_out_ : nullptr));
    if (output != nullptr) COHORT_TRY_VOID(CopyOut(output, n));
    return loss;
  }
  Result<void> Backward(int chunk, int slot, float loss_scale, const float* doutput,
                        float* dinput, const GradReadyFn& ready) override {
    if (!host_messages_) return shard_->Backward(chunk, slot, loss_scale, doutput, dinput, ready);
    // The stash knows the shape; B·T·C from the forward that made it.
    const size_t n = staged_;
    if (doutput != nullptr) COHORT_TRY_VOID(CopyIn(doutput, n));
    COHORT_TRY_VOID(shard_->Backward(chunk, slot, loss_scale, doutput ? stage_in_ : nullptr,
                                     dinput ? stage_out_ : nullptr, ready));
    if (dinput != nullptr) COHORT_TRY_VOID(CopyOut(dinput, n));
    return {};
  }
  DdpReducer::WaitReadyFn grad_wait() override {
    return [this](size_t offset, size_t count) { return shard_->WaitGradsReady(offset, count); };
  }

  Result<void> Init(const AdamWConfig& adamw) {
    const GptShardLayout& layout = shard_->layout();
    adam_ = COHORT_TRY(CudaAdamW::Create(ShardDecayRanges(layout), adamw, /*fused=*/true,
                                         shard_->device(), shard_->stream()));
    // The runs of tensors that count in the norm, merged where they touch.
    std::vector<ShardTensor> sorted = layout.tensors;
    std::sort(sorted.begin(), sorted.end(), [](const ShardTensor& a, const ShardTensor& b) {
      return a.local.offset < b.local.offset;
    });
    size_t largest = 0;
    for (const ShardTensor& t : sorted) {
      if (!t.counts_in_norm || t.local.numel == 0) continue;
      if (!norm_runs_.empty() &&
          norm_runs_.back().offset + norm_runs_.back().count == t.local.offset) {
        norm_runs_.back().count += t.local.numel;
      } else {
        norm_runs_.push_back({t.local.offset, t.local.numel});
      }
      largest = std::max(largest, norm_runs_.back().count);
    }
    COHORT_CUDA_CHECK(cudaSetDevice(shard_->device()));
    auto carve = [&](Carver& cv) {
      norm_sq_ = cv.Take<double>(std::max<size_t>(1, norm_runs_.size()), nullptr);
      unused_scale_ = cv.Take<float>(1, nullptr);
      clip_scale_ = cv.Take<float>(1, nullptr);
      scratch_ = cv.Take<char>(std::max<size_t>(1, k::GradNormScratchBytes(largest)), nullptr);
    };
    Carver sizing(nullptr);
    carve(sizing);
    arena_bytes_ = sizing.total();
    arena_ = static_cast<char*>(COHORT_TRY(
        DeviceAlloc(arena_bytes_, "the shard's gradient norm scratch", shard_->device())));
    Carver cv(arena_);
    carve(cv);
    norm_host_.resize(norm_runs_.size());
    return {};
  }


  Result<void> ZeroGrad() override { return shard_->ZeroGrad(); }
  std::span<float> grads() override { return shard_->grads_device(); }
  Result<void> WaitGrads() override { return shard_->Synchronize(); }

  Result<double> SquaredGradNorm() override {
    if (norm_runs_.empty()) return 0.0;
    COHORT_CUDA_CHECK(cudaSetDevice(shard_->device()));
    cudaStream_t st = shard_->stream();
    const float* g = shard_->grads_device().data();
    for (size_t i = 0; i < norm_runs_.size(); ++i) {
      k::GlobalNormAndClipScale(norm_sq_ + i, unused_scale_, g + norm_runs_[i].offset,
                                norm_runs_[i].count, 0.0f, scratch_, st);
    }
    COHORT_CUDA_CHECK(cudaGetLastError());  // GlobalNormAndClipScale
    COHORT_CUDA_CHECK(cudaMemcpyAsync(norm_host_.data(), norm_sq_,
                                      norm_host_.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                      st));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(st));
    double sq = 0;
    for (double s : norm_host_) sq += s;
    return sq;
  }

  Result<void> Step(double norm, double max_norm, float lr) override {
    COHORT_CUDA_CHECK(cudaSetDevice(shard_->device()));
    cudaStream_t st = shard_->stream();
    // ClipToNorm's factor (grad_clip.h), applied inside the update: the same float product.
    const float* scale = nullptr;
    if (max_norm > 0.0) {
      const double coef = max_norm / (norm + 1e-6);
      if (coef < 1.0) {
        clip_host_ = static_cast<float>(coef);
        COHORT_CUDA_CHECK(cudaMemcpyAsync(clip_scale_, &clip_host_, sizeof(float),
                                          cudaMemcpyHostToDevice, st));
        scale = clip_scale_;
      }
    }
    COHORT_TRY_VOID(adam_->Step(shard_->params_device().data(), shard_->params_bf16_device(),
                                shard_->grads_device().data(), lr, scale));
    return shard_->Synchronize();
  }

  Result<HostState> StateOnHost() override {
    const size_t n = shard_->layout().total;
    params_host_.resize(n);
    m_host_.resize(n);
    v_host_.resize(n);
    COHORT_TRY_VOID(shard_->CopyParamsToHost(params_host_));
    COHORT_TRY_VOID(adam_->CopyStateToHost(m_host_, v_host_));
    return HostState{params_host_, m_host_, v_host_, 0, adam_->t()};
  }
  Result<void> SetParams(std::span<const float> params) override {
    return shard_->CopyParamsFromHost(params);
  }
  Result<void> Restore(std::span<const float> params, std::span<const float> m,
                       std::span<const float> v, int64_t t) override {
    COHORT_TRY_VOID(SetParams(params));
    return adam_->Restore(m, v, t);
  }

  // float32 master parameters and their bf16 copy, float32 gradients and moments.
  TrainModel::ModelStateBytes state_bytes() const override {
    const size_t n = shard_->layout().total;
    return {n * (sizeof(float) + sizeof(k::bf16)), n * sizeof(float),
            2 * adam_->n() * sizeof(float)};
  }
  std::string DescribeMemory() const override {
    const TrainModel::ModelStateBytes b = state_bytes();
    return fmt::format(
        "{:.1f} MB of device memory for float32 parameters (and their bf16 copy), gradients and "
        "AdamW moments (activations apart)",
        (b.params + b.grads + b.optimizer + arena_bytes_) / 1e6);
  }

 private:
  std::unique_ptr<CudaAdamW> adam_;
  std::vector<Range> norm_runs_;  // the tensors that count in the norm, merged
  char* arena_ = nullptr;         // norm_sq_, the scale slots and the norm's scratch
  size_t arena_bytes_ = 0;
  double* norm_sq_ = nullptr;     // one per norm run (device)
  float* unused_scale_ = nullptr;  // the norm kernel's clip factor, not used here
  float* clip_scale_ = nullptr;    // the factor the update reads (device)
  void* scratch_ = nullptr;
  float clip_host_ = 1.0f;  // the source of clip_scale_'s upload
  std::vector<double> norm_host_;
  std::vector<float> params_host_, m_host_, v_host_;  // StateOnHost's copies

  size_t MessageSize(int B, int T) const {
    return static_cast<size_t>(B) * T * shard_->layout().spec.config.n_embd;
  }
  // Device buffers of at least `n` floats for staged host messages (grown, never shrunk).
  Result<void> Stage(size_t n) {
    if (n <= staged_capacity_) {
      staged_ = n;
      return {};
    }
    COHORT_TRY_VOID(shard_->Synchronize());
    device_messages_.Free(stage_in_);
    device_messages_.Free(stage_out_);
    stage_in_ = stage_out_ = nullptr;
    staged_capacity_ = 0;
    stage_in_ = COHORT_TRY(device_messages_.Allocate(n));
    stage_out_ = COHORT_TRY(device_messages_.Allocate(n));
    staged_capacity_ = staged_ = n;
    return {};
  }
  Result<void> CopyIn(const float* host, size_t n) {
    COHORT_CUDA_CHECK(cudaSetDevice(shard_->device()));
    COHORT_CUDA_CHECK(cudaMemcpyAsync(stage_in_, host, n * sizeof(float), cudaMemcpyHostToDevice,
                                      shard_->stream()));
    return {};
  }
  Result<void> CopyOut(float* host, size_t n) {
    COHORT_CUDA_CHECK(cudaSetDevice(shard_->device()));
    COHORT_CUDA_CHECK(cudaMemcpyAsync(host, stage_out_, n * sizeof(float), cudaMemcpyDeviceToHost,
                                      shard_->stream()));
    return shard_->Synchronize();
  }

  const bool host_messages_;
  DeviceMessageMemory device_messages_;
  HostMessageMemory host_memory_;
  float* stage_in_ = nullptr;  // host messages: the device copies of input / doutput
  float* stage_out_ = nullptr;  // ... and of output / dinput
  size_t staged_ = 0, staged_capacity_ = 0;  // floats of the current message, allocated
};

}  // namespace

Result<std::unique_ptr<ShardEngine>> MakeCudaShardEngine(const ShardSpec& spec,
                                                         TensorParallelGroup& tp,
                                                         const AdamWConfig& adamw,
                                                         bool host_messages) {
  auto engine = std::make_unique<CudaShardEngine>(
      COHORT_TRY(GptShardCudaModel::Create(spec, tp)), host_messages);
  COHORT_TRY_VOID(engine->Init(adamw));
  return std::unique_ptr<ShardEngine>(std::move(engine));
}

#else  // !COHORT_HAVE_CUDA_ENGINE

Result<std::unique_ptr<ShardEngine>> MakeCudaShardEngine(const ShardSpec&, TensorParallelGroup&,
                                                         const AdamWConfig&, bool) {
  return MakeError(ErrorCode::kUnsatisfiable,
                   "train.device is cuda but this build has no CUDA support");
}

#endif  // COHORT_HAVE_CUDA_ENGINE

}  // namespace cohort::engine
