// The CUDA ShardEngine: GptShardCudaModel on this rank's GPU with CudaAdamW (the fused update
// of the single-device model) over the shard's float32 master parameters. The gradient norm
// is summed per run of the tensors that count (kernels/cuda/grad_norm.cuh, one launch each,
// added on the host in double); the clipping factor for the global norm goes back to the
// device for the update to read. Pipeline messages are device buffers on the model's device
// (DeviceMessageMemory), or host buffers staged through two device buffers around each call.
//
// ZeRO over the data-parallel group of this tensor/pipeline position (`parallel.zero`, the
// CPU layout's design, shard_zero.h, on the CUDA pieces of cuda_zero_pieces.h): the shard
// buffer is cut over the data group (ZeroPartition) and CudaAdamW holds the moments of this
// rank's part only; after the update the parts' float32 parameters are all-gathered (the send
// copy through consumed gradient memory) and the bf16 copy refreshed. Stage 1 steps its part
// of the data-averaged whole gradient buffer (the caller's reducer). Stage 2 keeps a device
// gradient shard: during each chunk's last backward of the step (ShardGradRounds) every piece
// the model reports is reduce-scattered (average over the data group) from the model's
// gradient buffer into the shard on a SerialThread (ShardedDeviceGrads in caller memory)
// while the backward goes on; the pieces holding a tied wte copy wait for the caller's
// embedding-group sum (ReduceDataShards). The model still accumulates the micro-batches into
// its whole gradient buffer (counted as scratch, as on the CPU). The norm is the shard's Σ g²
// summed over the data group in double (SumOverRanks), then over the model group by the
// caller. Stage 3 is not built on CUDA layouts (the shard model reads its whole bf16 copy).
//
// In a build without the CUDA engine the factory says so.
#include <algorithm>
#include <numeric>
#include <optional>
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
#include "engine/trainer/cuda_zero_pieces.h"
#include "engine/trainer/shard_zero.h"
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
  // Under ZeRO-2 the engine's reduce-scatter hears each finished piece of a chunk's last
  // backward of the step too (with the caller's `ready`, the reducer's tied sum).
  Result<void> Backward(int chunk, int slot, float loss_scale, const float* doutput,
                        float* dinput, const GradReadyFn& caller_ready) override {
    GradReadyFn ready = caller_ready;
    if (sharded_) {
      float* grads = shard_->grads_device().data();
      if (GradReadyFn mine = rounds_->BackwardReady(chunk, [this, grads](size_t off, size_t n) {
            Keep(sharded_->Submit(grads + off, off, n));
          })) {
        ready = caller_ready ? GradReadyFn([mine, caller_ready](size_t off, size_t n) {
          mine(off, n);
          caller_ready(off, n);
        })
                             : mine;
      }
    }
    COHORT_TRY_VOID(BackwardStaged(chunk, slot, loss_scale, doutput, dinput, ready));
    return TakeSubmitError();
  }
  Result<void> BackwardStaged(int chunk, int slot, float loss_scale, const float* doutput,
                              float* dinput, const GradReadyFn& ready) {
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

  // `data` (null or one rank: no ZeRO) is the data group of this position; `zero_stage` 0-2.
  Result<void> Init(const AdamWConfig& adamw, comm::Communicator* data, int zero_stage) {
    const GptShardLayout& layout = shard_->layout();
    part_ = ZeroPartition{layout.total, 1};
    if (zero_stage > 0 && data != nullptr && data->size() > 1) {
      data_ = data;
      zero_stage_ = zero_stage;
      part_ = ZeroPartition{layout.total, data->size()};
    }
    const size_t lo = opt_begin(), hi = lo + part_.size(rank());
    adam_ = COHORT_TRY(CudaAdamW::Create(
        data_ ? CutDecayRanges(ShardDecayRanges(layout), lo, hi) : ShardDecayRanges(layout),
        adamw, /*fused=*/true, shard_->device(), shard_->stream()));
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
    if (zero_stage_ >= 2) {
      // The norm runs cut to this rank's part, relative to the gradient shard.
      std::vector<Range> cut;
      for (const Range& r : norm_runs_) {
        const size_t a = std::max(lo, r.offset), b = std::min(hi, r.offset + r.count);
        if (b > a) cut.push_back({a - lo, b - a});
      }
      norm_runs_ = std::move(cut);
      // The largest piece the model reports (ShardGradPieces) bounds the receive buffer.
      size_t piece = 1;
      for (int c = 0; c < shard_->num_chunks(); ++c) {
        for (const ShardGradPiece& p : ShardGradPieces(layout, c)) piece = std::max(piece, p.count);
      }
      thread_ = std::make_unique<SerialThread>(shard_->device());
      sharded_ = COHORT_TRY(ShardedDeviceGrads::Create(data_, part_, piece, shard_->device(),
                                                       shard_->stream(), *thread_,
                                                       /*caller_memory=*/true));
      rounds_.emplace(layout);
    }
    auto carve = [&](Carver& cv) {
      // SumOverRanks' (float, remainder) pairs staged for an nccl all-gather: this rank's
      // pair, then every rank's.
      pairs_ = cv.Take<float>(2 + 2 * static_cast<size_t>(part_.ranks), nullptr);
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


  Result<void> ZeroGrad() override {
    COHORT_TRY_VOID(shard_->ZeroGrad());
    if (sharded_) COHORT_TRY_VOID(sharded_->ZeroShard());
    return {};
  }
  std::span<float> grads() override { return shard_->grads_device(); }
  Result<void> WaitGrads() override { return shard_->Synchronize(); }

  void BeginRound(int microbatches, bool forward_only) override {
    if (!sharded_ || forward_only) return;
    rounds_->Begin(microbatches);
    sharded_->Begin();
  }
  bool reduces_data_shards() const override { return sharded_ != nullptr; }
  Result<void> ReduceDataShards() override {
    if (!sharded_) return {};
    float* grads = shard_->grads_device().data();
    for (const ShardGradRounds::Piece& d : rounds_->TakeDeferred()) {
      Keep(sharded_->Submit(grads + d.offset, d.offset, d.count));
    }
    auto finished = sharded_->Finish();
    COHORT_TRY_VOID(TakeSubmitError());
    return finished;
  }

  Result<double> SquaredGradNorm() override {
    double sq = COHORT_TRY(LocalSquaredNorm());
    if (sharded_) {
      // Every data rank's part: the norm one rank computes over the whole shard.
      HostAllGather gather = [this](const float* send, float* recv,
                                    const std::vector<size_t>& counts) {
        return AllGatherHost(send, recv, counts);
      };
      sq = COHORT_TRY(SumOverRanks(gather, part_.ranks, sq));
    }
    return sq;
  }
  // Σ g² over the norm runs of the whole gradient buffer, or (stage 2) of the shard.
  Result<double> LocalSquaredNorm() {
    if (norm_runs_.empty()) return 0.0;
    COHORT_CUDA_CHECK(cudaSetDevice(shard_->device()));
    cudaStream_t st = shard_->stream();
    const float* g = sharded_ ? sharded_->shard() : shard_->grads_device().data();
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
    const size_t lo = opt_begin();
    const float* g = sharded_ ? sharded_->shard() : shard_->grads_device().data() + lo;
    COHORT_TRY_VOID(adam_->Step(shard_->params_device().data() + lo,
                                shard_->params_bf16_device() + lo, g, lr, scale));
    COHORT_TRY_VOID(shard_->Synchronize());
    if (data_ != nullptr) COHORT_TRY_VOID(GatherParams());
    return {};
  }

  // ZeRO: every data rank's updated part into every rank's float32 parameters, then the bf16
  // copy refreshed. The send copy of this rank's part goes through gradient memory the step
  // has consumed (the next ZeroGrad clears it): the receive buffer holds the part.
  Result<void> GatherParams() {
    const size_t lo = opt_begin(), n = part_.size(rank());
    float* params = shard_->params_device().data();
    float* send = sharded_ ? sharded_->shard() : shard_->grads_device().data() + lo;
    COHORT_CUDA_CHECK(cudaMemcpyAsync(send, params + lo, n * sizeof(float),
                                      cudaMemcpyDeviceToDevice, shard_->stream()));
    COHORT_TRY_VOID(shard_->Synchronize());
    COHORT_TRY_VOID(data_->AllGather(send, params, part_.counts(), comm::DataType::kFloat32));
    return shard_->ParamsWritten();
  }

  // SumOverRanks' all-gather of host floats over the data group: direct where the group
  // reaches host memory (gloo), staged through pairs_ for nccl.
  Result<void> AllGatherHost(const float* send, float* recv, const std::vector<size_t>& counts) {
    if (data_->backend() != "nccl") {
      return data_->AllGather(send, recv, counts, comm::DataType::kFloat32);
    }
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    const size_t mine = counts[static_cast<size_t>(rank())];
    if (mine > 2 || total > 2 * static_cast<size_t>(part_.ranks)) {
      return Errorf(ErrorCode::kInternal, "the norm's all-gather: {} of {} floats (pairs only)",
                    mine, total);
    }
    cudaStream_t st = shard_->stream();
    COHORT_CUDA_CHECK(cudaMemcpyAsync(pairs_, send, mine * sizeof(float), cudaMemcpyHostToDevice, st));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(st));
    COHORT_TRY_VOID(data_->AllGather(pairs_, pairs_ + 2, counts, comm::DataType::kFloat32));
    COHORT_CUDA_CHECK(cudaMemcpyAsync(recv, pairs_ + 2, total * sizeof(float),
                                      cudaMemcpyDeviceToHost, st));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(st));
    return {};
  }

  // The whole shard's parameters; the moments of the optimizer's part (under ZeRO this data
  // rank's, from opt_begin()).
  Result<HostState> StateOnHost() override {
    params_host_.resize(shard_->layout().total);
    m_host_.resize(adam_->n());
    v_host_.resize(adam_->n());
    COHORT_TRY_VOID(shard_->CopyParamsToHost(params_host_));
    COHORT_TRY_VOID(adam_->CopyStateToHost(m_host_, v_host_));
    return HostState{params_host_, m_host_, v_host_, opt_begin(), adam_->t()};
  }
  Result<void> SetParams(std::span<const float> params) override {
    return shard_->CopyParamsFromHost(params);
  }
  Result<void> Restore(std::span<const float> params, std::span<const float> m,
                       std::span<const float> v, int64_t t) override {
    const size_t total = shard_->layout().total;
    for (auto [what, size] : {std::pair{"m", m.size()}, std::pair{"v", v.size()}}) {
      if (size != total) return FieldError(what, "has {} values, the shard {}", size, total);
    }
    COHORT_TRY_VOID(SetParams(params));
    return adam_->Restore(m.subspan(opt_begin(), adam_->n()), v.subspan(opt_begin(), adam_->n()),
                          t);
  }

  // float32 master parameters and their bf16 copy, float32 gradients (stage 2: the shard;
  // the whole buffer the backward accumulates into is scratch, with the receive buffer) and
  // the moments of the optimizer's part.
  TrainModel::ModelStateBytes state_bytes() const override {
    const size_t n = shard_->layout().total;
    const size_t moments = 2 * adam_->n() * sizeof(float);
    if (!sharded_) return {n * (sizeof(float) + sizeof(k::bf16)), n * sizeof(float), moments};
    return {n * (sizeof(float) + sizeof(k::bf16)), sharded_->shard_size() * sizeof(float),
            moments, n * sizeof(float) + sharded_->scratch_bytes()};
  }
  TrainModel::ZeroShape zero_shape() const override {
    if (data_ == nullptr) return {};
    return {zero_stage_, part_.ranks, false};
  }
  std::string DescribeMemory() const override {
    const TrainModel::ModelStateBytes b = state_bytes();
    return fmt::format(
        "{:.1f} MB of device memory for float32 parameters (and their bf16 copy), gradients and "
        "AdamW moments{} (activations apart)",
        (b.params + b.grads + b.optimizer + b.scratch + arena_bytes_) / 1e6,
        data_ ? fmt::format(" ({})", ZeroDescription(zero_stage_, part_.ranks)) : "");
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

  int rank() const { return data_ ? data_->rank() : 0; }
  // Where the optimizer's part of the shard starts (0 without ZeRO).
  size_t opt_begin() const { return part_.begin(rank()); }
  // A Submit's error from inside the model's `ready` (which returns nothing): the first is
  // kept and returned after the call.
  void Keep(Result<void> r) {
    if (!r && submit_error_.has_value()) submit_error_ = std::move(r);
  }
  Result<void> TakeSubmitError() { return std::exchange(submit_error_, Result<void>{}); }

  // ZeRO over the data group of this position (data_ null: none).
  comm::Communicator* data_ = nullptr;
  int zero_stage_ = 0;
  ZeroPartition part_;
  float* pairs_ = nullptr;  // in the arena: SumOverRanks' staging (nccl)
  Result<void> submit_error_;
  std::optional<ShardGradRounds> rounds_;  // stage 2
  // Stage 2. Declared last: destroyed first (the pieces drain the thread; the thread joins
  // before the model's gradient buffer they read is freed).
  std::unique_ptr<SerialThread> thread_;
  std::unique_ptr<ShardedDeviceGrads> sharded_;

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
                                                         bool host_messages,
                                                         comm::Communicator* data,
                                                         int zero_stage) {
  if (zero_stage < 0 || zero_stage > 2) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "ZeRO stage {} in a CUDA tensor/pipeline layout (built: 0, 1 and 2)", zero_stage);
  }
  auto engine = std::make_unique<CudaShardEngine>(
      COHORT_TRY(GptShardCudaModel::Create(spec, tp)), host_messages);
  COHORT_TRY_VOID(engine->Init(adamw, data, zero_stage));
  return std::unique_ptr<ShardEngine>(std::move(engine));
}

#else  // !COHORT_HAVE_CUDA_ENGINE

Result<std::unique_ptr<ShardEngine>> MakeCudaShardEngine(const ShardSpec&, TensorParallelGroup&,
                                                         const AdamWConfig&, bool,
                                                         comm::Communicator*, int) {
  return MakeError(ErrorCode::kUnsatisfiable,
                   "train.device is cuda but this build has no CUDA support");
}

#endif  // COHORT_HAVE_CUDA_ENGINE

}  // namespace cohort::engine
