// The CPU ShardEngine: GptShardModel in host memory, AdamW (or ZeRO 1-3) from optim/ and
// parallel/zero.h, clipping with ClipToNorm. Stages 2 and 3 add a ShardZero (shard_zero.h):
// the gradient shard reduce-scattered during each chunk's last backward and, for stage 3,
// the parameter shard gathered piece by piece (the model's own buffer released).
#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "engine/optim/grad_clip.h"
#include "engine/trainer/shard_engine.h"
#include "engine/trainer/shard_zero.h"

namespace cohort::engine {
namespace {

class CpuShardEngine final : public ShardEngineOver<GptShardModel> {
 public:
  explicit CpuShardEngine(std::unique_ptr<GptShardModel> shard) : ShardEngineOver(std::move(shard)) {}

  Result<void> InitOptimizer(const AdamWConfig& adamw, comm::Communicator* data,
                             int zero_stage, bool prefetch) {
    const size_t n = shard_->layout().total;
    std::vector<DecayRange> ranges = ShardDecayRanges(shard_->layout());
    if (zero_stage > 0 && data != nullptr) {
      zero_ = COHORT_TRY(ZeroOptimizer::Create(*data, zero_stage, n, std::move(ranges), adamw));
      if (zero_stage >= 2) {
        sharded_ = COHORT_TRY(
            ShardZero::Create(shard_->layout(), *data, zero_->partition(), zero_stage, prefetch));
        // No whole gradient buffer: every backward hands its pieces to the shard's reduction.
        shard_->ReleaseGradients();
        shard_->SetGradSink(sharded_.get());
      }
      if (GatheredParams* g = gathered()) {
        shard_->ReleaseParams();
        shard_->SetParamSource(g);
      }
    } else {
      optimizer_ = COHORT_TRY(AdamW::Create(n, std::move(ranges), adamw));
    }
    return {};
  }

  Result<float> Forward(int chunk, int slot, const MicrobatchTokens& batch, const float* input,
                        float* output) override {
    auto loss = shard_->Forward(chunk, slot, batch, input, output);
    if (GatheredParams* g = gathered()) COHORT_TRY_VOID(g->TakeError());
    return loss;
  }
  // Under ZeRO-2 and 3 the model writes its pieces into the shard's reduction (its sink),
  // and the caller's `ready` (the overlapped data-parallel reducer) is empty.
  Result<void> Backward(int chunk, int slot, float loss_scale, const float* doutput,
                        float* dinput, const GradReadyFn& ready) override {
    auto ran = shard_->Backward(chunk, slot, loss_scale, doutput, dinput, ready);
    if (GatheredParams* g = gathered()) COHORT_TRY_VOID(g->TakeError());
    return ran;
  }
  std::span<float> tied_grads(const ShardGradPiece& tied) override {
    return sharded_ ? sharded_->tied_grads(tied.offset, tied.count) : std::span<float>();
  }
  void BeginRound(int microbatches, bool forward_only) override {
    if (sharded_) sharded_->BeginRound(microbatches, forward_only);
  }
  bool reduces_data_shards() const override { return sharded_ != nullptr; }
  Result<void> ReduceDataShards() override {
    if (!sharded_) return {};
    return sharded_->ReduceDataShards();
  }


  Result<void> ZeroGrad() override {
    shard_->ZeroGrad();
    if (sharded_) sharded_->ZeroGrad();
    return {};
  }
  std::span<float> grads() override { return shard_->grads(); }
  Result<void> WaitGrads() override { return {}; }
  MessageMemory& message_memory() override { return messages_; }
  Result<double> SquaredGradNorm() override {
    if (sharded_) return sharded_->SquaredNorm();
    double sq = 0;
    for (const ShardTensor& t : shard_->layout().tensors) {
      if (t.counts_in_norm) sq += SquaredNorm(shard_->grads().subspan(t.local.offset, t.local.numel));
    }
    return sq;
  }
  Result<void> Step(double norm, double max_norm, float lr) override {
    if (GatheredParams* g = gathered()) {
      g->Invalidate();  // no prefetch reads the shard while it changes
      return zero_->StepOwnShardWithNorm(g->shard(), sharded_->grad_shard(), norm, max_norm, lr);
    }
    if (sharded_) {
      return zero_->StepShardWithNorm(shard_->params(), sharded_->grad_shard(), norm, max_norm,
                                      lr);
    }
    if (zero_) return zero_->StepWithNorm(shard_->params(), shard_->grads(), norm, max_norm, lr);
    ClipToNorm(shard_->grads(), norm, max_norm);
    optimizer_->Step(shard_->params(), shard_->grads(), lr);
    return {};
  }

  Result<HostState> StateOnHost() override {
    if (GatheredParams* g = gathered()) {
      return HostState{g->shard(), adamw().m(), adamw().v(), opt_begin(), adamw().t(),
                       opt_begin()};
    }
    return HostState{shard_->params(), adamw().m(), adamw().v(), opt_begin(), adamw().t()};
  }
  Result<std::vector<float>> WholeParams() override {
    if (GatheredParams* g = gathered()) return g->GatherAll();
    return ShardEngine::WholeParams();
  }
  Result<void> SetParams(std::span<const float> params) override {
    COHORT_TRY_VOID(CheckSize("params", params.size()));
    if (GatheredParams* g = gathered()) {
      // ZeRO-3 keeps its part of the shard.
      g->Invalidate();
      const auto lo = params.begin() + static_cast<std::ptrdiff_t>(opt_begin());
      std::copy(lo, lo + static_cast<std::ptrdiff_t>(g->shard().size()), g->shard().begin());
      return {};
    }
    std::copy(params.begin(), params.end(), shard_->params().begin());
    return {};
  }
  ShardPiece param_part() const override {
    if (!sharded_ || !sharded_->shards_params()) return ShardEngine::param_part();
    return {zero_->shard_begin(), zero_->shard_begin() + sharded_->shard_floats()};
  }
  Result<void> SetParamPart(std::span<const float> part) override {
    GatheredParams* g = gathered();
    if (!g) return SetParams(part);
    if (part.size() != g->shard().size()) {
      return FieldError("params", "has {} values, this rank's ZeRO-3 part {}", part.size(),
                        g->shard().size());
    }
    g->Invalidate();
    std::copy(part.begin(), part.end(), g->shard().begin());
    return {};
  }
  Result<void> Restore(std::span<const float> params, std::span<const float> m,
                       std::span<const float> v, int64_t t) override {
    COHORT_TRY_VOID(SetParams(params));
    COHORT_TRY_VOID(CheckSize("m", m.size()));
    COHORT_TRY_VOID(CheckSize("v", v.size()));
    const size_t lo = opt_begin(), k = adamw().num_params();
    return adamw().Restore(m.subspan(lo, k), v.subspan(lo, k), t);
  }

  // Resume by range straight into place: the parameters this rank holds (the shard, or
  // ZeRO-3's part of it) and the optimizer's part of the moments.
  CheckpointReadRequest RestoreRequest() override {
    const ShardPiece part = param_part();
    float* params = shard_->params().data();
    if (GatheredParams* g = gathered()) {
      g->Invalidate();  // no prefetch reads the shard while it is written
      params = g->shard().data();
    }
    const size_t lo = opt_begin(), hi = lo + adamw().num_params();
    return {LogicalRunsOf(shard_->layout(), part.begin, part.end, params),
            LogicalRunsOf(shard_->layout(), lo, hi, adamw().m().data()),
            LogicalRunsOf(shard_->layout(), lo, hi, adamw().v().data())};
  }
  Result<void> FinishRestore(int64_t t) override { return adamw().RestoreStep(t); }
  void DropRestore() override {}

  // Counted where allocated. ZeRO-2 and 3: the gradient shard, and apart (scratch) the
  // helpers' piece buffers, wte's slices and stage 3's gathered pieces (shard_zero.h).
  TrainModel::ModelStateBytes state_bytes() const override {
    const size_t n = shard_->layout().total;
    const size_t held = zero_ ? zero_->partition().size(zero_->rank()) : optimizer_->num_params();
    const size_t params = shard_->params().size() +
                          (sharded_ && sharded_->params() ? sharded_->params()->shard().size() : 0);
    if (!sharded_) return {params * sizeof(float), n * sizeof(float), 2 * held * sizeof(float)};
    return {params * sizeof(float), sharded_->grad_shard().size() * sizeof(float),
            2 * held * sizeof(float), sharded_->scratch_bytes()};
  }
  std::optional<TrainModel::GatherStats> gather_stats() const override {
    if (!sharded_ || !sharded_->params()) return std::nullopt;
    const GatheredParams& g = *sharded_->params();
    return TrainModel::GatherStats{g.prefetch_hits(), g.prefetch_misses(), g.wait_seconds(),
                                   g.peak_gathered_bytes(), g.allocations()};
  }
  const ZeroOptimizer* zero() const override { return zero_ ? &*zero_ : nullptr; }
  std::string DescribeMemory() const override {
    const TrainModel::ModelStateBytes b = state_bytes();
    return fmt::format("{:.1f} MB of parameters, gradients and AdamW moments",
                       static_cast<double>(b.params + b.grads + b.optimizer) / 1e6);
  }

 private:
  AdamW& adamw() { return zero_ ? zero_->adamw() : *optimizer_; }
  GatheredParams* gathered() { return sharded_ ? sharded_->params() : nullptr; }
  // Where the optimizer's part of the shard buffer starts (0 without ZeRO).
  size_t opt_begin() const { return zero_ ? zero_->shard_begin() : 0; }
  Result<void> CheckSize(const char* what, size_t n) const {
    if (n != shard_->layout().total) {
      return FieldError(what, "has {} values, the shard {}", n, shard_->layout().total);
    }
    return {};
  }

  HostMessageMemory messages_;
  std::optional<AdamW> optimizer_;     // without ZeRO
  std::optional<ZeroOptimizer> zero_;  // ZeRO over the data group
  std::unique_ptr<ShardZero> sharded_;  // ZeRO-2 and 3: the gradient (and parameter) shards
};

}  // namespace

Result<std::unique_ptr<ShardEngine>> MakeCpuShardEngine(const ShardSpec& spec,
                                                        TensorParallelGroup& tp,
                                                        const AdamWConfig& adamw,
                                                        comm::Communicator* data,
                                                        int zero_stage, bool prefetch) {
  auto engine = std::make_unique<CpuShardEngine>(COHORT_TRY(GptShardModel::Create(spec, tp)));
  COHORT_TRY_VOID(engine->InitOptimizer(adamw, data, zero_stage, prefetch));
  return std::unique_ptr<ShardEngine>(std::move(engine));
}

}  // namespace cohort::engine
