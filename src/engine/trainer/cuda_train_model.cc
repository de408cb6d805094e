// The CUDA TrainModel (GptCudaModel + GptCudaAdamW, or with ZeRO / offload the sharded
// CudaZeroOptimizer of cuda_zero.h) and the choice of this rank's GPU. In a build without
// the CUDA engine the factory functions say so and nothing else is compiled.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "engine/checkpoint/gpt2_safetensors.h"
#include "engine/trainer/train_model.h"

#if COHORT_HAVE_CUDA_ENGINE
#include <cuda_runtime.h>

#include "common/cuda_status.h"
#include "engine/model/cuda_arena.h"
#include "engine/model/gpt_cuda.h"
#include "engine/trainer/cuda_zero.h"
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

// Ψ floats of device memory for a moment (ZeRO-3's export and fresh start move whole
// arrays, which no buffer of the model holds).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> Make(size_t count, int device) {
    DeviceBuffer b;
    b.data_ = static_cast<float*>(COHORT_TRY(DeviceAlloc(
        std::max<size_t>(1, count) * sizeof(float),
        fmt::format("a whole parameter array ({} values) for ZeRO-3", count), device)));
    b.count_ = count;
    return b;
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), count_(o.count_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }
  float* data() { return data_; }
  std::span<float> span() { return {data_, count_}; }

 private:
  float* data_ = nullptr;
  size_t count_ = 0;
};

class CudaTrainModel final : public TrainModel {
 public:
  CudaTrainModel(std::unique_ptr<GptCudaModel> model, std::unique_ptr<GptCudaAdamW> optimizer,
                 void* staging)
      : model_(std::move(model)), optimizer_(std::move(optimizer)), staging_(staging) {}
  // With ZeRO or offload: `zero` is made by the caller over this model (MakeZero).
  CudaTrainModel(std::unique_ptr<GptCudaModel> model, void* staging)
      : model_(std::move(model)), staging_(staging) {}
  void set_zero(std::unique_ptr<CudaZeroOptimizer> zero) { zero_ = std::move(zero); }
  GptCudaModel& model() { return *model_; }
  ~CudaTrainModel() override {
    copier_.reset();  // joined before the optimizer and the model its copies use go
    zero_.reset();
    optimizer_.reset();
    model_.reset();
    if (staging_ != nullptr) (void)cudaFree(staging_);
  }

  // Bytes of device memory for host collectives (RestoreState's chunks the largest).
  static constexpr size_t kStagingBytes = 4096;
  static_assert(kRestoreChunk * sizeof(float) <= kStagingBytes);

  const GptConfig& config() const override { return model_->config(); }
  size_t num_params() const override { return model_->num_parameters(); }

  // ZeRO-3: every Forward gathers parameters from every rank, so sampling and export are
  // collectives (the trainer then calls them on every rank).
  bool model_parallel() const override { return zero_ && zero_->stage() == 3; }

  Result<void> ZeroGrad() override { return zero_ ? zero_->ZeroGrad() : model_->ZeroGrad(); }
  Result<float> Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        int B, int T) override {
    return model_->Forward(tokens, targets, B, T);
  }
  Result<void> Backward(float loss_scale, const GradReadyFn& ready) override {
    // Stages 2 and 3 reduce every micro-batch's pieces into the shard themselves (`ready` is
    // a reducer's, and the trainer makes none for them).
    if (zero_ && zero_->stage() >= 2) return zero_->Backward(loss_scale, /*final=*/true);
    return model_->Backward(loss_scale, ready);
  }
  // Stages 2 and 3: the data-parallel loop (TrainModel's), telling the optimizer which
  // micro-batch is the step's last (offloaded, only its pieces go to the host).
  Result<double> TrainMicrobatches(int count, int B, int T, const LoadMicrobatch& load,
                                   DdpReducer* reducer) override {
    if (zero_ && zero_->offload() && zero_->stage() < 2 && zero_->partition().ranks == 1) {
      return OffloadedOneRank(count, B, T, load);
    }
    if (!zero_ || zero_->stage() < 2) {
      return TrainModel::TrainMicrobatches(count, B, T, load, reducer);
    }
    return MicrobatchLoop(count, B, T, load,
                          [this](float scale, bool last) { return zero_->Backward(scale, /*final=*/last); });
  }
  Result<double> ClipAndStep(double max_norm, float lr) override {
    if (zero_) return zero_->Step(max_norm, lr);
    return optimizer_->Step(lr, max_norm);
  }

  OffloadCopies offload_copies() const override {
    if (!zero_ || !zero_->offload() || zero_->stage() >= 2) return {};
    return {zero_->copied_during_backward(), zero_->shard_size()};
  }
  ZeroShape zero_shape() const override {
    if (!zero_) return {};
    return {zero_->stage(), zero_->partition().ranks, zero_->offload()};
  }
  DdpReducer::ReducedFn grad_reduced() override {
    if (!zero_ || !zero_->offload() || zero_->stage() >= 2) return {};
    CudaZeroOptimizer* z = zero_.get();
    return [z](size_t offset, size_t count) { return z->GradsReduced(offset, count); };
  }

  std::span<float> grads() override { return model_->grads_device(); }
  // float32 master parameters and their bf16 copy, float32 gradients and moments, counted
  // where allocated (the model's arena holds whole parameters and gradients only where the
  // stage keeps them). With ZeRO the moments (and, offloaded, the host master copy) are the
  // shard's; stages 2 and 3 hold the gradient shard, stage 3 the parameter shards; the
  // gradient pieces, the gather buffers and offload's pinned gradient shard are scratch.
  ModelStateBytes model_state_bytes() override {
    const size_t params = model_->params_device().size() * (sizeof(float) + sizeof(cuda::bf16));
    const size_t whole_grads = model_->grads_device().size() * sizeof(float);
    if (zero_) {
      return {params + zero_->param_bytes(), whole_grads + zero_->grad_shard_bytes(),
              zero_->optimizer_bytes(), zero_->scratch_bytes(), zero_->host_bytes()};
    }
    return {params, whole_grads,
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

  // Resume by range: every rank reads what it holds into host memory: the whole parameters
  // (ZeRO-3: its shard of them, the optimizer's request) and the moments (with ZeRO: its
  // shard, the optimizer's request: offloaded straight into the host state); FinishRestore
  // uploads them. No rank reads or holds more than its state.
  CheckpointReadRequest RestoreRequest() override {
    CheckpointReadRequest req;
    if (zero_) req = zero_->RestoreRequest();
    const size_t n = model_->num_parameters();
    if (!zero_ || zero_->stage() < 3) {
      restore_params_.resize(n);
      req.params.push_back({0, n, restore_params_.data()});
    }
    if (!zero_) {
      restore_m_.resize(n);
      restore_v_.resize(n);
      req.adam_m.push_back({0, n, restore_m_.data()});
      req.adam_v.push_back({0, n, restore_v_.data()});
    }
    return req;
  }
  Result<void> FinishRestore(int64_t adam_t) override {
    Result<void> done;
    // The whole parameters first: offloaded stages 1 and 2 copy their master from them.
    if (!restore_params_.empty()) done = model_->CopyParamsFromHost(restore_params_);
    if (done) {
      done = zero_ ? zero_->FinishRestore(adam_t)
                   : optimizer_->Restore(restore_m_, restore_v_, adam_t);
    }
    DropRestore();
    return done;
  }
  void DropRestore() override {
    restore_params_ = {};
    restore_m_ = {};
    restore_v_ = {};
    if (zero_) zero_->DropRestore();
  }
  Result<void> BroadcastParams(comm::Communicator& comm) override {
    if (zero_ && zero_->stage() == 3) {
      // Rank 0's shards gathered into a whole device buffer, broadcast, each rank's taken.
      DeviceBuffer whole = COHORT_TRY(DeviceBuffer::Make(model_->num_parameters(), model_->device()));
      COHORT_TRY_VOID(zero_->GatherAll(whole.data()));
      COHORT_TRY_VOID(BroadcastDevice(comm, whole.span()));
      return zero_->TakeParams(whole.data());
    }
    COHORT_TRY_VOID(BroadcastDevice(comm, model_->params_device()));
    COHORT_TRY_VOID(model_->ParamsWritten());
    return zero_ ? zero_->TakeParams() : Result<void>{};
  }
  Result<void> StateForCheckpoint(CheckpointView& view) override {
    if (zero_) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "ZeRO keeps only this rank's shard of the AdamW state: checkpoints are "
                       "written by range (CheckpointRanges)");
    }
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

  // With ZeRO each rank writes its shard (parameters and moments): the data replicas' shares.
  Result<std::vector<CheckpointRange>> CheckpointRanges(int replica, int replicas,
                                                        int64_t* adam_t) override {
    if (zero_) return zero_->CheckpointRanges(replica, replicas, adam_t);
    return TrainModel::CheckpointRanges(replica, replicas, adam_t);
  }

  // Host floats all-gathered over `comm` (staged through device memory for nccl): ZeRO's
  // norm pairs.
  Result<void> AllGatherHost(comm::Communicator& comm, const float* send, float* recv,
                             const std::vector<size_t>& counts) {
    if (comm.backend() != "nccl") {
      return comm.AllGather(send, recv, counts, comm::DataType::kFloat32);
    }
    size_t total = 0;
    for (size_t c : counts) total += c;
    const size_t mine = counts[static_cast<size_t>(comm.rank())];
    COHORT_TRY_VOID(CheckStaging((total + mine) * sizeof(float)));
    float* dev = static_cast<float*>(staging_);
    COHORT_TRY_VOID(Copy(dev + total, send, mine * sizeof(float), cudaMemcpyHostToDevice));
    COHORT_TRY_VOID(comm.AllGather(dev + total, dev, counts, comm::DataType::kFloat32));
    return Copy(recv, dev, total * sizeof(float), cudaMemcpyDeviceToHost);
  }

  Result<std::vector<float>> NextTokenLogits(std::span<const int32_t> window) override {
    // ZeRO-3: a collective (the gathers), which every rank calls.
    COHORT_TRY(model_->Forward(window, {}, 1, static_cast<int>(window.size())));
    return model_->LastLogits();
  }
  int max_window() const override { return model_->max_seq(); }

  Result<void> Export(const std::string& path) override {
    GptModel host = COHORT_TRY(GptModel::Create(model_->config()));
    if (zero_ && zero_->stage() == 3) {
      // Every rank calls this: the shards gathered; rank 0 writes.
      DeviceBuffer whole = COHORT_TRY(DeviceBuffer::Make(model_->num_parameters(), model_->device()));
      COHORT_TRY_VOID(zero_->GatherAll(whole.data()));
      if (zero_->rank() != 0) return {};
      COHORT_TRY_VOID(Copy(host.params().data(), whole.data(),
                           host.params().size() * sizeof(float), cudaMemcpyDeviceToHost));
      return ExportGpt2(host, path);
    }
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
  // The optimizer offload of stage 1 on one rank (no reducer): the data-parallel loop, the
  // last micro-batch's backward handing each finished piece of the gradient to a copy thread
  // that waits for the piece's kernels and copies it to the host (GradsReduced) while the
  // backward goes on, as the reducer's buckets do over several ranks.
  Result<double> OffloadedOneRank(int count, int B, int T, const LoadMicrobatch& load) {
    if (!copier_) copier_ = std::make_unique<SerialThread>(model_->device());
    return MicrobatchLoop(count, B, T, load, [this](float scale, bool last) -> Result<void> {
      if (!last) return Backward(scale, {});
      auto backward = Backward(scale, [this](size_t offset, size_t n) {
        copier_->Post([this, offset, n]() -> Result<void> {
          COHORT_TRY_VOID(model_->WaitGradsReady(offset, n));
          return zero_->GradsReduced(offset, n);
        });
      });
      auto copied = copier_->Drain();
      if (!copied) (void)copier_->TakeError();  // the next step starts clean
      COHORT_TRY_VOID(backward);
      return copied;
    });
  }

  // A copy on the model's stream (never the legacy default stream), complete on return.
  Result<void> Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, model_->stream()));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(model_->stream()));
    return {};
  }

  std::unique_ptr<GptCudaModel> model_;
  std::unique_ptr<GptCudaAdamW> optimizer_;      // without ZeRO
  std::unique_ptr<CudaZeroOptimizer> zero_;      // with ZeRO or offload
  std::unique_ptr<SerialThread> copier_;         // offloaded stage 1 on one rank
  void* staging_ = nullptr;  // kStagingBytes of device memory
  std::vector<float> params_host_, m_host_, v_host_;  // checkpoint copies
  // RestoreRequest's host buffers until FinishRestore: the whole parameters (not ZeRO-3)
  // and, without ZeRO, the whole moments.
  std::vector<float> restore_params_, restore_m_, restore_v_;
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
                                                       int max_seq, std::string* description,
                                                       const CudaZeroOptions& zero) {
  if (zero.stage < 0 || zero.stage > 3) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "ZeRO stage {} on train.device cuda (built: 0 to 3)", zero.stage);
  }
  if (zero.offload_params && (zero.stage != 3 || !zero.offload)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "parameter offload needs ZeRO stage 3 and the optimizer offload (stage {}, "
                  "optimizer offload {})",
                  zero.stage, zero.offload);
  }
  // Stages 2 and 3 hold no whole gradient buffer, stage 3 no whole parameters.
  GptCudaStorage storage;
  storage.grads = zero.stage < 2;
  storage.params = zero.stage < 3;
  auto model = COHORT_TRY(GptCudaModel::Create(initial.config(), max_batch, max_seq, {}, storage));
  if (storage.params) COHORT_TRY_VOID(model->CopyParamsFromHost(initial.params()));
  void* staging = nullptr;
  if (zero.stage > 0 || zero.offload) {
    COHORT_CUDA_CHECK(cudaMalloc(&staging, CudaTrainModel::kStagingBytes));
    // From here the model owns the staging buffer.
    auto owner = std::make_unique<CudaTrainModel>(std::move(model), staging);
    CudaTrainModel* self = owner.get();
    comm::Communicator* data = zero.data;
    HostAllGather gather = [self, data](const float* send, float* recv,
                                        const std::vector<size_t>& counts) {
      return self->AllGatherHost(*data, send, recv, counts);
    };
    CudaZeroOptimizer::Options options;
    options.stage = std::max(1, zero.stage);
    options.offload = zero.offload;
    options.offload_params = zero.offload_params;
    auto z = COHORT_TRY(CudaZeroOptimizer::Create(self->model(), data, options, adamw,
                                                  initial.params(), std::move(gather)));
    if (description != nullptr) {
      const double gib = 1 << 30;
      // Device memory: the model's arena, the shards the stage keeps there, the scratch
      // (less offload's pinned gradient shard) and, not offloaded, the AdamW state.
      const size_t host_params =
          z->offload_params() ? z->param_bytes() : (z->offload() ? z->shard_size() * 4 : 0);
      const size_t host_scratch =
          z->offload() ? z->shard_size() * sizeof(float) +
                             (z->stage() == 3 && !z->offload_params() ? z->shard_size() * 2 : 0)
                       : 0;
      const size_t device = self->model().device_bytes() + z->param_bytes() - host_params +
                            z->grad_shard_bytes() + z->scratch_bytes() - host_scratch +
                            (z->offload() ? 0 : z->optimizer_bytes());
      *description = fmt::format(
          "{:.2f} GiB of device memory (model and activations for {} x {} tokens {:.2f} GiB, "
          "ZeRO-{} shards: parameters {:.2f} GiB, gradients {:.2f} GiB, scratch {:.2f} GiB; "
          "AdamW state of {} of {} parameters {:.2f} GiB {}{})",
          device / gib, max_batch, max_seq, self->model().device_bytes() / gib, z->stage(),
          z->param_bytes() / gib, z->grad_shard_bytes() / gib, z->scratch_bytes() / gib,
          z->shard_size(), z->partition().total, z->optimizer_bytes() / gib,
          z->offload() ? "in host memory, stepped on the CPU" : "on the device",
          z->offload_params() ? "; the parameter shard in host memory too" : "");
    }
    self->set_zero(std::move(z));
    return std::unique_ptr<TrainModel>(std::move(owner));
  }
  auto optimizer = COHORT_TRY(GptCudaAdamW::Create(*model, adamw));
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
                                                       int, std::string*,
                                                       const CudaZeroOptions&) {
  return MakeError(ErrorCode::kUnsatisfiable, kNotBuilt);
}

#endif  // COHORT_HAVE_CUDA_ENGINE

}  // namespace cohort::engine
