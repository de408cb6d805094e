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
// caller. Stage 3 keeps the gradients as stage 2 and only this rank's part of the shard's
// parameters: float32 (what CudaAdamW steps) and bf16 (refreshed by the same fused update),
// in device memory; the model is created without parameters and reads each piece of its
// chunks' bf16 parameters through a GatheredDeviceParams (cuda_zero_pieces.h, the
// single-device model's) just before it uses it, forward and again in backward, the next
// piece of the pass prefetched, released after use (GptShardCudaModel::ParamPasses: a
// chunk's Forward and its Backward are a pass each). The gathers and the gradients'
// reduce-scatters run on the one SerialThread, over the data group, in the order the
// training thread posts them, which is the same on every data rank of the position (the
// same schedule). Nothing is gathered after the step. The tied wte copies of the first and
// last pipeline stage keep one value: their gradients are the embedding group's sum before
// the reduce-scatter (as stage 2), and the update is elementwise. Checkpoints by range:
// each data rank writes the runs of its part (params_begin), and resumes by reading its
// part of the parameters and of the moments only (RestoreRequest; stages 1 and 2 the whole
// shard's parameters and their part of the moments). The offloads are not built here.
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

struct DeviceFree {
  void operator()(char* p) const {
    if (p != nullptr) (void)cudaFree(p);
  }
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

  // `data` (null or one rank: no ZeRO) is the data group of this position; `zero_stage` 0-3
  // (3: the model was created without parameters).
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
    if (zero_stage_ == 3) {
      // This rank's part of the shard's parameters, float32 (the update's) and bf16 (what the
      // gathers read); the model asks for each piece through GatheredDeviceParams on the
      // same thread as the gradients' reduce-scatters (one order of the data group's
      // collectives on every rank of it).
      const size_t n = hi - lo;
      auto carve_part = [&](Carver& cv) {
        param_part_ = cv.Take<float>(n, nullptr);
        bf16_part_ = cv.Take<k::bf16>(n, nullptr);
      };
      Carver sizing(nullptr);
      carve_part(sizing);
      part_memory_.reset(static_cast<char*>(COHORT_TRY(DeviceAlloc(
          sizing.total(),
          fmt::format("the ZeRO-3 part of the shard's parameters ({} float32 and bf16 values)", n),
          shard_->device()))));
      Carver cv(part_memory_.get());
      carve_part(cv);
      params_ = COHORT_TRY(GatheredDeviceParams::Create(
          data_, part_, GptShardCudaModel::ParamPasses(layout), bf16_part_, /*on_host=*/false,
          shard_->device(), shard_->stream(), *thread_));
      shard_->SetParamSource(params_.get());
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
    if (params_) {
      // ZeRO-3 steps its part in place (the bf16 part refreshed by the update): nothing is
      // gathered after the step, and no gather reads the part now (a pass's pieces are all
      // released before the step).
      COHORT_TRY_VOID(adam_->Step(param_part_, bf16_part_, g, lr, scale));
      return shard_->Synchronize();
    }
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

  // The parameters this rank holds (the whole shard, or ZeRO-3's part from opt_begin()); the
  // moments of the optimizer's part (under ZeRO this data rank's, from opt_begin()).
  Result<HostState> StateOnHost() override {
    const ShardPiece part = param_part();
    params_host_.resize(part.size());
    m_host_.resize(adam_->n());
    v_host_.resize(adam_->n());
    if (params_) {
      COHORT_TRY_VOID(CopyPart(params_host_.data(), param_part_, cudaMemcpyDeviceToHost));
    } else {
      COHORT_TRY_VOID(shard_->CopyParamsToHost(params_host_));
    }
    COHORT_TRY_VOID(adam_->CopyStateToHost(m_host_, v_host_));
    return HostState{params_host_, m_host_, v_host_, opt_begin(), adam_->t(), part.begin};
  }
  // ZeRO-3: every data rank's part all-gathered over the data group (device memory for the
  // collective, freed after).
  Result<std::vector<float>> WholeParams() override {
    if (!params_) return ShardEngine::WholeParams();
    const size_t total = shard_->layout().total;
    COHORT_TRY_VOID(thread_->Drain());  // the group's collectives run here only when idle
    COHORT_CUDA_CHECK(cudaSetDevice(shard_->device()));
    std::unique_ptr<char, DeviceFree> all(static_cast<char*>(COHORT_TRY(DeviceAlloc(
        total * sizeof(float), "the gathered shard's parameters (export)", shard_->device()))));
    COHORT_TRY_VOID(data_->AllGather(param_part_, reinterpret_cast<float*>(all.get()),
                                     part_.counts(), comm::DataType::kFloat32));
    std::vector<float> out(total);
    COHORT_CUDA_CHECK(cudaMemcpyAsync(out.data(), all.get(), total * sizeof(float),
                                      cudaMemcpyDeviceToHost, shard_->stream()));
    COHORT_TRY_VOID(shard_->Synchronize());
    return out;
  }
  Result<void> SetParams(std::span<const float> params) override {
    if (!params_) return shard_->CopyParamsFromHost(params);
    const size_t total = shard_->layout().total;
    if (params.size() != total) {
      return FieldError("params", "has {} values, the shard {}", params.size(), total);
    }
    return SetParamPart(params.subspan(opt_begin(), part_.size(rank())));
  }
  ShardPiece param_part() const override {
    if (!params_) return ShardEngine::param_part();
    return {opt_begin(), opt_begin() + part_.size(rank())};
  }
  // ZeRO-3: the float32 part, and the bf16 part converted from it on the device (the bits
  // the whole shard's ParamsWritten gives).
  Result<void> SetParamPart(std::span<const float> part) override {
    if (!params_) return SetParams(part);
    const size_t n = part_.size(rank());
    if (part.size() != n) {
      return FieldError("params", "has {} values, this rank's ZeRO-3 part {}", part.size(), n);
    }
    COHORT_TRY_VOID(CopyPart(param_part_, part.data(), cudaMemcpyHostToDevice));
    k::ConvertToBf16(bf16_part_, param_part_, n, shard_->stream());
    COHORT_CUDA_CHECK(cudaGetLastError());  // ConvertToBf16 (the ZeRO-3 part)
    return shard_->Synchronize();
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
  // Resume by range under ZeRO: the parameters this rank holds (param_part(): ZeRO-3 its part
  // only) and the moments of the optimizer's part, read into host buffers of those sizes,
  // then uploaded by FinishRestore. Without ZeRO the whole shard (ShardEngine's).
  CheckpointReadRequest RestoreRequest() override {
    if (data_ == nullptr) return ShardEngine::RestoreRequest();
    const ShardPiece part = param_part();
    const size_t lo = opt_begin(), hi = lo + adam_->n();
    restore_params_.assign(part.size(), 0.0f);
    restore_m_.assign(adam_->n(), 0.0f);
    restore_v_.assign(adam_->n(), 0.0f);
    const GptShardLayout& layout = shard_->layout();
    return {LogicalRunsOf(layout, part.begin, part.end, restore_params_.data()),
            LogicalRunsOf(layout, lo, hi, restore_m_.data()),
            LogicalRunsOf(layout, lo, hi, restore_v_.data())};
  }
  Result<void> FinishRestore(int64_t t) override {
    if (data_ == nullptr) return ShardEngine::FinishRestore(t);
    auto restored = [&]() -> Result<void> {
      COHORT_TRY_VOID(SetParamPart(restore_params_));
      return adam_->Restore(restore_m_, restore_v_, t);
    }();
    DropRestore();
    return restored;
  }
  void DropRestore() override {
    ShardEngine::DropRestore();
    restore_params_ = {};
    restore_m_ = {};
    restore_v_ = {};
  }

  // float32 master parameters and their bf16 copy (stage 3: of the rank's part), float32
  // gradients (stages 2, 3: the shard; the whole buffer the backward accumulates into is
  // scratch, with the receive buffer and stage 3's two gather buffers) and the moments of
  // the optimizer's part.
  TrainModel::ModelStateBytes state_bytes() const override {
    const size_t n = shard_->layout().total;
    const size_t moments = 2 * adam_->n() * sizeof(float);
    const size_t held = params_ ? part_.size(rank()) : n;
    const size_t params = held * (sizeof(float) + sizeof(k::bf16));
    if (!sharded_) return {params, n * sizeof(float), moments};
    return {params, sharded_->shard_size() * sizeof(float), moments,
            n * sizeof(float) + sharded_->scratch_bytes() +
                (params_ ? params_->scratch_bytes() : 0)};
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
  // `n` = part_.size(rank()) floats between host and the ZeRO-3 part; returns when done.
  Result<void> CopyPart(float* dst, const float* src, cudaMemcpyKind kind) {
    COHORT_CUDA_CHECK(cudaSetDevice(shard_->device()));
    COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, part_.size(rank()) * sizeof(float), kind,
                                      shard_->stream()));
    return shard_->Synchronize();
  }
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
  std::optional<ShardGradRounds> rounds_;  // stages 2, 3
  std::vector<float> restore_params_, restore_m_, restore_v_;  // RestoreRequest's, under ZeRO
  // Stage 3: this rank's part of the shard's parameters, float32 and bf16 (in part_memory_).
  std::unique_ptr<char, DeviceFree> part_memory_;
  float* param_part_ = nullptr;
  k::bf16* bf16_part_ = nullptr;
  // Stages 2, 3. Declared last: destroyed first (the pieces drain the thread; the thread
  // joins before the model's gradient buffer and the parameter part they read are freed).
  std::unique_ptr<SerialThread> thread_;
  std::unique_ptr<ShardedDeviceGrads> sharded_;
  std::unique_ptr<GatheredDeviceParams> params_;  // stage 3

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
  if (zero_stage < 0 || zero_stage > 3) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "ZeRO stage {} in a CUDA tensor/pipeline layout (built: 0 to 3)", zero_stage);
  }
  // ZeRO-3 over a data group of two or more: the model holds no parameters (the engine's
  // part, gathered piece by piece).
  const bool sharded_params = zero_stage == 3 && data != nullptr && data->size() > 1;
  auto engine = std::make_unique<CudaShardEngine>(
      COHORT_TRY(GptShardCudaModel::Create(spec, tp, /*hold_params=*/!sharded_params)),
      host_messages);
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
