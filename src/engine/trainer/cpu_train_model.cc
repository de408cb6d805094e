// The CPU TrainModel: GptModel + AdamW + ClipGradNorm in host memory, exactly the calls the
// trainer made before it had a device choice (so CPU runs are unchanged, bitwise). With ZeRO
// (stages 1 and 2, parallel/zero.h) the AdamW state is this rank's shard only and the step is
// ZeroOptimizer's; checkpoints then hold the shard's ranges. Stage 2 also holds only its
// shard of the gradients (ShardedGradients, parallel/zero_grads.h): the model's gradient
// buffer is released and every backward pass reduce-scatters its pieces into the shard, so
// the trainer makes no DdpReducer for it (grads() is empty).
#include <algorithm>
#include <optional>
#include <utility>

#include "engine/checkpoint/gpt2_safetensors.h"
#include "engine/optim/grad_clip.h"
#include "engine/parallel/zero.h"
#include "engine/parallel/zero_grads.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

class CpuTrainModel final : public TrainModel {
 public:
  CpuTrainModel(GptModel model, AdamW optimizer)
      : model_(std::move(model)), optimizer_(std::move(optimizer)) {}
  CpuTrainModel(GptModel model, ZeroOptimizer zero, std::unique_ptr<ShardedGradients> shards)
      : model_(std::move(model)), zero_(std::move(zero)), shards_(std::move(shards)) {
    if (shards_) model_.ReleaseGradients();
  }

  const GptConfig& config() const override { return model_.config(); }
  size_t num_params() const override { return model_.params().size(); }

  Result<void> ZeroGrad() override {
    if (shards_) {
      shards_->ZeroShard();
    } else {
      model_.ZeroGrad();
    }
    return {};
  }
  Result<float> Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        int B, int T) override {
    return model_.Forward(tokens, targets, B, T);
  }
  Result<void> Backward(float loss_scale, const GradReadyFn& ready) override {
    if (!shards_) return model_.Backward(loss_scale, ready);
    // Stage 2: every micro-batch's pieces reduce-scattered into the shard (`ready` is a
    // reducer's, and stage 2 has none).
    shards_->Begin();
    auto backward = model_.BackwardToSink(loss_scale, *shards_);
    auto reduced = shards_->Finish();
    COHORT_TRY_VOID(backward);
    return reduced;
  }
  Result<double> ClipAndStep(double max_norm, float lr) override {
    if (shards_) return zero_->StepShard(model_.params(), shards_->shard(), max_norm, lr);
    if (zero_) return zero_->Step(model_.params(), model_.grads(), max_norm, lr);
    const double norm = ClipGradNorm(model_.grads(), max_norm);
    optimizer_->Step(model_.params(), model_.grads(), lr);
    return norm;
  }
  const ZeroOptimizer* zero() const override { return zero_ ? &*zero_ : nullptr; }
  ModelStateBytes model_state_bytes() override {
    AdamW& a = zero_ ? zero_->adamw() : *optimizer_;
    const size_t grads = shards_ ? shards_->shard().size() : model_.grads().size();
    return {model_.params().size() * sizeof(float), grads * sizeof(float),
            (a.m().size() + a.v().size()) * sizeof(float),
            shards_ ? shards_->scratch_bytes() : 0};
  }

  std::span<float> grads() override { return model_.grads(); }
  DdpReducer::WaitReadyFn grad_wait() override { return {}; }

  Result<void> BroadcastHost(comm::Communicator& comm, void* data, size_t count,
                             comm::DataType type) override {
    return comm.Broadcast(data, count, type, 0);
  }
  Result<void> AllReduceHost(comm::Communicator& comm, float* data, size_t count,
                             comm::ReduceOp op) override {
    return comm.AllReduce(data, data, count, comm::DataType::kFloat32, op);
  }

  Result<void> RestoreState(comm::Communicator* comm, Checkpoint* ckpt, int64_t adam_t) override {
    auto params = model_.params();
    std::vector<float> m(params.size()), v(params.size());
    if (ckpt) {
      std::copy(ckpt->params.begin(), ckpt->params.end(), params.begin());
      m = std::move(ckpt->adam_m);
      v = std::move(ckpt->adam_v);
    }
    if (comm) {
      COHORT_TRY_VOID(comm->Broadcast(params.data(), params.size(), comm::DataType::kFloat32, 0));
      COHORT_TRY_VOID(comm->Broadcast(m.data(), m.size(), comm::DataType::kFloat32, 0));
      COHORT_TRY_VOID(comm->Broadcast(v.data(), v.size(), comm::DataType::kFloat32, 0));
    }
    if (zero_) {
      const size_t lo = zero_->shard_begin(), n = zero_->adamw().num_params();
      return zero_->adamw().Restore(std::span<const float>(m).subspan(lo, n),
                                    std::span<const float>(v).subspan(lo, n), adam_t);
    }
    return optimizer_->Restore(m, v, adam_t);
  }
  Result<void> BroadcastParams(comm::Communicator& comm) override {
    auto params = model_.params();
    return comm.Broadcast(params.data(), params.size(), comm::DataType::kFloat32, 0);
  }
  Result<void> StateForCheckpoint(CheckpointView& view) override {
    if (zero_) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "ZeRO keeps only this rank's shard of the AdamW state: checkpoints are "
                       "written by range (CheckpointRanges)");
    }
    view.params = model_.params();
    view.adam_m = optimizer_->m();
    view.adam_v = optimizer_->v();
    view.adam_t = optimizer_->t();
    return {};
  }
  // With ZeRO each rank writes its shard: the parameters' (replicated, but the shard is the
  // part this rank updated) and its AdamW moments. The shards are the data replicas' shares.
  Result<std::vector<CheckpointRange>> CheckpointRanges(int replica, int replicas,
                                                        int64_t* adam_t) override {
    if (!zero_) return TrainModel::CheckpointRanges(replica, replicas, adam_t);
    if (replica != zero_->rank() || replicas != zero_->partition().ranks) {
      return Errorf(ErrorCode::kInternal, "ZeRO shard {} of {} asked for replica {} of {}",
                    zero_->rank(), zero_->partition().ranks, replica, replicas);
    }
    AdamW& a = zero_->adamw();
    *adam_t = a.t();
    const size_t lo = zero_->shard_begin(), n = a.num_params();
    std::vector<CheckpointRange> out;
    if (n == 0) return out;
    out.push_back({CheckpointArray::kParams, lo, n, n, 1, model_.params().subspan(lo, n)});
    out.push_back({CheckpointArray::kAdamM, lo, n, n, 1, a.m()});
    out.push_back({CheckpointArray::kAdamV, lo, n, n, 1, a.v()});
    return out;
  }

  Result<std::vector<float>> NextTokenLogits(std::span<const int32_t> window) override {
    const GptConfig& c = model_.config();
    const int T = static_cast<int>(window.size());
    COHORT_TRY(model_.Forward(window, {}, 1, T));
    const size_t vp = c.padded_vocab_size();
    std::span<const float> last = model_.logits().subspan((T - 1) * vp, c.vocab_size);
    return std::vector<float>(last.begin(), last.end());
  }
  int max_window() const override { return model_.config().max_seq_len; }

  Result<void> Export(const std::string& path) override { return ExportGpt2(model_, path); }

 private:
  GptModel model_;
  std::optional<AdamW> optimizer_;    // without ZeRO
  std::optional<ZeroOptimizer> zero_;  // with ZeRO
  std::unique_ptr<ShardedGradients> shards_;  // ZeRO-2: the gradient shard and its scratch
};

}  // namespace

Result<std::unique_ptr<TrainModel>> MakeCpuTrainModel(GptModel model, const AdamWConfig& adamw) {
  std::vector<DecayRange> ranges;
  for (const auto& t : model.tensors()) ranges.push_back({t.offset, t.numel, t.weight_decay});
  AdamW optimizer = COHORT_TRY(AdamW::Create(model.params().size(), std::move(ranges), adamw));
  return std::unique_ptr<TrainModel>(new CpuTrainModel(std::move(model), std::move(optimizer)));
}

Result<std::unique_ptr<TrainModel>> MakeZeroCpuTrainModel(GptModel model, const AdamWConfig& adamw,
                                                          comm::Communicator& data, int stage) {
  std::vector<DecayRange> ranges;
  for (const auto& t : model.tensors()) ranges.push_back({t.offset, t.numel, t.weight_decay});
  ZeroOptimizer zero =
      COHORT_TRY(ZeroOptimizer::Create(data, stage, model.params().size(), ranges, adamw));
  std::unique_ptr<ShardedGradients> shards;
  if (stage == 2) {
    shards = std::make_unique<ShardedGradients>(data, zero.partition(),
                                                GptModel::MaxGradPiece(model.config()));
  }
  return std::unique_ptr<TrainModel>(
      new CpuTrainModel(std::move(model), std::move(zero), std::move(shards)));
}

}  // namespace cohort::engine
