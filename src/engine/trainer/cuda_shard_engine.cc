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
// shard's parameters and their part of the moments).
//
// The offloads (`parallel.offload`, Rajbhandari et al.'s ZeRO-Offload) on HostShardAdamW
// (host_shard_adamw.h, the single-device model's offloaded AdamW): the data rank's part of the
// shard's moments and its float32 master live in host memory (the master and the gradient
// part pinned), no CudaAdamW is made, and the part is clipped and stepped on the CPU in chunks
// while each finished chunk is copied back on a copy stream. Without ZeRO the offload is
// ZeRO-1's (as the single-device model's). Stages 0 and 1 copy each averaged bucket's part of
// the gradient part to the host on the reducer's thread while the backward goes on
// (grad_reduced), and the rest (the tied copy, averaged after the buckets; everything without
// buckets) at the step; the norm stays the device's over the whole averaged buffer. The
// float32 part is copied back, then all-gathered and the bf16 copy refreshed as ZeRO-1 does. Stages
// 2 and 3 make the step's round final: each piece of the gradient shard goes to the host as
// the collective thread finishes it, its Σ g² over the norm runs computed by the host thread
// while the backward goes on; the shard's sum is those partials in their fixed order, summed
// over the data group as before. Stage 2 copies the float32 part back (then the all-gather);
// stage 3 has no float32 part on the device (the host master is it) and its bf16 part takes
// the host step's bf16 chunks (through pinned staging); with optimizer+params the bf16 part
// is pinned host memory itself, each piece's part copied to a device send buffer just before
// its gather (GatheredDeviceParams on_host). With one data replica, optimizer+params runs stage
// 3's pieces over the replica itself: the gradient pieces accumulate into the shard (no
// reduce-scatter), the norm is the shard's, and each parameter piece is copied from the pinned
// bf16 shard to the device as the model uses it (the prefetch overlapping the copy with the
// compute, as ZeRO-Infinity's parameter offload on one GPU). The tied wte copies still keep one value: the same summed gradient and the same
// elementwise host update on both stages. Checkpoints by range read and write the host state
// (state_bytes counts it in `host`).
//
// In a build without the CUDA engine the factory says so.
#include <algorithm>
#include <mutex>
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
#include "engine/trainer/host_shard_adamw.h"
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
struct PinnedFree {
  void operator()(void* p) const {
    if (p != nullptr) (void)cudaFreeHost(p);
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
  // Stages 0 and 1 offloaded over a data group: each averaged bucket's part of the optimizer's
  // range goes to the host on the reducer's thread, while the backward goes on.
  DdpReducer::ReducedFn grad_reduced() override {
    if (!host_ || sharded_ || data_ == nullptr) return {};
    const float* grads = shard_->grads_device().data();
    return [this, grads](size_t offset, size_t count) -> Result<void> {
      const size_t begin = opt_begin();
      const size_t lo = std::max(offset, begin), hi = std::min(offset + count, begin + opt_size());
      if (hi <= lo) return {};
      COHORT_TRY_VOID(host_->Arrived(grads + lo, lo - begin, hi - lo, /*norm=*/false));
      std::lock_guard lock(arrived_mu_);
      arrived_.push_back({lo - begin, hi - lo});
      return {};
    };
  }
  TrainModel::OffloadCopies offload_copies() const override {
    if (!host_ || sharded_) return {};
    std::lock_guard lock(arrived_mu_);
    size_t by_buckets = 0;
    for (const Range& r : arrived_) by_buckets += r.count;
    return {by_buckets, host_->size()};
  }

  // `data` (null or one rank: no ZeRO) is the data group of this position; `zero_stage` 0-3
  // (3: the model was created without parameters); `offload`: AdamW on the host
  // (HostShardAdamW), `offload_params` (stage 3) the bf16 part in pinned host memory too.
  Result<void> Init(const AdamWConfig& adamw, comm::Communicator* data, int zero_stage,
                    bool offload, bool offload_params) {
    const GptShardLayout& layout = shard_->layout();
    part_ = ZeroPartition{layout.total, 1};
    if (zero_stage > 0 && data != nullptr && data->size() > 1) {
      data_ = data;
      zero_stage_ = zero_stage;
      part_ = ZeroPartition{layout.total, data->size()};
    } else if (zero_stage == 3 && offload_params) {
      // One replica: ZeRO-3's pieces over the replica itself, so that the bf16 parameters can
      // live in host memory (the gradient pieces accumulate into the shard as they would
      // after a reduce-scatter; each parameter piece is copied to the device as it is used).
      zero_stage_ = 3;
    }
    offload_ = offload;
    offload_params_ = offload_params && zero_stage_ == 3;
    const size_t lo = opt_begin(), hi = lo + part_.size(rank());
    std::vector<DecayRange> decay =
        data_ ? CutDecayRanges(ShardDecayRanges(layout), lo, hi) : ShardDecayRanges(layout);
    if (!offload_) {
      adam_ = COHORT_TRY(CudaAdamW::Create(std::move(decay), adamw, /*fused=*/true,
                                           shard_->device(), shard_->stream()));
    }
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
      if (offload_) {
        // Each final piece of the shard reaches the host as it is reduced, its Σ g² over
        // these runs computed there (SquaredGradNorm sums them).
        std::vector<HostShardAdamW::NormRun> runs;
        for (const Range& r : norm_runs_) runs.push_back({r.offset, r.count});
        host_ = COHORT_TRY(HostShardAdamW::Create(hi - lo, std::move(decay), adamw,
                                                  shard_->device(), std::move(runs)));
      }
      // The largest piece the model reports (ShardGradPieces) bounds the receive buffer.
      size_t piece = 1;
      for (int c = 0; c < shard_->num_chunks(); ++c) {
        for (const ShardGradPiece& p : ShardGradPieces(layout, c)) piece = std::max(piece, p.count);
      }
      thread_ = std::make_unique<SerialThread>(shard_->device());
      sharded_ = COHORT_TRY(ShardedDeviceGrads::Create(data_, part_, piece, shard_->device(),
                                                       shard_->stream(), *thread_,
                                                       /*caller_memory=*/true));
      if (host_) {
        HostShardAdamW* host = host_.get();
        ShardedDeviceGrads* grads = sharded_.get();
        sharded_->set_final([host, grads](size_t a, size_t b) {
          return host->Arrived(grads->shard() + a, a, b - a, /*norm=*/true);
        });
      }
      rounds_.emplace(layout);
    } else if (offload_) {
      // Stages 0 and 1: the gradient part crosses bucket by bucket as the caller's reducer
      // averages it (grad_reduced), the rest at the step; the norm stays the device's over the
      // whole averaged buffer.
      host_ = COHORT_TRY(HostShardAdamW::Create(hi - lo, std::move(decay), adamw,
                                                shard_->device()));
    }
    if (zero_stage_ == 3) {
      // This rank's part of the shard's parameters, float32 (the update's) and bf16 (what the
      // gathers read); the model asks for each piece through GatheredDeviceParams on the
      // same thread as the gradients' reduce-scatters (one order of the data group's
      // collectives on every rank of it).
      // Offloaded, the float32 part is the host master; with optimizer+params the bf16 part
      // is pinned host memory, each piece's part copied to a device send buffer before its
      // gather (GatheredDeviceParams on_host); else the host step's bf16 chunks are copied
      // to the device part through a pinned staging part.
      const size_t n = hi - lo;
      if (offload_params_) {
        void* pinned = nullptr;
        COHORT_CUDA_CHECK(cudaMallocHost(&pinned, std::max<size_t>(1, n) * sizeof(k::bf16)));
        pinned_part_.reset(pinned);
        bf16_part_ = static_cast<k::bf16*>(pinned);
      } else {
        auto carve_part = [&](Carver& cv) {
          if (!offload_) param_part_ = cv.Take<float>(n, nullptr);
          bf16_part_ = cv.Take<k::bf16>(n, nullptr);
        };
        Carver sizing(nullptr);
        carve_part(sizing);
        part_memory_.reset(static_cast<char*>(COHORT_TRY(DeviceAlloc(
            sizing.total(),
            fmt::format("the ZeRO-3 part of the shard's parameters ({} {} values)", n,
                        offload_ ? "bf16" : "float32 and bf16"),
            shard_->device()))));
        Carver cv(part_memory_.get());
        carve_part(cv);
        if (offload_) COHORT_TRY_VOID(host_->ReserveBf16Staging());
      }
      params_ = COHORT_TRY(GatheredDeviceParams::Create(
          data_, part_, GptShardCudaModel::ParamPasses(layout), bf16_part_, offload_params_,
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
    if (forward_only) return;
    if (host_ && !sharded_) {
      // Stages 0 and 1 offloaded: this step's buckets bring their parts anew.
      Keep(host_->BeginRound());
      std::lock_guard lock(arrived_mu_);
      arrived_.clear();
      return;
    }
    if (!sharded_) return;
    rounds_->Begin(microbatches);
    // Offloaded, the step's round is final: each piece of the shard goes to the host.
    if (host_) Keep(host_->BeginRound());
    sharded_->Begin(/*final=*/host_ != nullptr);
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
    double sq = 0;
    if (host_ && sharded_) {
      // The shard reached the host during the backward (the final round), each piece's Σ g²
      // over the norm runs computed there: summed in their (fixed) order.
      sq = COHORT_TRY(host_->PartialsSquaredNorm());
      const size_t copied = host_->TakeCopied();
      if (copied != host_->size()) {
        return Errorf(ErrorCode::kInternal,
                      "optimizer offload: the last backward brought {} of the gradient part's {} "
                      "values to the host",
                      copied, host_->size());
      }
    } else {
      sq = COHORT_TRY(LocalSquaredNorm());
    }
    if (sharded_ && data_ != nullptr) {
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
    if (host_) {
      return HostStep(norm, max_norm, lr,
                      sharded_ ? sharded_->shard() : shard_->grads_device().data() + opt_begin());
    }
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

  // Offloaded: the host clips and steps the part (stages 0 and 1 copy what the buckets did
  // not bring first; stages 2 and 3 have it from the backward) while each finished chunk goes
  // back: into the float32 parameters (then gathered over the data group, or the bf16 copy
  // refreshed), or stage 3's bf16 part.
  Result<void> HostStep(double norm, double max_norm, float lr, const float* g) {
    if (!sharded_) COHORT_TRY_VOID(CopyRest(g));
    COHORT_TRY_VOID(host_->Step(norm, max_norm, lr, HostDestination()));
    if (params_) return {};
    if (data_ != nullptr) return GatherParams();
    return shard_->ParamsWritten();
  }
  // Stages 0 and 1: the averaged gradient part (`g`, device) that the buckets did not bring to
  // the host (the tied copy, averaged after them; all of it without buckets), copied now.
  Result<void> CopyRest(const float* g) {
    std::vector<Range> have;
    {
      std::lock_guard lock(arrived_mu_);
      have = arrived_;
    }
    std::sort(have.begin(), have.end(), [](const Range& a, const Range& b) { return a.offset < b.offset; });
    COHORT_TRY_VOID(shard_->Synchronize());  // the step's kernels on the model's stream
    const size_t n = host_->size();
    size_t at = 0;
    for (const Range& r : have) {
      if (r.offset > at) COHORT_TRY_VOID(host_->Arrived(g + at, at, r.offset - at, /*norm=*/false));
      at = std::max(at, r.offset + r.count);
    }
    if (at < n) COHORT_TRY_VOID(host_->Arrived(g + at, at, n - at, /*norm=*/false));
    if (const size_t copied = host_->TakeCopied(); copied != n) {
      return Errorf(ErrorCode::kInternal,
                    "optimizer offload: {} values of the gradient part's {} reached the host "
                    "(buckets that overlap?)",
                    copied, n);
    }
    return {};
  }
  HostShardAdamW::Destination HostDestination() {
    HostShardAdamW::Destination to;
    if (!params_) {
      to.device_f32 = shard_->params_device().data() + opt_begin();
    } else if (offload_params_) {
      to.host_bf16 = reinterpret_cast<uint16_t*>(bf16_part_);
    } else {
      to.device_bf16 = bf16_part_;
    }
    return to;
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
    if (host_) {
      // The host state itself (stage 3's parameters: the master part the bf16 came from).
      std::span<const float> params(host_->master(), host_->size());
      if (!params_) {
        params_host_.resize(part.size());
        COHORT_TRY_VOID(shard_->CopyParamsToHost(params_host_));
        params = params_host_;
      }
      return HostState{params, host_->m(), host_->v(), opt_begin(), host_->t(), part.begin};
    }
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
    if (data_ == nullptr) {
      // One replica (optimizer+params): the host master is the whole shard.
      return std::vector<float>(host_->master(), host_->master() + host_->size());
    }
    COHORT_TRY_VOID(thread_->Drain());  // the group's collectives run here only when idle
    COHORT_CUDA_CHECK(cudaSetDevice(shard_->device()));
    std::unique_ptr<char, DeviceFree> all(static_cast<char*>(COHORT_TRY(DeviceAlloc(
        total * sizeof(float), "the gathered shard's parameters (export)", shard_->device()))));
    const float* send = param_part_;
    if (host_) {
      // The master part through the gradient shard (free between steps; cleared after).
      COHORT_TRY_VOID(CopyPart(sharded_->shard(), host_->master(), cudaMemcpyHostToDevice));
      send = sharded_->shard();
    }
    COHORT_TRY_VOID(data_->AllGather(send, reinterpret_cast<float*>(all.get()),
                                     part_.counts(), comm::DataType::kFloat32));
    if (host_) COHORT_TRY_VOID(sharded_->ZeroShard());
    std::vector<float> out(total);
    COHORT_CUDA_CHECK(cudaMemcpyAsync(out.data(), all.get(), total * sizeof(float),
                                      cudaMemcpyDeviceToHost, shard_->stream()));
    COHORT_TRY_VOID(shard_->Synchronize());
    return out;
  }
  Result<void> SetParams(std::span<const float> params) override {
    if (!params_) {
      COHORT_TRY_VOID(shard_->CopyParamsFromHost(params));
      // Offloaded, the master part starts as the model's.
      if (host_) std::copy_n(params.begin() + static_cast<std::ptrdiff_t>(opt_begin()), host_->size(), host_->master());
      return {};
    }
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
    if (host_) {
      // The master part, and the bf16 part from it (the host's conversion, as the host
      // step's).
      std::copy(part.begin(), part.end(), host_->master());
      return host_->RefreshBf16(HostDestination(), shard_->stream());
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
    return RestoreMoments(m.subspan(opt_begin(), opt_size()), v.subspan(opt_begin(), opt_size()),
                          t);
  }
  // Resume by range under ZeRO: the parameters this rank holds (param_part(): ZeRO-3 its part
  // only) and the moments of the optimizer's part, read into host buffers of those sizes,
  // then uploaded by FinishRestore. Without ZeRO the whole shard (ShardEngine's).
  CheckpointReadRequest RestoreRequest() override {
    if (data_ == nullptr) return ShardEngine::RestoreRequest();
    const ShardPiece part = param_part();
    const size_t lo = opt_begin(), hi = lo + opt_size();
    restore_params_.assign(part.size(), 0.0f);
    restore_m_.assign(opt_size(), 0.0f);
    restore_v_.assign(opt_size(), 0.0f);
    const GptShardLayout& layout = shard_->layout();
    return {LogicalRunsOf(layout, part.begin, part.end, restore_params_.data()),
            LogicalRunsOf(layout, lo, hi, restore_m_.data()),
            LogicalRunsOf(layout, lo, hi, restore_v_.data())};
  }
  Result<void> FinishRestore(int64_t t) override {
    if (data_ == nullptr) return ShardEngine::FinishRestore(t);
    auto restored = [&]() -> Result<void> {
      COHORT_TRY_VOID(SetParamPart(restore_params_));
      return RestoreMoments(restore_m_, restore_v_, t);
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
  //
  // Offloaded (counted as cuda_zero.h counts it): the optimizer's bytes hold the host master
  // besides the moments (stage 3: its master is its float32 parameter part, counted there),
  // the pinned gradient part and stage 3's pinned bf16 staging are scratch; `host` is what of
  // all that lives in host memory: the moments, the master, the pinned gradient part and
  // staging, and with optimizer+params the bf16 part.
  TrainModel::ModelStateBytes state_bytes() const override {
    const size_t n = shard_->layout().total;
    const size_t mine = opt_size();
    const size_t moments = 2 * mine * sizeof(float);
    const size_t held = params_ ? part_.size(rank()) : n;
    const size_t params = held * (sizeof(float) + sizeof(k::bf16));
    const size_t optimizer = moments + (host_ && !params_ ? mine * sizeof(float) : 0);
    // The pinned gradient part and staging (the pinned master is counted above).
    const size_t pinned = host_ ? host_->pinned_bytes() - mine * sizeof(float) : 0;
    size_t host = 0;
    if (host_) {
      host = optimizer + pinned + (params_ ? mine * sizeof(float) : 0) +
             (offload_params_ ? mine * sizeof(k::bf16) : 0);
    }
    if (!sharded_) return {params, n * sizeof(float), optimizer, pinned, host};
    return {params, sharded_->shard_size() * sizeof(float), optimizer,
            n * sizeof(float) + sharded_->scratch_bytes() +
                (params_ ? params_->scratch_bytes() : 0) + pinned,
            host};
  }
  TrainModel::ZeroShape zero_shape() const override {
    return {zero_stage_, part_.ranks, offload_};
  }
  std::string DescribeMemory() const override {
    const TrainModel::ModelStateBytes b = state_bytes();
    return fmt::format(
        "{:.1f} MB of device memory for float32 parameters (and their bf16 copy), gradients and "
        "AdamW moments{}{} (activations apart)",
        (b.params + b.grads + b.optimizer + b.scratch + arena_bytes_ - b.host) / 1e6,
        zero_stage_ > 0 ? fmt::format(" ({})", ZeroDescription(zero_stage_, part_.ranks)) : "",
        host_ ? fmt::format(", {:.1f} MB of host memory (optimizer offloaded{})", b.host / 1e6,
                            offload_params_ ? ", bf16 parameters too" : "")
              : "");
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
  // The size of the optimizer's part of the shard (the whole shard without ZeRO).
  size_t opt_size() const { return part_.size(rank()); }
  int64_t t() const { return host_ ? host_->t() : adam_->t(); }
  Result<void> RestoreMoments(std::span<const float> m, std::span<const float> v, int64_t t) {
    if (host_) return host_->Restore(m, v, t);
    return adam_->Restore(m, v, t);
  }
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
  // Offloaded: no float32 part on the device (the host master is it); with optimizer+params
  // the bf16 part is pinned host memory (pinned_part_).
  std::unique_ptr<char, DeviceFree> part_memory_;
  std::unique_ptr<void, PinnedFree> pinned_part_;
  float* param_part_ = nullptr;
  k::bf16* bf16_part_ = nullptr;
  // The offloads: AdamW over the optimizer's part on the host (no adam_). Before thread_:
  // the final round's pieces reach it from there.
  bool offload_ = false, offload_params_ = false;
  std::unique_ptr<HostShardAdamW> host_;
  // Stages 0 and 1 offloaded: the ranges of the part the step's buckets brought to the host
  // (relative to it).
  mutable std::mutex arrived_mu_;
  std::vector<Range> arrived_;  // guarded by arrived_mu_
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
                                                         int zero_stage, bool offload,
                                                         bool offload_params) {
  if (zero_stage < 0 || zero_stage > 3) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "ZeRO stage {} in a CUDA tensor/pipeline layout (built: 0 to 3)", zero_stage);
  }
  if (offload_params && (zero_stage != 3 || !offload)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "parameter offload needs ZeRO stage 3 and the optimizer offload (stage {}, "
                  "optimizer offload {})",
                  zero_stage, offload);
  }
  // As the single-device model: the offload without ZeRO is ZeRO-1's (the optimizer's state
  // of this data rank's part of the shard on the host).
  if (offload && zero_stage == 0) zero_stage = 1;
  // ZeRO-3 over a data group of two or more, or with the parameters offloaded: the model holds
  // no parameters (the engine's part, gathered piece by piece, or with one replica copied
  // from the host piece by piece).
  const bool sharded_params =
      zero_stage == 3 && ((data != nullptr && data->size() > 1) || offload_params);
  auto engine = std::make_unique<CudaShardEngine>(
      COHORT_TRY(GptShardCudaModel::Create(spec, tp, /*hold_params=*/!sharded_params)),
      host_messages);
  COHORT_TRY_VOID(engine->Init(adamw, data, zero_stage, offload, offload_params));
  return std::unique_ptr<ShardEngine>(std::move(engine));
}

#else  // !COHORT_HAVE_CUDA_ENGINE

Result<std::unique_ptr<ShardEngine>> MakeCudaShardEngine(const ShardSpec&, TensorParallelGroup&,
                                                         const AdamWConfig&, bool,
                                                         comm::Communicator*, int, bool, bool) {
  return MakeError(ErrorCode::kUnsatisfiable,
                   "train.device is cuda but this build has no CUDA support");
}

#endif  // COHORT_HAVE_CUDA_ENGINE

}  // namespace cohort::engine
