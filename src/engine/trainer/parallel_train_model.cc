// The TrainModel of a model split over ranks (tensor and/or pipeline parallelism), on the
// CPU or on CUDA: this rank's ShardEngine (shard_engine.h: the shard model, where its state
// lives, its optimizer), the communicators of its groups, and the pipeline that runs a step's
// micro-batches through the stages. One class for both devices: only the engine differs.
//
// A step: every rank loads the step's micro-batches (the first stage reads the tokens, the
// last the targets); the pipeline runs its schedule; the tied embedding's gradient is
// summed between the first and the last stage (Megatron's embedding group); the data-
// parallel group averages every gradient, bucket by bucket during the last micro-batch's
// backward (parallel/shard_grad_reducer.h; ParallelStepOptions::overlap_grad_reduce); the
// loss (computed on the last stage) and the measured bubble go to every stage of the
// replica. Clipping sums the squared gradients of
// every tensor once (replicated tensors on tensor rank 0 only, the head's copy of wte never)
// over the replica's model-parallel group, so the norm is the one a single rank computes.
//
// Two worlds. The groups whose collectives read the gradients or the tensor group's
// activations (tensor, data, embedding) are split from `world`, whose communicator reaches
// the engine's memory (nccl on GPUs), and so are the pipeline's channels when the engine's
// messages are in device memory (device to device). Everything that moves host values (host
// pipeline messages, the loss and bubble, the norm's sum, logits for sampling, the state
// gathered or scattered for checkpoints and export, and the trainer's own host collectives)
// goes over `host`, a communicator of the same ranks on host memory. On the CPU, and on the
// CUDA emulator (whose device memory is host memory), both are the same gloo communicator.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "engine/checkpoint/gpt2_safetensors.h"
#include "engine/checkpoint/sharded_state.h"
#include "engine/model/gpt_shard.h"
#include "engine/parallel/pipeline.h"
#include "engine/parallel/shard_grad_reducer.h"
#include "engine/parallel/tensor_parallel.h"
#include "engine/parallel/zero.h"
#include "engine/trainer/shard_engine.h"
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

// Makes this rank's engine once the groups exist: its spec, the tensor group and the data
// group's communicator (null for one replica).
using EngineFactory = std::function<Result<std::unique_ptr<ShardEngine>>(
    const ShardSpec&, TensorParallelGroup&, comm::Communicator* data)>;

class ParallelTrainModel final : public TrainModel, private PipelineCompute {
 public:
  ParallelTrainModel(const ParallelLayout& layout, comm::Communicator& world,
                     comm::Communicator& host, const ParallelStepOptions& options)
      : layout_(layout), world_(world), host_(host), options_(options),
        at_(layout.CoordsOf(world.rank())), tp_(nullptr) {}

  Result<void> Init(const GptConfig& config, const InitialParams& initial,
                    const EngineFactory& make_engine) {
    const int rank = world_.rank();
    if (host_.rank() != rank || host_.size() != world_.size()) {
      return Errorf(ErrorCode::kInternal,
                    "the host communicator is rank {} of {}, the world's rank {} of {}",
                    host_.rank(), host_.size(), rank, world_.size());
    }
    config_ = config;
    tp_comm_ = COHORT_TRY(SplitGroup(world_, layout_.TensorGroup(rank), "tensor"));
    dp_comm_ = COHORT_TRY(SplitGroup(world_, layout_.DataGroup(rank), "data"));
    pipe_comm_ = COHORT_TRY(SplitGroup(host_, layout_.PipelineGroup(rank), "pipeline"));
    if (at_.stage == 0 || at_.stage == layout_.pipeline - 1) {
      emb_comm_ = COHORT_TRY(SplitGroup(world_, layout_.EmbeddingGroup(rank), "embedding"));
    }
    model_comm_ = COHORT_TRY(SplitGroup(host_, layout_.ModelGroup(rank), "model"));
    tp_ = TensorParallelGroup(tp_comm_.get());
    engine_ = COHORT_TRY(make_engine(ShardSpecFor(layout_, config_, rank), tp_, dp_comm_.get()));
    // Device messages travel over the world that reaches the device; host ones over host_.
    MessageMemory& messages = engine_->message_memory();
    links_ = COHORT_TRY(
        PipelineLinks::Create(messages.on_device() ? world_ : host_, layout_, rank, messages));
    // Only the part of the shard this rank holds (all of it but under ZeRO-3), generated
    // from the seed element by element (GenerateInitialRuns), or cut from the whole model.
    const GptShardLayout& shard = engine_->layout();
    const ShardPiece part = engine_->param_part();
    std::vector<float> params(part.size());
    if (initial.from != nullptr) {
      std::vector<float> all(shard.total);
      ExtractShard(shard, initial.from->params(), all);
      std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(part.begin), part.size(),
                  params.begin());
    } else {
      initial_values_ = GenerateInitialRuns(
          config_, initial.seed, LogicalRunsOf(shard, part.begin, part.end, params.data()));
    }
    COHORT_TRY_VOID(engine_->SetParamPart(params));
    runner_ = std::make_unique<PipelineRunner>(layout_, at_.stage, *links_);
    const std::vector<int> mine = layout_.ChunksOf(at_.stage);
    local_.assign(layout_.num_chunks(), -1);
    for (size_t i = 0; i < mine.size(); ++i) local_[mine[i]] = static_cast<int>(i);
    backwards_.assign(mine.size(), 0);
    // Under ZeRO-2 and 3 the engine reduces the data group's shards itself (after the tied
    // sum: ReduceDataShards); the reducer then only sums the tied copies.
    // Without a whole gradient buffer (ZeRO-2 and 3) the tied copy has a buffer of its own.
    std::span<float> grads = engine_->grads();
    ShardGradPiece tied = TiedCopy();
    if (std::span<float> own = engine_->tied_grads(tied); !own.empty()) {
      grads = own;
      tied.offset = 0;
    }
    reducer_ = COHORT_TRY(ShardGradReducer::Create(grads, tied, emb_comm_.get(),
                                                   engine_->reduces_data_shards() ? nullptr : dp_comm_.get(),
                                                   options_.overlap_grad_reduce,
                                                   options_.bucket_bytes, engine_->grad_wait(),
                                                   engine_->grad_reduced()));
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
    st.shard_floats = engine_->layout().total;
    st.reduce_buckets = reducer_->buckets();
    st.reduce_buckets_overlapped = reducer_->overlapped_buckets();
    return st;
  }

  // The per-micro-batch interface is the data-parallel loop's; a split model runs whole
  // steps (TrainMicrobatches).
  Result<void> ZeroGrad() override { return engine_->ZeroGrad(); }
  Result<float> Forward(std::span<const int32_t>, std::span<const int32_t>, int, int) override {
    return NotPerMicrobatch();
  }
  Result<void> Backward(float, const GradReadyFn&) override { return NotPerMicrobatch(); }

  Result<double> TrainMicrobatches(int count, int B, int T, const LoadMicrobatch& load,
                                   DdpReducer*) override {
    COHORT_TRY_VOID(LoadAll(count, B, T, load));
    COHORT_TRY_VOID(engine_->ZeroGrad());
    engine_->BeginRound(count, false);
    scale_ = 1.0f / static_cast<float>(count);
    engine_->ResetPeak();
    microbatch_activation_bytes_ = 0;
    std::fill(backwards_.begin(), backwards_.end(), 0);
    reducer_->Begin();
    auto ran = runner_->Run(*this, count, false);
    if (!ran) {
      reducer_->Abandon();
      return std::unexpected(ran.error());
    }
    peak_activation_bytes_ = engine_->peak_activation_bytes();
    COHORT_TRY_VOID(reducer_->Finish([this] { return engine_->WaitGrads(); }));
    if (engine_->reduces_data_shards()) {
      // ZeRO-2 and 3: into the data shards (with one replica, the CUDA engine's parameter
      // offload: into its shard of the whole).
      COHORT_TRY_VOID(engine_->ReduceDataShards());
    }
    return ReplicaLoss(count, ran->bubble());
  }

  Result<double> EvalMicrobatches(int count, int B, int T, const LoadMicrobatch& load) override {
    COHORT_TRY_VOID(LoadAll(count, B, T, load));
    engine_->BeginRound(count, true);
    if (auto ran = runner_->Run(*this, count, true); !ran) return std::unexpected(ran.error());
    const double bubble = bubble_;
    const double loss = COHORT_TRY(ReplicaLoss(count, 0.0));
    bubble_ = bubble;  // evaluation's forward-only pipeline is not the training bubble
    return loss;
  }

  Result<double> ClipAndStep(double max_norm, float lr) override {
    double sq = COHORT_TRY(engine_->SquaredGradNorm());
    // Summed in double over the model group (a float32 all-reduce of (high, low) parts
    // rounded the sum beyond two ranks).
    if (model_comm_) sq = COHORT_TRY(SumOverRanks(*model_comm_, sq));
    const double norm = std::sqrt(sq);
    COHORT_TRY_VOID(engine_->Step(norm, max_norm, lr));
    return norm;
  }

  std::span<float> grads() override { return engine_->grads(); }
  DdpReducer::WaitReadyFn grad_wait() override { return {}; }
  OffloadCopies offload_copies() const override { return engine_->offload_copies(); }

  // Host values go over the host world (the same ranks as the trainer's communicator,
  // which may be nccl).
  Result<void> BroadcastHost(comm::Communicator& comm, void* data, size_t count,
                             comm::DataType type) override {
    return HostOf(comm).Broadcast(data, count, type, 0);
  }
  Result<void> AllReduceHost(comm::Communicator& comm, float* data, size_t count,
                             comm::ReduceOp op) override {
    return HostOf(comm).AllReduce(data, data, count, comm::DataType::kFloat32, op);
  }

  // Resume by range: the engine's part of the shard, as logical runs (shard_engine.h).
  CheckpointReadRequest RestoreRequest() override { return engine_->RestoreRequest(); }
  Result<void> FinishRestore(int64_t adam_t) override { return engine_->FinishRestore(adam_t); }
  void DropRestore() override { engine_->DropRestore(); }
  // Every rank extracted its shard from the same initial model (same seed or file).
  Result<void> BroadcastParams(comm::Communicator&) override { return {}; }
  ModelStateBytes model_state_bytes() override { return engine_->state_bytes(); }
  std::optional<GatherStats> gather_stats() const override { return engine_->gather_stats(); }
  size_t initial_values() const override { return initial_values_; }
  const ZeroOptimizer* zero() const override { return engine_->zero(); }
  ZeroShape zero_shape() const override { return engine_->zero_shape(); }

  Result<std::vector<CheckpointRange>> CheckpointRanges(int replica, int replicas,
                                                        int64_t* adam_t) override {
    const ShardEngine::HostState st = COHORT_TRY(engine_->StateOnHost());
    *adam_t = st.t;
    std::vector<ShardRun> runs = CheckpointRuns(engine_->layout());
    // With ZeRO each data rank writes the runs of its part of the shard, where its moments
    // are; without, the replicas take turns over the runs.
    const size_t lo = st.opt_begin;
    const bool sharded = engine_->zero_shape().stage > 0;
    if (sharded) runs = CutRuns(runs, lo, lo + st.m.size());
    const size_t first = sharded ? 0 : static_cast<size_t>(replica);
    const size_t step = sharded ? 1 : static_cast<size_t>(replicas);
    std::vector<CheckpointRange> out;
    for (size_t i = first; i < runs.size(); i += step) {
      const ShardRun& r = runs[i];
      const size_t count = r.width * r.runs;
      out.push_back({CheckpointArray::kParams, r.logical, r.width, r.stride, r.runs,
                     st.params.subspan(r.local - st.params_begin, count)});
      out.push_back({CheckpointArray::kAdamM, r.logical, r.width, r.stride, r.runs,
                     st.m.subspan(r.local - lo, count)});
      out.push_back({CheckpointArray::kAdamV, r.logical, r.width, r.stride, r.runs,
                     st.v.subspan(r.local - lo, count)});
    }
    return out;
  }
  // Rank 0 gets the logical state (the tests compare layouts with it; checkpoints are
  // written by range, CheckpointRanges).
  Result<void> StateForCheckpoint(CheckpointView& view) override {
    if (engine_->zero_shape().stage > 0) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "ZeRO keeps part of the shard's AdamW state per data rank: checkpoints are "
                       "written by range (CheckpointRanges)");
    }
    const ShardEngine::HostState st = COHORT_TRY(engine_->StateOnHost());
    std::vector<float> p(st.params.begin(), st.params.end()), m(st.m.begin(), st.m.end()),
        v(st.v.begin(), st.v.end());
    gathered_ = COHORT_TRY(GatherShardedState(host_, layout_, config_, {p, m, v}));
    view.params = gathered_.params;
    view.adam_m = gathered_.adam_m;
    view.adam_v = gathered_.adam_v;
    view.adam_t = st.t;
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
    engine_->BeginRound(1, true);
    auto ran = runner_->Run(*this, 1, true);
    keep_head_ = false;
    if (!ran) return std::unexpected(ran.error());
    std::vector<float> logits(config_.vocab_size);
    const int head = local_[layout_.num_chunks() - 1];
    if (head >= 0) {
      logits = COHORT_TRY(engine_->Logits(head, 0, T - 1));
      engine_->Release(head, 0);
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
    std::vector<float> params = COHORT_TRY(engine_->WholeParams());
    std::vector<float> none(params.size(), 0.0f);
    LogicalState full =
        COHORT_TRY(GatherShardedState(host_, layout_, config_, {params, none, none}));
    if (world_.rank() != 0) return {};
    GptModel host = COHORT_TRY(GptModel::Create(config_));
    std::copy(full.params.begin(), full.params.end(), host.params().begin());
    return ExportGpt2(host, path);
  }

  std::string Describe() const {
    const size_t n = engine_->layout().total;
    return fmt::format("this rank (data {}, stage {}, tensor {}) holds {:.2f}M of the {:.2f}M "
                       "parameters: {}",
                       at_.data, at_.stage, at_.tensor, n / 1e6, config_.num_parameters() / 1e6,
                       engine_->DescribeMemory());
  }

 private:
  static std::unexpected<Error> NotPerMicrobatch() {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "a model split over ranks trains whole steps (TrainMicrobatches)");
  }

  // The host communicator for a collective the trainer asks for on `comm` (its world).
  comm::Communicator& HostOf(comm::Communicator& comm) { return &comm == &world_ ? host_ : comm; }

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

  // The tied embedding's copy on this rank (the first stage's wte, the last stage's head
  // copy: one slice of the vocabulary), summed over the embedding group; none without one.
  ShardGradPiece TiedCopy() const {
    if (!emb_comm_) return {};
    const GptShardLayout& shard = engine_->layout();
    const bool first = at_.stage == 0;
    const ShardChunkOffsets& co =
        shard.chunks[static_cast<size_t>(local_[first ? 0 : layout_.num_chunks() - 1])];
    return {first ? co.wte : co.head_wte,
            static_cast<size_t>(shard.vocab_end - shard.vocab_begin) * config_.n_embd};
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
    const size_t before = engine_->activation_bytes();
    const float loss = COHORT_TRY(engine_->Forward(local, mb, batch, input, output));
    if (mb == 0 && !forward_only) microbatch_activation_bytes_ += engine_->activation_bytes() - before;
    const bool head = chunk == layout_.num_chunks() - 1;
    if (head) loss_sum_ += loss;
    if (forward_only && !(head && keep_head_)) engine_->Release(local, mb);
    return {};
  }
  Result<void> Backward(int chunk, int mb, const float* doutput, float* dinput) override {
    const int local = local_[chunk];
    // The chunk's last micro-batch finishes its gradient: its pieces may be reduced.
    const bool last = ++backwards_[static_cast<size_t>(local)] == microbatches_;
    GradReadyFn ready;
    if (last && reducer_->overlaps()) {
      ready = [this](size_t offset, size_t count) { reducer_->Ready(offset, count); };
    }
    return engine_->Backward(local, mb, scale_, doutput, dinput, ready);
  }

  const ParallelLayout layout_;
  comm::Communicator& world_;  // reaches the engine's memory
  comm::Communicator& host_;   // the same ranks, host memory (may be world_)
  const ParallelStepOptions options_;
  const RankCoords at_;
  GptConfig config_;
  // tensor, data, embedding: split from world_; pipeline, model and the links: from host_.
  std::unique_ptr<comm::Communicator> tp_comm_, dp_comm_, pipe_comm_, emb_comm_, model_comm_;
  TensorParallelGroup tp_;
  std::unique_ptr<ShardEngine> engine_;
  std::unique_ptr<ShardGradReducer> reducer_;  // after engine_: reduces its gradients
  std::unique_ptr<PipelineLinks> links_;       // after engine_: messages in its memory
  std::unique_ptr<PipelineRunner> runner_;
  std::vector<int> local_;  // global chunk -> index among this stage's chunks (-1: elsewhere)
  std::vector<int> backwards_;  // per local chunk: backward passes this step
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
  size_t initial_values_ = 0;  // generated from the seed in Init
};

// The checks both devices share, then the model.
Result<std::unique_ptr<TrainModel>> MakeParallelTrainModel(const GptConfig& config,
                                                           const InitialParams& initial,
                                                           const ParallelLayout& layout,
                                                           comm::Communicator& world,
                                                           comm::Communicator& host,
                                                           const EngineFactory& make_engine,
                                                           const ParallelStepOptions& step,
                                                           std::string* description) {
  COHORT_TRY_VOID(config.Validate());
  if (initial.from != nullptr && initial.from->config().num_parameters() != config.num_parameters()) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "initial model has {} parameters; the configuration {}",
                  initial.from->config().num_parameters(), config.num_parameters());
  }
  auto model = std::make_unique<ParallelTrainModel>(layout, world, host, step);
  COHORT_TRY_VOID(model->Init(config, initial, make_engine));
  if (description) *description = model->Describe();
  return std::unique_ptr<TrainModel>(std::move(model));
}

}  // namespace

Result<std::unique_ptr<TrainModel>> MakeParallelCpuTrainModel(const GptConfig& config,
                                                              const InitialParams& initial,
                                                              const AdamWConfig& adamw,
                                                              const ParallelLayout& layout,
                                                              comm::Communicator& world,
                                                              std::string* description,
                                                              int zero_stage,
                                                              bool prefetch,
                                                              const ParallelStepOptions& step) {
  if (zero_stage < 0 || zero_stage > 3) {
    return Errorf(ErrorCode::kInvalidArgument, "ZeRO stage {} (built: 0 to 3)", zero_stage);
  }
  auto make = [&](const ShardSpec& spec, TensorParallelGroup& tp, comm::Communicator* data) {
    return MakeCpuShardEngine(spec, tp, adamw, data, zero_stage, prefetch);
  };
  return MakeParallelTrainModel(config, initial, layout, world, world, make, step, description);
}

Result<std::unique_ptr<TrainModel>> MakeParallelCudaTrainModel(const GptConfig& config,
                                                               const InitialParams& initial,
                                                               const AdamWConfig& adamw,
                                                               const ParallelLayout& layout,
                                                               comm::Communicator& world,
                                                               comm::Communicator& host,
                                                               std::string* description,
                                                               const ParallelStepOptions& step,
                                                               int zero_stage, bool offload,
                                                               bool offload_params) {
  auto make = [&](const ShardSpec& spec, TensorParallelGroup& tp, comm::Communicator* data) {
    return MakeCudaShardEngine(spec, tp, adamw, step.host_pipeline_messages, data, zero_stage,
                               offload, offload_params);
  };
  return MakeParallelTrainModel(config, initial, layout, world, host, make, step, description);
}

}  // namespace cohort::engine
