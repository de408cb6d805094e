// The TrainModel of a CPU model split over ranks (tensor and/or pipeline parallelism): this
// rank's GptShardModel, its AdamW, the communicators of its groups, and the pipeline that
// runs a step's micro-batches through the stages.
//
// A step: every rank loads the step's micro-batches (the first stage reads the tokens, the
// last the targets); the pipeline runs its schedule; the tied embedding's gradient is
// summed between the first and the last stage (Megatron's embedding group); the data-
// parallel group averages every gradient; the loss (computed on the last stage) and the
// measured bubble go to every stage of the replica. Clipping sums the squared gradients of
// every tensor once (replicated tensors on tensor rank 0 only, the head's copy of wte never)
// over the replica's model-parallel group, so the norm is the one a single rank computes.
#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "engine/checkpoint/gpt2_safetensors.h"
#include "engine/checkpoint/sharded_state.h"
#include "engine/model/gpt_shard.h"
#include "engine/optim/grad_clip.h"
#include "engine/parallel/pipeline.h"
#include "engine/parallel/tensor_parallel.h"
#include "engine/parallel/zero.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

// Splits `members` from `world` when it has more than one rank; null otherwise.
Result<std::unique_ptr<comm::Communicator>> SplitGroup(comm::Communicator& world,
                                                       const std::vector<int>& members,
                                                       const char* what) {
  if (members.size() < 2) return std::unique_ptr<comm::Communicator>();
  auto c = world.Split(members);
  if (!c) return std::unexpected(WithContext(c.error(), fmt::format("{} group", what)));
  return std::move(*c);
}

class ParallelCpuTrainModel final : public TrainModel, private PipelineCompute {
 public:
  ParallelCpuTrainModel(const ParallelLayout& layout, comm::Communicator& world)
      : layout_(layout), world_(world), at_(layout.CoordsOf(world.rank())), tp_(nullptr) {}

  // The optimizer of this rank's shard: AdamW over all of it, or (ZeRO-1, parallel/zero.h)
  // over its part of the shard in the data-parallel group of this tensor/pipeline position.
  // After Init (the data group's communicator).
  Result<void> InitOptimizer(std::vector<DecayRange> ranges, const AdamWConfig& adamw,
                             int zero_stage) {
    const size_t n = shard_->layout().total;
    if (zero_stage > 0 && dp_comm_) {
      zero_ = COHORT_TRY(ZeroOptimizer::Create(*dp_comm_, zero_stage, n, ranges, adamw));
    } else {
      optimizer_ = COHORT_TRY(AdamW::Create(n, std::move(ranges), adamw));
    }
    return {};
  }

  Result<void> Init(const GptConfig& config, const InitialParams& initial) {
    const int rank = world_.rank();
    config_ = config;
    tp_comm_ = COHORT_TRY(SplitGroup(world_, layout_.TensorGroup(rank), "tensor"));
    dp_comm_ = COHORT_TRY(SplitGroup(world_, layout_.DataGroup(rank), "data"));
    pipe_comm_ = COHORT_TRY(SplitGroup(world_, layout_.PipelineGroup(rank), "pipeline"));
    if (at_.stage == 0 || at_.stage == layout_.pipeline - 1) {
      emb_comm_ = COHORT_TRY(SplitGroup(world_, layout_.EmbeddingGroup(rank), "embedding"));
    }
    model_comm_ = COHORT_TRY(SplitGroup(world_, layout_.ModelGroup(rank), "model"));
    links_ = COHORT_TRY(PipelineLinks::Create(world_, layout_, rank));
    tp_ = TensorParallelGroup(tp_comm_.get());
    shard_ = COHORT_TRY(GptShardModel::Create(ShardSpecFor(layout_, config_, rank), tp_));
    if (initial.from != nullptr) {
      ExtractShard(shard_->layout(), initial.from->params(), shard_->params());
    } else {
      GenerateInitialParams(config_, initial.seed,
                            [this](const ParamTensor& t, std::span<const float> values) {
                              ExtractTensor(shard_->layout(), t, values, shard_->params());
                            });
    }
    runner_ = std::make_unique<PipelineRunner>(layout_, at_.stage, *links_);
    const std::vector<int> mine = layout_.ChunksOf(at_.stage);
    local_.assign(layout_.num_chunks(), -1);
    for (size_t i = 0; i < mine.size(); ++i) local_[mine[i]] = static_cast<int>(i);
    return {};
  }

  const GptConfig& config() const override { return config_; }
  size_t num_params() const override { return config_.num_parameters(); }
  bool model_parallel() const override { return true; }
  std::optional<ParallelStats> parallel_stats() const override {
    ParallelStats st;
    st.pipeline = layout_.pipeline;
    st.bubble = bubble_;
    st.theory = TheoreticalBubble(layout_, microbatches_);
    st.schedule = ScheduleName(layout_.schedule);
    st.peak_activation_bytes = peak_activation_bytes_;
    st.microbatch_activation_bytes = microbatch_activation_bytes_;
    st.shard_floats = shard_->layout().total;
    return st;
  }

  // The per-micro-batch interface is the data-parallel loop's; a split model runs whole
  // steps (TrainMicrobatches).
  Result<void> ZeroGrad() override {
    shard_->ZeroGrad();
    return {};
  }
  Result<float> Forward(std::span<const int32_t>, std::span<const int32_t>, int, int) override {
    return NotPerMicrobatch();
  }
  Result<void> Backward(float, const GradReadyFn&) override { return NotPerMicrobatch(); }

  Result<double> TrainMicrobatches(int count, int B, int T, const LoadMicrobatch& load,
                                   DdpReducer*) override {
    COHORT_TRY_VOID(LoadAll(count, B, T, load));
    shard_->ZeroGrad();
    scale_ = 1.0f / static_cast<float>(count);
    shard_->ResetPeak();
    microbatch_activation_bytes_ = 0;
    const PipelineStepStats stats = COHORT_TRY(runner_->Run(*this, count, false));
    peak_activation_bytes_ = shard_->peak_activation_bytes();
    COHORT_TRY_VOID(ReduceGradients());
    return ReplicaLoss(count, stats.bubble());
  }

  Result<double> EvalMicrobatches(int count, int B, int T, const LoadMicrobatch& load) override {
    COHORT_TRY_VOID(LoadAll(count, B, T, load));
    if (auto ran = runner_->Run(*this, count, true); !ran) return std::unexpected(ran.error());
    const double bubble = bubble_;
    const double loss = COHORT_TRY(ReplicaLoss(count, 0.0));
    bubble_ = bubble;  // evaluation's forward-only pipeline is not the training bubble
    return loss;
  }

  Result<double> ClipAndStep(double max_norm, float lr) override {
    double sq = 0;
    for (const ShardTensor& t : shard_->layout().tensors) {
      if (t.counts_in_norm) sq += SquaredNorm(shard_->grads().subspan(t.local.offset, t.local.numel));
    }
    // Summed in double over the model group (a float32 all-reduce of (high, low) parts
    // rounded the sum beyond two ranks).
    if (model_comm_) sq = COHORT_TRY(SumOverRanks(*model_comm_, sq));
    const double norm = std::sqrt(sq);
    if (zero_) {
      COHORT_TRY_VOID(zero_->StepWithNorm(shard_->params(), shard_->grads(), norm, max_norm, lr));
      return norm;
    }
    ClipToNorm(shard_->grads(), norm, max_norm);
    optimizer_->Step(shard_->params(), shard_->grads(), lr);
    return norm;
  }

  std::span<float> grads() override { return shard_->grads(); }
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
    LogicalState full;
    if (ckpt) {
      full.params = std::move(ckpt->params);
      full.adam_m = std::move(ckpt->adam_m);
      full.adam_v = std::move(ckpt->adam_v);
    }
    const size_t n = shard_->layout().total;
    std::vector<float> m(n), v(n);
    COHORT_TRY_VOID(ScatterShardedState(comm, layout_, config_, ckpt ? &full : nullptr,
                                        {shard_->params(), m, v}));
    const size_t lo = opt_begin(), k = adamw().num_params();
    return adamw().Restore(std::span<const float>(m).subspan(lo, k),
                           std::span<const float>(v).subspan(lo, k), adam_t);
  }
  // Every rank extracted its shard from the same initial model (same seed or file).
  Result<void> BroadcastParams(comm::Communicator&) override { return {}; }
  ModelStateBytes model_state_bytes() override {
    return {shard_->params().size() * sizeof(float), shard_->grads().size() * sizeof(float),
            (adamw().m().size() + adamw().v().size()) * sizeof(float)};
  }
  const ZeroOptimizer* zero() const override { return zero_ ? &*zero_ : nullptr; }
  AdamW& adamw() { return zero_ ? zero_->adamw() : *optimizer_; }
  // Where the optimizer's part of the shard buffer starts (0 without ZeRO).
  size_t opt_begin() const { return zero_ ? zero_->shard_begin() : 0;
  }
  Result<std::vector<CheckpointRange>> CheckpointRanges(int replica, int replicas,
                                                        int64_t* adam_t) override {
    *adam_t = adamw().t();
    std::vector<ShardRun> runs = CheckpointRuns(shard_->layout());
    // With ZeRO each data rank writes the runs of its part of the shard, where its moments
    // are; without, the replicas take turns over the runs.
    const size_t lo = opt_begin();
    if (zero_) runs = CutRuns(runs, lo, lo + adamw().num_params());
    const size_t first = zero_ ? 0 : static_cast<size_t>(replica);
    const size_t step = zero_ ? 1 : static_cast<size_t>(replicas);
    std::vector<CheckpointRange> out;
    for (size_t i = first; i < runs.size(); i += step) {
      const ShardRun& r = runs[i];
      const size_t count = r.width * r.runs;
      out.push_back({CheckpointArray::kParams, r.logical, r.width, r.stride, r.runs,
                     shard_->params().subspan(r.local, count)});
      out.push_back({CheckpointArray::kAdamM, r.logical, r.width, r.stride, r.runs,
                     adamw().m().subspan(r.local - lo, count)});
      out.push_back({CheckpointArray::kAdamV, r.logical, r.width, r.stride, r.runs,
                     adamw().v().subspan(r.local - lo, count)});
    }
    return out;
  }
  // Rank 0 gets the logical state (the tests compare layouts with it; checkpoints are
  // written by range, CheckpointRanges).
  Result<void> StateForCheckpoint(CheckpointView& view) override {
    if (zero_) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "ZeRO keeps part of the shard's AdamW state per data rank: checkpoints are "
                       "written by range (CheckpointRanges)");
    }
    gathered_ = COHORT_TRY(GatherShardedState(world_, layout_, config_,
                                              {shard_->params(), optimizer_->m(), optimizer_->v()}));
    view.params = gathered_.params;
    view.adam_m = gathered_.adam_m;
    view.adam_v = gathered_.adam_v;
    view.adam_t = optimizer_->t();
    return {};
  }

  // Every stage runs the window through its chunks; the last stage gathers the logits of
  // the last position from its tensor group and sends them to the other stages.
  Result<std::vector<float>> NextTokenLogits(std::span<const int32_t> window) override {
    const int T = static_cast<int>(window.size());
    tokens_.assign(window.begin(), window.end());
    targets_.clear();
    B_ = 1;
    T_ = T;
    keep_head_ = true;
    auto ran = runner_->Run(*this, 1, true);
    keep_head_ = false;
    if (!ran) return std::unexpected(ran.error());
    std::vector<float> logits(config_.vocab_size);
    const int head = local_[layout_.num_chunks() - 1];
    if (head >= 0) {
      logits = COHORT_TRY(shard_->Logits(head, 0, T - 1));
      shard_->Release(head, 0);
    }
    if (pipe_comm_) {
      COHORT_TRY_VOID(pipe_comm_->Broadcast(logits.data(), logits.size(),
                                            comm::DataType::kFloat32, layout_.pipeline - 1));
    }
    return logits;
  }
  int max_window() const override { return config_.max_seq_len; }

  Result<void> Export(const std::string& path) override {
    // The parameters only (the moments' slots get zeros: ZeRO may hold part of them).
    std::vector<float> none(shard_->layout().total, 0.0f);
    LogicalState full =
        COHORT_TRY(GatherShardedState(world_, layout_, config_, {shard_->params(), none, none}));
    if (world_.rank() != 0) return {};
    GptModel host = COHORT_TRY(GptModel::Create(config_));
    std::copy(full.params.begin(), full.params.end(), host.params().begin());
    return ExportGpt2(host, path);
  }

  std::string Describe() const {
    const size_t n = shard_->layout().total;
    return fmt::format(
        "this rank (data {}, stage {}, tensor {}) holds {:.2f}M of the {:.2f}M parameters: "
        "{:.1f} MB of parameters, gradients and AdamW moments",
        at_.data, at_.stage, at_.tensor, n / 1e6, config_.num_parameters() / 1e6,
        (2.0 * n + 2.0 * (zero_ ? zero_->partition().size(zero_->rank()) : n)) * sizeof(float) /
            1e6);
  }

 private:
  static std::unexpected<Error> NotPerMicrobatch() {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "a model split over ranks trains whole steps (TrainMicrobatches)");
  }

  Result<void> LoadAll(int count, int B, int T, const LoadMicrobatch& load) {
    const size_t per = static_cast<size_t>(B) * T;
    tokens_.resize(per * count);
    targets_.resize(per * count);
    for (int a = 0; a < count; ++a) {
      COHORT_TRY_VOID(load(a, std::span<int32_t>(tokens_).subspan(a * per, per),
                           std::span<int32_t>(targets_).subspan(a * per, per)));
    }
    B_ = B;
    T_ = T;
    microbatches_ = count;
    loss_sum_ = 0;
    return {};
  }

  // The tied embedding's two copies get the sum of their gradients; then the data-parallel
  // average.
  Result<void> ReduceGradients() {
    if (emb_comm_) {
      const ShardChunkOffsets& co =
          at_.stage == 0 ? shard_->layout().chunks[local_[0]]
                         : shard_->layout().chunks[local_[layout_.num_chunks() - 1]];
      const size_t offset = at_.stage == 0 ? co.wte : co.head_wte;
      const size_t count = static_cast<size_t>(shard_->layout().vocab_end -
                                               shard_->layout().vocab_begin) * config_.n_embd;
      float* g = shard_->grads().data() + offset;
      COHORT_TRY_VOID(emb_comm_->AllReduce(g, g, count, comm::DataType::kFloat32,
                                           comm::ReduceOp::kSum));
    }
    if (dp_comm_) {
      auto g = shard_->grads();
      COHORT_TRY_VOID(dp_comm_->AllReduce(g.data(), g.data(), g.size(), comm::DataType::kFloat32,
                                          comm::ReduceOp::kAvg));
    }
    return {};
  }

  // The replica's mean loss (computed on the last stage) and the mean measured bubble, on
  // every stage.
  Result<double> ReplicaLoss(int count, double bubble) {
    const bool last = at_.stage == layout_.pipeline - 1;
    float buf[2] = {last ? static_cast<float>(loss_sum_ / count) : 0.0f,
                    static_cast<float>(bubble)};
    if (pipe_comm_) {
      COHORT_TRY_VOID(pipe_comm_->AllReduce(buf, buf, 2, comm::DataType::kFloat32,
                                            comm::ReduceOp::kSum));
    }
    bubble_ = buf[1] / layout_.pipeline;
    return static_cast<double>(buf[0]);
  }

  // PipelineCompute.
  size_t activation_size() const override {
    return static_cast<size_t>(B_) * T_ * config_.n_embd;
  }
  Result<void> Forward(int chunk, int mb, const float* input, float* output,
                       bool forward_only) override {
    const int local = local_[chunk];
    const size_t per = static_cast<size_t>(B_) * T_;
    MicrobatchTokens batch;
    batch.B = B_;
    batch.T = T_;
    batch.tokens = std::span<const int32_t>(tokens_).subspan(mb * per, per);
    if (!targets_.empty()) batch.targets = std::span<const int32_t>(targets_).subspan(mb * per, per);
    const size_t before = shard_->activation_bytes();
    const float loss = COHORT_TRY(shard_->Forward(local, mb, batch, input, output));
    if (mb == 0 && !forward_only) microbatch_activation_bytes_ += shard_->activation_bytes() - before;
    const bool head = chunk == layout_.num_chunks() - 1;
    if (head) loss_sum_ += loss;
    if (forward_only && !(head && keep_head_)) shard_->Release(local, mb);
    return {};
  }
  Result<void> Backward(int chunk, int mb, const float* doutput, float* dinput) override {
    return shard_->Backward(local_[chunk], mb, scale_, doutput, dinput);
  }

  const ParallelLayout layout_;
  comm::Communicator& world_;
  const RankCoords at_;
  GptConfig config_;
  std::optional<AdamW> optimizer_;    // without ZeRO
  std::optional<ZeroOptimizer> zero_;  // ZeRO-1 over dp_comm_
  std::unique_ptr<comm::Communicator> tp_comm_, dp_comm_, pipe_comm_, emb_comm_, model_comm_;
  TensorParallelGroup tp_;
  std::unique_ptr<PipelineLinks> links_;
  std::unique_ptr<GptShardModel> shard_;
  std::unique_ptr<PipelineRunner> runner_;
  std::vector<int> local_;  // global chunk -> index among this stage's chunks (-1: elsewhere)
  // The step in flight.
  std::vector<int32_t> tokens_, targets_;
  int B_ = 0, T_ = 0, microbatches_ = 1;
  float scale_ = 1.0f;
  double loss_sum_ = 0;
  bool keep_head_ = false;  // sampling: keep the head's stash for its logits
  double bubble_ = 0;       // the last training step's measured bubble, averaged over stages
  size_t peak_activation_bytes_ = 0;        // the last training step's
  size_t microbatch_activation_bytes_ = 0;  // micro-batch 0's stash over this rank's chunks
  LogicalState gathered_;   // rank 0: the state of the last StateForCheckpoint
};

}  // namespace

Result<std::unique_ptr<TrainModel>> MakeParallelCpuTrainModel(const GptConfig& config,
                                                              const InitialParams& initial,
                                                              const AdamWConfig& adamw,
                                                              const ParallelLayout& layout,
                                                              comm::Communicator& world,
                                                              std::string* description,
                                                              int zero_stage) {
  COHORT_TRY_VOID(config.Validate());
  if (zero_stage > 1) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "ZeRO-{} with tensor/pipeline parallelism is not built (stage 1 is)", zero_stage);
  }
  if (initial.from != nullptr && initial.from->config().num_parameters() != config.num_parameters()) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "initial model has {} parameters; the configuration {}",
                  initial.from->config().num_parameters(), config.num_parameters());
  }
  const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, config, world.rank()));
  std::vector<DecayRange> ranges;
  for (const ShardTensor& t : shard.tensors) {
    ranges.push_back({t.local.offset, t.local.numel, t.local.weight_decay});
  }
  auto model = std::make_unique<ParallelCpuTrainModel>(layout, world);
  COHORT_TRY_VOID(model->Init(config, initial));
  COHORT_TRY_VOID(model->InitOptimizer(std::move(ranges), adamw, zero_stage));
  if (description) *description = model->Describe();
  return std::unique_ptr<TrainModel>(std::move(model));
}

}  // namespace cohort::engine
