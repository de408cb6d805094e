// The CPU ShardEngine: GptShardModel in host memory, AdamW (or ZeRO-1) from optim/ and
// parallel/zero.h, clipping with ClipToNorm.
#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "engine/optim/grad_clip.h"
#include "engine/trainer/shard_engine.h"

namespace cohort::engine {
namespace {

class CpuShardEngine final : public ShardEngineOver<GptShardModel> {
 public:
  explicit CpuShardEngine(std::unique_ptr<GptShardModel> shard) : ShardEngineOver(std::move(shard)) {}

  Result<void> InitOptimizer(const AdamWConfig& adamw, comm::Communicator* data,
                             int zero_stage) {
    const size_t n = shard_->layout().total;
    std::vector<DecayRange> ranges = ShardDecayRanges(shard_->layout());
    if (zero_stage > 0 && data != nullptr) {
      zero_ = COHORT_TRY(ZeroOptimizer::Create(*data, zero_stage, n, std::move(ranges), adamw));
    } else {
      optimizer_ = COHORT_TRY(AdamW::Create(n, std::move(ranges), adamw));
    }
    return {};
  }


  Result<void> ZeroGrad() override {
    shard_->ZeroGrad();
    return {};
  }
  std::span<float> grads() override { return shard_->grads(); }
  Result<void> WaitGrads() override { return {}; }
  MessageMemory& message_memory() override { return messages_; }
  Result<double> SquaredGradNorm() override {
    double sq = 0;
    for (const ShardTensor& t : shard_->layout().tensors) {
      if (t.counts_in_norm) sq += SquaredNorm(shard_->grads().subspan(t.local.offset, t.local.numel));
    }
    return sq;
  }
  Result<void> Step(double norm, double max_norm, float lr) override {
    if (zero_) return zero_->StepWithNorm(shard_->params(), shard_->grads(), norm, max_norm, lr);
    ClipToNorm(shard_->grads(), norm, max_norm);
    optimizer_->Step(shard_->params(), shard_->grads(), lr);
    return {};
  }

  Result<HostState> StateOnHost() override {
    return HostState{shard_->params(), adamw().m(), adamw().v(), opt_begin(), adamw().t()};
  }
  Result<void> SetParams(std::span<const float> params) override {
    COHORT_TRY_VOID(CheckSize("params", params.size()));
    std::copy(params.begin(), params.end(), shard_->params().begin());
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

  TrainModel::ModelStateBytes state_bytes() const override {
    const size_t n = shard_->layout().total;
    const size_t held = zero_ ? zero_->partition().size(zero_->rank()) : optimizer_->num_params();
    return {n * sizeof(float), n * sizeof(float), 2 * held * sizeof(float)};
  }
  const ZeroOptimizer* zero() const override { return zero_ ? &*zero_ : nullptr; }
  std::string DescribeMemory() const override {
    const size_t n = shard_->layout().total;
    return fmt::format("{:.1f} MB of parameters, gradients and AdamW moments",
                       (2.0 * n + 2.0 * (zero_ ? zero_->partition().size(zero_->rank()) : n)) *
                           sizeof(float) / 1e6);
  }

 private:
  AdamW& adamw() { return zero_ ? zero_->adamw() : *optimizer_; }
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
  std::optional<ZeroOptimizer> zero_;  // ZeRO-1 over the data group
};

}  // namespace

Result<std::unique_ptr<ShardEngine>> MakeCpuShardEngine(const ShardSpec& spec,
                                                        TensorParallelGroup& tp,
                                                        const AdamWConfig& adamw,
                                                        comm::Communicator* data,
                                                        int zero_stage) {
  auto engine = std::make_unique<CpuShardEngine>(COHORT_TRY(GptShardModel::Create(spec, tp)));
  COHORT_TRY_VOID(engine->InitOptimizer(adamw, data, zero_stage));
  return std::unique_ptr<ShardEngine>(std::move(engine));
}

}  // namespace cohort::engine
