// The CPU TrainModel: GptModel + AdamW + ClipGradNorm in host memory, exactly the calls the
// trainer made before it had a device choice (so CPU runs are unchanged, bitwise). With ZeRO
// (stages 1 and 2, parallel/zero.h) the AdamW state is this rank's shard only and the step is
// ZeroOptimizer's; checkpoints then hold the shard's ranges. Stage 2 also holds only its
// shard of the gradients (ShardedGradients, parallel/zero_grads.h): the model's gradient
// buffer is released and every backward pass reduce-scatters its pieces into the shard, so
// the trainer makes no DdpReducer for it (grads() is empty). Stage 3 also holds only its
// shard of the parameters (GatheredParams, parallel/zero_params.h): the model reads each
// piece from an all-gather as it computes, so every Forward is a collective and the model
// says model_parallel() (sampling and export on every rank). With prefetch the gathers run on
// GatheredParams' thread over a communicator of their own (split from the data group), so the
// gradient pieces' reduce-scatters overlap the backward pass again (ShardedGradients' thread
// on the data group's communicator); without, both run on the training thread in one order.
#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "engine/checkpoint/gpt2_safetensors.h"
#include "engine/optim/grad_clip.h"
#include "engine/parallel/zero.h"
#include "engine/parallel/zero_grads.h"
#include "engine/parallel/zero_params.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

class CpuTrainModel final : public TrainModel {
 public:
  CpuTrainModel(GptModel model, AdamW optimizer)
      : model_(std::move(model)), optimizer_(std::move(optimizer)) {}
  CpuTrainModel(GptModel model, ZeroOptimizer zero, std::unique_ptr<ShardedGradients> shards,
                std::unique_ptr<comm::Communicator> gather_comm,
                std::unique_ptr<GatheredParams> gathered)
      : model_(std::move(model)),
        zero_(std::move(zero)),
        shards_(std::move(shards)),
        gather_comm_(std::move(gather_comm)),
        gathered_(std::move(gathered)) {
    if (shards_) model_.ReleaseGradients();
    if (gathered_) {
      model_.ReleaseParams();
      model_.SetParamSource(gathered_.get());
    }
  }

  const GptConfig& config() const override { return model_.config(); }
  size_t num_params() const override { return model_.config().num_parameters(); }
  // ZeRO-3: every Forward gathers parameters from every rank, so sampling and export are
  // collectives (the trainer then calls them on every rank).
  bool model_parallel() const override { return gathered_ != nullptr; }

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
    // A round of piece requests: Forward and (with targets) the backward pass after it.
    if (gathered_) gathered_->BeginRound(targets.empty() ? 1 : 0);
    auto loss = model_.Forward(tokens, targets, B, T);
    if (gathered_) COHORT_TRY_VOID(gathered_->TakeError());
    return loss;
  }
  Result<void> Backward(float loss_scale, const GradReadyFn& ready) override {
    if (!shards_) return model_.Backward(loss_scale, ready);
    // Stages 2 and 3: every micro-batch's pieces reduce-scattered into the shard (`ready` is
    // a reducer's, and these stages have none).
    shards_->Begin();
    auto backward = model_.BackwardToSink(loss_scale, *shards_);
    auto reduced = shards_->Finish();
    if (gathered_) COHORT_TRY_VOID(gathered_->TakeError());
    COHORT_TRY_VOID(backward);
    return reduced;
  }
  Result<double> ClipAndStep(double max_norm, float lr) override {
    if (gathered_) {
      gathered_->Invalidate();  // no prefetch reads the shard while it changes
      return zero_->StepOwnShard(gathered_->shard(), shards_->shard(), max_norm, lr);
    }
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
    const size_t params = gathered_ ? gathered_->shard().size() : model_.params().size();
    return {params * sizeof(float), grads * sizeof(float),
            (a.m().size() + a.v().size()) * sizeof(float),
            (shards_ ? shards_->scratch_bytes() : 0) +
                (gathered_ ? gathered_->gather_bytes() : 0)};
  }

  size_t initial_values() const override { return initial_values_; }
  void set_initial_values(size_t n) { initial_values_ = n; }
  std::optional<GatherStats> gather_stats() const override {
    if (!gathered_) return std::nullopt;
    return GatherStats{gathered_->prefetch_hits(), gathered_->prefetch_misses(),
                       gathered_->wait_seconds(), gathered_->peak_gathered_bytes(),
                       gathered_->allocations()};
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

  // Resume by range: every rank reads its own state straight into place: the parameters
  // (ZeRO-3: its shard of them) and its AdamW moments (with ZeRO: its shard).
  CheckpointReadRequest RestoreRequest() override {
    AdamW& a = zero_ ? zero_->adamw() : *optimizer_;
    const size_t lo = zero_ ? zero_->shard_begin() : 0, k = a.num_params();
    CheckpointReadRequest req;
    if (gathered_) {
      gathered_->Invalidate();  // no prefetch reads the shard while it is written
      req.params.push_back({lo, k, gathered_->shard().data()});
    } else {
      req.params.push_back({0, model_.params().size(), model_.params().data()});
    }
    req.adam_m.push_back({lo, k, a.m().data()});
    req.adam_v.push_back({lo, k, a.v().data()});
    return req;
  }
  Result<void> FinishRestore(int64_t adam_t) override {
    return (zero_ ? zero_->adamw() : *optimizer_).RestoreStep(adam_t);
  }

  Result<void> BroadcastParams(comm::Communicator& comm) override {
    // ZeRO-3: every rank's shard came from the same seed or file (the trainer initialises
    // each the same way), so nothing needs to move; a whole-buffer broadcast would make every
    // rank hold the whole model.
    if (gathered_) return {};
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
    const std::span<const float> params =
        gathered_ ? gathered_->shard() : model_.params().subspan(lo, n);
    out.push_back({CheckpointArray::kParams, lo, n, n, 1, params});
    out.push_back({CheckpointArray::kAdamM, lo, n, n, 1, a.m()});
    out.push_back({CheckpointArray::kAdamV, lo, n, n, 1, a.v()});
    return out;
  }

  Result<std::vector<float>> NextTokenLogits(std::span<const int32_t> window) override {
    const GptConfig& c = model_.config();
    const int T = static_cast<int>(window.size());
    COHORT_TRY(Forward(window, {}, 1, T));
    const size_t vp = c.padded_vocab_size();
    std::span<const float> last = model_.logits().subspan((T - 1) * vp, c.vocab_size);
    return std::vector<float>(last.begin(), last.end());
  }
  int max_window() const override { return model_.config().max_seq_len; }

  Result<void> Export(const std::string& path) override {
    if (!gathered_) return ExportGpt2(model_, path);
    // ZeRO-3 (every rank calls this): the shards gathered into a whole model on rank 0.
    std::vector<float> whole = COHORT_TRY(gathered_->GatherAll());
    if (zero_->rank() != 0) return {};
    GptModel copy = COHORT_TRY(GptModel::Create(model_.config()));
    copy.ReleaseGradients();
    std::copy(whole.begin(), whole.end(), copy.params().begin());
    return ExportGpt2(copy, path);
  }

 private:
  GptModel model_;
  std::optional<AdamW> optimizer_;    // without ZeRO
  std::optional<ZeroOptimizer> zero_;  // with ZeRO
  std::unique_ptr<ShardedGradients> shards_;  // ZeRO-2 and 3: the gradient shard and scratch
  std::unique_ptr<comm::Communicator> gather_comm_;  // ZeRO-3 with prefetch: the gathers' own
  std::unique_ptr<GatheredParams> gathered_;  // ZeRO-3: the parameter shard, gathered per piece
  size_t initial_values_ = 0;  // generated from the seed for this rank (sharded init)
};

}  // namespace

Result<std::unique_ptr<TrainModel>> MakeCpuTrainModel(GptModel model, const AdamWConfig& adamw) {
  std::vector<DecayRange> ranges;
  for (const auto& t : model.tensors()) ranges.push_back({t.offset, t.numel, t.weight_decay});
  AdamW optimizer = COHORT_TRY(AdamW::Create(model.params().size(), std::move(ranges), adamw));
  return std::unique_ptr<TrainModel>(new CpuTrainModel(std::move(model), std::move(optimizer)));
}

namespace {

// ZeRO over `data` for `model`; stage 3's parameter shard is `shard_of(lo, hi)` (this rank's
// [lo, hi) of the logical buffer).
Result<std::unique_ptr<TrainModel>> MakeZero(
    GptModel model, const AdamWConfig& adamw, comm::Communicator& data, int stage, bool prefetch,
    const std::function<std::vector<float>(size_t, size_t)>& shard_of) {
  const size_t n = model.config().num_parameters();
  std::vector<DecayRange> ranges;
  for (const auto& t : model.tensors()) ranges.push_back({t.offset, t.numel, t.weight_decay});
  ZeroOptimizer zero = COHORT_TRY(ZeroOptimizer::Create(data, stage, n, ranges, adamw));
  std::unique_ptr<ShardedGradients> shards;
  std::unique_ptr<GatheredParams> gathered;
  std::unique_ptr<comm::Communicator> gather_comm;
  const bool own_gathers = stage == 3 && prefetch && data.size() > 1;
  if (own_gathers) {
    std::vector<int> all(static_cast<size_t>(data.size()));
    for (int r = 0; r < data.size(); ++r) all[static_cast<size_t>(r)] = r;
    auto split = data.Split(all);
    if (!split) return std::unexpected(WithContext(split.error(), "ZeRO-3 prefetch group"));
    gather_comm = std::move(*split);
  }
  if (stage >= 2) {
    // Without prefetch stage 3's parameter gathers run on the training thread over the data
    // group, so its reduce-scatters do too (one order of collectives on every rank).
    shards = std::make_unique<ShardedGradients>(data, zero.partition(),
                                                GptModel::MaxGradPiece(model.config()),
                                                /*overlap=*/stage == 2 || own_gathers);
  }
  if (stage == 3) {
    const size_t lo = zero.shard_begin(), hi = lo + zero.partition().size(zero.rank());
    gathered = GatheredParams::FromShard(own_gathers ? *gather_comm : data, zero.partition(),
                                         shard_of(lo, hi),
                                         GptModel::ParamPieceSizes(model.config()), own_gathers);
  }
  return std::unique_ptr<TrainModel>(new CpuTrainModel(std::move(model), std::move(zero),
                                                       std::move(shards), std::move(gather_comm),
                                                       std::move(gathered)));
}

}  // namespace

Result<std::unique_ptr<TrainModel>> MakeZeroCpuTrainModel(GptModel model, const AdamWConfig& adamw,
                                                          comm::Communicator& data, int stage,
                                                          bool prefetch) {
  std::span<const float> whole = model.params();
  return MakeZero(std::move(model), adamw, data, stage, prefetch, [whole](size_t lo, size_t hi) {
    return std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(lo),
                              whole.begin() + static_cast<std::ptrdiff_t>(hi));
  });
}

Result<std::unique_ptr<TrainModel>> MakeZero3CpuTrainModelFromSeed(const GptConfig& config,
                                                                   uint64_t seed,
                                                                   const AdamWConfig& adamw,
                                                                   comm::Communicator& data,
                                                                   bool prefetch) {
  GptModel model = COHORT_TRY(GptModel::CreateUnallocated(config));
  size_t generated = 0;
  auto made = MakeZero(std::move(model), adamw, data, 3, prefetch,
                       [&](size_t lo, size_t hi) {
                         std::vector<float> shard(hi - lo);
                         const ParamRun run{lo, hi - lo, shard.data()};
                         generated = GenerateInitialRuns(config, seed, {&run, 1});
                         return shard;
                       });
  if (made) static_cast<CpuTrainModel&>(**made).set_initial_values(generated);
  return made;
}

}  // namespace cohort::engine
