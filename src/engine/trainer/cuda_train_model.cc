// The CUDA TrainModel (GptCudaModel + GptCudaAdamW) and the choice of this rank's GPU. In a
// build without the CUDA engine the factory functions say so and nothing else is compiled.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "engine/checkpoint/gpt2_safetensors.h"
#include "engine/trainer/train_model.h"

#if COHORT_HAVE_CUDA_ENGINE
#include <cuda_runtime.h>

#include "common/cuda_status.h"
#include "engine/model/gpt_cuda.h"
#endif

namespace cohort::engine {

#if COHORT_HAVE_CUDA_ENGINE

namespace {

constexpr const char* kNoDevice = "train.device is cuda but no CUDA device is usable";

// The error for "no usable GPU", with the CUDA status that says why.
Error NoDevice(const std::string& reason) {
  std::string why = reason;
  // CudaDeviceCount() says "no CUDA device: <error>": do not repeat the words.
  if (why.starts_with("no CUDA device: ")) why = why.substr(16);
  return Error(ErrorCode::kUnavailable, fmt::format("{}: {}", kNoDevice, why));
}

Error NoDevice(cudaError_t status, const char* what) {
  (void)cudaGetLastError();
  return NoDevice(fmt::format("{}: {}: {}", what, cudaGetErrorName(status),
                              cudaGetErrorString(status)));
}

class CudaTrainModel final : public TrainModel {
 public:
  CudaTrainModel(std::unique_ptr<GptCudaModel> model, std::unique_ptr<GptCudaAdamW> optimizer,
                 void* staging)
      : model_(std::move(model)), optimizer_(std::move(optimizer)), staging_(staging) {}
  ~CudaTrainModel() override {
    optimizer_.reset();
    model_.reset();
    if (staging_ != nullptr) (void)cudaFree(staging_);
  }

  // Bytes of device memory for host collectives (the resume header is 72 bytes).
  static constexpr size_t kStagingBytes = 4096;

  const GptConfig& config() const override { return model_->config(); }
  size_t num_params() const override { return model_->num_parameters(); }

  Result<void> ZeroGrad() override { return model_->ZeroGrad(); }
  Result<float> Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        int B, int T) override {
    return model_->Forward(tokens, targets, B, T);
  }
  Result<void> Backward(float loss_scale, const GradReadyFn& ready) override {
    return model_->Backward(loss_scale, ready);
  }
  Result<double> ClipAndStep(double max_norm, float lr) override {
    return optimizer_->Step(lr, max_norm);
  }

  std::span<float> grads() override { return model_->grads_device(); }
  // float32 master parameters and their bf16 copy, float32 gradients and moments.
  ModelStateBytes model_state_bytes() override {
    const size_t n = model_->num_parameters();
    return {model_->params_device().size() * sizeof(float) + n * sizeof(cuda::bf16),
            model_->grads_device().size() * sizeof(float),
            (optimizer_->m_device().size() + optimizer_->v_device().size()) * sizeof(float)};
  }
  DdpReducer::WaitReadyFn grad_wait() override {
    GptCudaModel* model = model_.get();
    return [model](size_t offset, size_t count) { return model->WaitGradsReady(offset, count); };
  }

  Result<void> BroadcastHost(comm::Communicator& comm, void* data, size_t count,
                             comm::DataType type) override {
    if (comm.backend() != "nccl") return comm.Broadcast(data, count, type, 0);
    const size_t bytes = count * comm::SizeOf(type);
    COHORT_TRY_VOID(CheckStaging(bytes));
    COHORT_TRY_VOID(Copy(staging_, data, bytes, cudaMemcpyHostToDevice));
    COHORT_TRY_VOID(comm.Broadcast(staging_, count, type, 0));
    return Copy(data, staging_, bytes, cudaMemcpyDeviceToHost);
  }
  Result<void> AllReduceHost(comm::Communicator& comm, float* data, size_t count,
                             comm::ReduceOp op) override {
    if (comm.backend() != "nccl") {
      return comm.AllReduce(data, data, count, comm::DataType::kFloat32, op);
    }
    const size_t bytes = count * sizeof(float);
    COHORT_TRY_VOID(CheckStaging(bytes));
    COHORT_TRY_VOID(Copy(staging_, data, bytes, cudaMemcpyHostToDevice));
    COHORT_TRY_VOID(comm.AllReduce(staging_, staging_, count, comm::DataType::kFloat32, op));
    return Copy(data, staging_, bytes, cudaMemcpyDeviceToHost);
  }

  Result<void> RestoreState(comm::Communicator* comm, Checkpoint* ckpt, int64_t adam_t) override {
    if (ckpt) {
      COHORT_TRY_VOID(model_->CopyParamsFromHost(ckpt->params));
      COHORT_TRY_VOID(optimizer_->Restore(ckpt->adam_m, ckpt->adam_v, adam_t));
    }
    if (comm) {
      // Uploads above are complete (they synchronise); the broadcasts run where the state
      // lives and return when done.
      COHORT_TRY_VOID(BroadcastDevice(*comm, model_->params_device()));
      COHORT_TRY_VOID(BroadcastDevice(*comm, optimizer_->m_device()));
      COHORT_TRY_VOID(BroadcastDevice(*comm, optimizer_->v_device()));
      COHORT_TRY_VOID(model_->ParamsWritten());
    }
    return optimizer_->SetStep(adam_t);
  }
  Result<void> BroadcastParams(comm::Communicator& comm) override {
    COHORT_TRY_VOID(BroadcastDevice(comm, model_->params_device()));
    return model_->ParamsWritten();
  }
  Result<void> StateForCheckpoint(CheckpointView& view) override {
    const size_t n = model_->num_parameters();
    params_host_.resize(n);
    m_host_.resize(n);
    v_host_.resize(n);
    COHORT_TRY_VOID(model_->CopyParamsToHost(params_host_));
    COHORT_TRY_VOID(optimizer_->CopyStateToHost(m_host_, v_host_));
    view.params = params_host_;
    view.adam_m = m_host_;
    view.adam_v = v_host_;
    view.adam_t = optimizer_->t();
    return {};
  }

  Result<std::vector<float>> NextTokenLogits(std::span<const int32_t> window) override {
    COHORT_TRY(model_->Forward(window, {}, 1, static_cast<int>(window.size())));
    return model_->LastLogits();
  }
  int max_window() const override { return model_->max_seq(); }

  Result<void> Export(const std::string& path) override {
    GptModel host = COHORT_TRY(GptModel::Create(model_->config()));
    COHORT_TRY_VOID(model_->CopyParamsToHost(host.params()));
    return ExportGpt2(host, path);
  }

 private:
  Result<void> CheckStaging(size_t bytes) const {
    if (bytes > kStagingBytes) {
      return Errorf(ErrorCode::kInternal, "host collective of {} bytes exceeds the {}-byte staging",
                    bytes, kStagingBytes);
    }
    return {};
  }
  // A broadcast from rank 0 of a device buffer (nccl) — or, for a host-memory backend,
  // through a host copy (not used by the trainer, which always pairs cuda with nccl).
  Result<void> BroadcastDevice(comm::Communicator& comm, std::span<float> device) {
    if (comm.backend() == "nccl") {
      return comm.Broadcast(device.data(), device.size(), comm::DataType::kFloat32, 0);
    }
    std::vector<float> host(device.size());
    const size_t bytes = host.size() * sizeof(float);
    COHORT_TRY_VOID(Copy(host.data(), device.data(), bytes, cudaMemcpyDeviceToHost));
    COHORT_TRY_VOID(comm.Broadcast(host.data(), host.size(), comm::DataType::kFloat32, 0));
    return Copy(device.data(), host.data(), bytes, cudaMemcpyHostToDevice);
  }
  // A copy on the model's stream (never the legacy default stream), complete on return.
  Result<void> Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, model_->stream()));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(model_->stream()));
    return {};
  }

  std::unique_ptr<GptCudaModel> model_;
  std::unique_ptr<GptCudaAdamW> optimizer_;
  void* staging_ = nullptr;  // kStagingBytes of device memory
  std::vector<float> params_host_, m_host_, v_host_;  // checkpoint copies
};

}  // namespace

bool CudaTrainingBuilt() { return true; }

Result<CudaDeviceChoice> SelectCudaDevice(int local_rank) {
  auto count = CudaDeviceCount();
  if (!count) return std::unexpected(NoDevice(count.error().message));
  CudaDeviceChoice choice;
  choice.visible = *count;
  if (local_rank >= 0 && local_rank < *count) {
    choice.device = local_rank;
  } else if (*count == 1) {
    choice.device = 0;
  } else {
    return std::unexpected(NoDevice(fmt::format(
        "LOCAL_RANK is {} but this process sees {} GPUs (CUDA_VISIBLE_DEVICES); give each "
        "local rank its own GPU",
        local_rank, *count)));
  }
  if (cudaError_t st = cudaSetDevice(choice.device); st != cudaSuccess) {
    return std::unexpected(NoDevice(st, "cudaSetDevice"));
  }
  // Create the context now, so that a GPU that cannot be used fails here, by name.
  if (cudaError_t st = cudaFree(nullptr); st != cudaSuccess) {
    return std::unexpected(NoDevice(st, "creating a CUDA context"));
  }
  cudaDeviceProp prop{};
  if (cudaError_t st = cudaGetDeviceProperties(&prop, choice.device); st != cudaSuccess) {
    return std::unexpected(NoDevice(st, "cudaGetDeviceProperties"));
  }
  choice.name = prop.name;
  choice.memory = prop.totalGlobalMem;
  if (auto peak = GpuPeakBf16(choice.name)) {
    choice.peak = *peak;
  } else {
    choice.peak = DevicePeak{choice.name, 0.0};
  }
  return choice;
}

Result<std::unique_ptr<TrainModel>> MakeCudaTrainModel(const GptModel& initial,
                                                       const AdamWConfig& adamw, int max_batch,
                                                       int max_seq, std::string* description) {
  auto model = COHORT_TRY(GptCudaModel::Create(initial.config(), max_batch, max_seq));
  COHORT_TRY_VOID(model->CopyParamsFromHost(initial.params()));
  auto optimizer = COHORT_TRY(GptCudaAdamW::Create(*model, adamw));
  void* staging = nullptr;
  COHORT_CUDA_CHECK(cudaMalloc(&staging, CudaTrainModel::kStagingBytes));
  if (description != nullptr) {
    *description = fmt::format(
        "{:.2f} GiB of device memory (model and activations for {} x {} tokens {:.2f} GiB, "
        "AdamW state {:.2f} GiB)",
        (model->device_bytes() + optimizer->device_bytes()) / double(1 << 30), max_batch,
        max_seq, model->device_bytes() / double(1 << 30),
        optimizer->device_bytes() / double(1 << 30));
  }
  return std::unique_ptr<TrainModel>(
      new CudaTrainModel(std::move(model), std::move(optimizer), staging));
}

#else  // !COHORT_HAVE_CUDA_ENGINE

namespace {
constexpr const char* kNotBuilt = "train.device is cuda but this build has no CUDA support";
}  // namespace

bool CudaTrainingBuilt() { return false; }

Result<CudaDeviceChoice> SelectCudaDevice(int) {
  return MakeError(ErrorCode::kUnsatisfiable, kNotBuilt);
}

Result<std::unique_ptr<TrainModel>> MakeCudaTrainModel(const GptModel&, const AdamWConfig&, int,
                                                       int, std::string*) {
  return MakeError(ErrorCode::kUnsatisfiable, kNotBuilt);
}

#endif  // COHORT_HAVE_CUDA_ENGINE

}  // namespace cohort::engine
