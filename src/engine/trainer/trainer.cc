#include "engine/trainer/trainer.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <thread>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/communicator.h"
#include "comm/store.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/dir_lock.h"
#include "engine/checkpoint/gpt2_safetensors.h"
#include "engine/data/sampler.h"
#include "engine/data/token_shards.h"
#include "engine/data/tokenizer.h"
#include "engine/model/gpt.h"
#include "engine/optim/adamw.h"
#include "engine/optim/lr_schedule.h"
#include "engine/parallel/ddp.h"
#include "engine/trainer/device_peak.h"
#include "engine/trainer/reporter.h"
#include "engine/trainer/rng.h"
#include "engine/trainer/sampling.h"
#include "engine/trainer/text_corpus.h"
#include "engine/trainer/threads.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// SIGUSR1 asks for a checkpoint at the end of the current step (a job's checkpoint_signal,
// delivered by its agent on `cohort drain --now`; Slurm's --signal habit). Installed on
// every rank so that no rank dies of the signal's default action.
volatile std::sig_atomic_t g_checkpoint_signal = 0;
// SIGTERM (the agent's stop on a cancel or a time limit, before its SIGKILL; `cohort run`
// stopping its ranks) ends the run at the end of the current step, after a checkpoint of
// it: the training up to the signal is kept, as with Megatron's exit signal handler.
volatile std::sig_atomic_t g_stop_signal = 0;

void OnCheckpointSignal(int) { g_checkpoint_signal = 1; }
void OnStopSignal(int) { g_stop_signal = 1; }

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnCheckpointSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  struct sigaction old {};
  sigaction(SIGTERM, nullptr, &old);
  if (old.sa_handler != SIG_IGN) {  // a process started to ignore it keeps ignoring it
    sa.sa_handler = OnStopSignal;
    sigaction(SIGTERM, &sa, nullptr);
  }
}

// Back to SIGTERM's default: after the training loop nothing waits for the flag.
void RestoreStopSignal() {
  struct sigaction old {};
  sigaction(SIGTERM, nullptr, &old);
  if (old.sa_handler == OnStopSignal) signal(SIGTERM, SIG_DFL);
  if (g_stop_signal) raise(SIGTERM);  // one that came after the last step's look
}

// True once per received SIGUSR1.
bool CheckpointSignalled() {
  if (!g_checkpoint_signal) return false;
  g_checkpoint_signal = 0;
  return true;
}

// The model's shape: init_from's header, or the config's with the tokenizer's vocabulary.
Result<GptConfig> ModelShape(const TrainConfig& config, const Tokenizer& tokenizer) {
  GptConfig mc;
  if (!config.init_from.empty()) {
    // model.n_layer, n_head and n_embd are 0 unless the config gives them (config.cc).
    auto read = ReadGpt2Config(config.init_from, config.n_head);
    if (!read && read.error().field == "n_head") {
      return MakeError(ErrorCode::kInvalidArgument, "model." + read.error().message,
                       "model.n_head");
    }
    mc = COHORT_TRY(std::move(read));
    if (config.n_layer > 0 && config.n_layer != mc.n_layer) {
      return FieldError("model.n_layer", "{}, but {} has {} layers (leave it out with init_from)",
                        config.n_layer, config.init_from, mc.n_layer);
    }
    if (config.n_embd > 0 && config.n_embd != mc.n_embd) {
      return FieldError("model.n_embd", "{}, but {} has {} (leave it out with init_from)",
                        config.n_embd, config.init_from, mc.n_embd);
    }
    if (mc.max_seq_len < config.seq_len) {
      return FieldError("model.seq_len", "{} is longer than the {} positions of {}",
                        config.seq_len, mc.max_seq_len, config.init_from);
    }
    if (mc.vocab_size < tokenizer.vocab_size()) {
      return FieldError("model.init_from", "{} has {} token embeddings; the {} tokenizer needs {}",
                        config.init_from, mc.vocab_size, tokenizer.name(), tokenizer.vocab_size());
    }
  } else {
    mc.vocab_size = tokenizer.vocab_size();
    mc.max_seq_len = config.seq_len;
    mc.n_layer = config.n_layer;
    mc.n_head = config.n_head;
    mc.n_embd = config.n_embd;
  }
  COHORT_TRY_VOID(mc.Validate());
  return mc;
}

Result<std::unique_ptr<Tokenizer>> MakeTokenizer(const TrainConfig& config) {
  if (config.tokenizer == "gpt2") return LoadGpt2BpeTokenizer(config.bpe_vocab, config.bpe_merges);
  return MakeByteTokenizer();
}

// The data x pipeline x tensor layout of `world` ranks for a model of shape `mc`.
Result<ParallelLayout> LayoutFor(const TrainConfig& config, GptConfig mc, int world) {
  mc.max_seq_len = config.seq_len;  // the stage balance counts the trained context
  return MakeParallelLayout(config.parallel, mc, world);
}

// How a data-parallel replica runs its share of a step's global batch.
struct BatchShape {
  int accum = 1;        // micro-batches per replica and step
  int micro_batch = 1;  // sequences per micro-batch
};

// The batch shape for `data_world` replicas (train.global_batch_tokens, or
// parallel.microbatches when the batch does not say). train.micro_batch is the most
// sequences per micro-batch: when it does not divide a replica's share of the global batch
// (an elastic job that lost a node, a checkpoint's batch kept on another world size), the
// replica runs the largest micro-batch that does, so the global batch, the data order and
// the loss curve stay those the config asks for. kInvalidArgument (train.global_batch_tokens)
// when the global batch is not whole sequences that split evenly over the replicas.
Result<BatchShape> BatchFor(const TrainConfig& config, int data_world) {
  BatchShape shape{1, config.micro_batch};
  if (auto accum = AccumulationSteps(config, data_world)) {
    shape.accum = *accum;
  } else {
    const int64_t sequences = config.global_batch_tokens / config.seq_len;
    if (config.global_batch_tokens % config.seq_len != 0 || sequences % data_world != 0) {
      return FieldError("train.global_batch_tokens",
                        "{} is not whole sequences that split evenly over the data-parallel "
                        "ranks: it needs a multiple of {} data-parallel rank{} x model.seq_len {} "
                        "= {} (each rank then runs micro-batches of up to train.micro_batch {})",
                        config.global_batch_tokens, data_world, data_world == 1 ? "" : "s",
                        config.seq_len, int64_t{data_world} * config.seq_len, config.micro_batch);
    }
    const int64_t share = sequences / data_world;
    int64_t b = std::min<int64_t>(config.micro_batch, share);
    while (share % b != 0) --b;
    if (share / b > 1 << 20) {
      return FieldError("train.global_batch_tokens", "needs {} accumulation steps; at most {}",
                        share / b, 1 << 20);
    }
    shape.micro_batch = static_cast<int>(b);
    shape.accum = static_cast<int>(share / b);
  }
  if (config.parallel.microbatches > 0) {
    if (config.global_batch_tokens == 0) {
      shape.accum = config.parallel.microbatches;
    } else if (shape.accum != config.parallel.microbatches) {
      const std::string micro =
          shape.micro_batch == config.micro_batch
              ? fmt::format("train.micro_batch {}", shape.micro_batch)
              : fmt::format("micro-batches of {} (train.micro_batch {} does not divide a "
                            "replica's share)",
                            shape.micro_batch, config.micro_batch);
      return FieldError("parallel.microbatches",
                        "{} but train.global_batch_tokens {} / (data {} x {} x model.seq_len {}) "
                        "gives {} micro-batches per replica",
                        config.parallel.microbatches, config.global_batch_tokens, data_world,
                        micro, config.seq_len, shape.accum);
    }
  }
  return shape;
}

// What one training step measured.
struct StepStats {
  double lr = 0;       // the learning rate it used
  double loss = 0;     // mean over the global batch (all ranks)
  double norm = 0;     // gradient norm before clipping
  double seconds = 0;  // wall time of the step
  double tokens_per_s = 0;
};

}  // namespace

struct Trainer::Impl {
  TrainConfig config;
  TrainerContext ctx;
  int rank = 0, world = 1, accum = 1;
  // Data parallelism: this rank's replica and the number of replicas (the world size
  // without tensor and pipeline parallelism).
  int data_rank = 0, data_world = 1;
  ParallelLayout layout;   // data x pipeline x tensor
  GptConfig model_config;  // the model's shape (config, or init_from's file)
  int64_t global_batch = 0;  // sequences per step (G)
  std::shared_ptr<comm::Store> store;
  std::unique_ptr<comm::Communicator> comm;
  // A model split over ranks on CUDA with nccl: the same ranks over gloo, for the values that
  // live in host memory (pipeline messages, the loss, checkpoint state; train_model.h
  // MakeParallelCudaTrainModel). Null otherwise (comm reaches host memory itself).
  std::unique_ptr<comm::Communicator> host_comm;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<TokenDataset> train_data, val_data;
  std::unique_ptr<TrainModel> model;     // on config.device
  std::optional<CudaDeviceChoice> gpu;  // train.device cuda: this rank's GPU
  std::optional<DistributedSampler> sampler, val_sampler;
  int val_accum = 0;
  // train.micro_batch as configured: the most sequences per micro-batch. config.micro_batch
  // is what the ranks run (SetupBatches: smaller when it does not divide a rank's share).
  int micro_batch_limit = 1;
  std::unique_ptr<DdpReducer> reducer;
  Rng rng{0};
  TrainProgress progress;
  LrSchedule schedule;
  std::unique_ptr<ProgressReporter> reporter;
  // The newest checkpoint this run wrote or resumed from (reported to the head); -1: none.
  int64_t checkpoint_step = -1;
  // The head asked for a checkpoint (the reply to a progress report: cohort drain --now).
  bool checkpoint_requested = false;
  // Why the newest checkpoint write failed; cleared by one that succeeds. Set at the end of
  // Run, the run's last step is in no checkpoint and the run fails.
  std::optional<Error> checkpoint_failure;
  // Rank 0, with checkpoints: held from setup to the end so that no other run writes there.
  std::optional<CheckpointDirLock> checkpoint_lock;
  std::FILE* record = nullptr;  // log.file, rank 0 only
  DevicePeak peak;
  double flops_per_token = 0;
  int threads = 1;

  bool leader() const { return rank == 0; }
  // Checkpoints, export and sampling are collectives of every rank (a model split over
  // ranks), not rank 0's business alone.
  bool collective_io() const { return model && model->model_parallel(); }

  template <typename... Args>
  void Log(fmt::format_string<Args...> f, Args&&... args) {
    if (!leader()) return;
    fmt::print(ctx.out, f, std::forward<Args>(args)...);
    std::fputc('\n', ctx.out);
    std::fflush(ctx.out);
  }

  // Everything Run needs, in order: device, communicator, data, model, resume, reducer,
  // reporter and log.file; fails before training on any bad input.
  Result<void> Setup();
  // train.device cuda: selects and binds this rank's GPU.
  Result<void> SetupDevice();
  // The tokenizer, the model's shape and the data x pipeline x tensor layout: every
  // impossible layout fails here, before any communicator, data or checkpoint.
  Result<void> SetupLayout();
  // world > 1: opens the rendezvous store and creates the communicator (and host_comm).
  Result<void> SetupComm();
  // The tokenizer, the training and validation tokens, and the batch buffers.
  Result<void> SetupData();
  // The global batch (accumulation steps for this world size) and the samplers.
  Result<void> SetupBatches();
  // The model (random or imported) on config.device, its optimizer and the peak figures.
  Result<void> SetupModel();
  // Rank 0 takes checkpoint.dir for this run (checkpoint/dir_lock.h); every rank learns
  // whether it could. The error names the directory's problem or the run that holds it.
  Result<void> LockCheckpointDir();
  // Every rank takes its state from the newest valid checkpoint (ResumeByRange), or, without
  // one, rank 0's initial parameters; kInvalidArgument when it cannot resume.
  Result<void> Resume();
  // Every rank reads and verifies the ranges it holds (TrainModel::RestoreRequest), nothing
  // else (checkpoint.h LoadCheckpointRanges).
  Result<void> ResumeByRange(const CheckpointReadRequest& request);
  // Keeps a checkpoint's global batch on a new world size (see the definition).
  Result<void> KeepCheckpointBatch(int64_t step, int64_t tokens_seen);

  // Trains to config.steps, or until ctx.stop_at_step, one Step at a time.
  Result<TrainResult> Run();
  // One step on one global batch: forward/backward, the gradient all-reduce, clip and
  // update; advances progress. kInternal when the loss is not finite.
  Result<StepStats> Step();
  // The micro-batches of one step; returns the loss averaged over the global batch.
  Result<double> TrainStep();
  // Prints the step's line every log.every steps (and at the last) and posts progress
  // to COHORT_REPORT (whose reply may ask for a checkpoint).
  void LogStep(const StepStats& s);
  // Runs validation when eval.every says so; its loss goes into `result` and `line`.
  Result<void> MaybeEvaluate(TrainResult& result, json& line);
  // Validation loss over eval.batches batches, averaged over the ranks.
  Result<double> Evaluate();
  // Writes a checkpoint every checkpoint.every steps, at the last step, when `stopping`
  // or when asked (the head, SIGUSR1), or when any rank got SIGTERM; a failed write is
  // logged and training goes on (Run fails at the end when the last step's failed). True
  // when a rank got SIGTERM: every rank stops (a collective decides it).
  bool MaybeCheckpoint(bool stopping);
  // Every rank writes its ranges of a checkpoint of the current state (a collective); the
  // error is already logged.
  Result<void> SaveCheckpointNow();
  // Rank 0 prints a sample every sample.every steps (not at the last step).
  Result<void> MaybeSample();
  // Text generated from sample.prompt with the run's generator.
  Result<std::string> SampleText();
  // After the last step: the median throughput, the export, the final sample, and a
  // barrier so that no rank leaves before rank 0 is done.
  Result<TrainResult> Finish(TrainResult result, std::vector<double> rates);
  // `value` averaged over the ranks (itself on one rank).
  Result<double> AverageOverRanks(double value);

  // log.file: queues a line (written once a checkpoint covers its step).
  void Record(json line);
  // log.file: writes the queued lines.
  void FlushRecords();
  // log.file: drops lines past the resumed step (their checkpoint was lost) and appends
  // the resumed checkpoint's lines the record lacks (the run that wrote it died before
  // it wrote them).
  Result<void> ReconcileRecord();
  std::vector<std::string> pending_records;  // log.file lines not yet covered by a checkpoint
  // The lines the resumed checkpoint carries (pending_records when it was written).
  std::vector<std::string> checkpoint_records;

  ~Impl() {
    if (record) std::fclose(record);
  }
};

void Trainer::Impl::Record(json line) {
  if (!record) return;
  line["attempt"] = ctx.attempt;
  line["world_size"] = world;
  line["time_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  pending_records.push_back(line.dump() + "\n");
  // With checkpoints, a step enters the record only once a checkpoint holds it: a rerun
  // after a failure redoes the steps past the checkpoint, and none is recorded twice.
  if (config.checkpoint_dir.empty()) FlushRecords();
}

// The step of a log.file line; nullopt for a line that is not an object with an integer step.
static std::optional<int64_t> RecordStep(const std::string& line) {
  auto j = ParseJson(line, "log.file line");
  if (!j || !j->is_object() || !j->contains("step") || !(*j)["step"].is_number_integer()) {
    return std::nullopt;
  }
  return (*j)["step"].get<int64_t>();
}

// With checkpoints the record holds exactly the steps a checkpoint covers. Lines past the
// step this run resumes from were covered by a checkpoint that has since been lost (found
// damaged): their steps are trained again, so they leave the record first. A checkpoint
// carries the lines it covers that were not yet written, and they are written only once it
// is durable; a run killed in between leaves them out of the file, so they are appended
// here from the checkpoint. The file is rewritten through a temporary file and a rename,
// so a crash leaves the old or the new one.
Result<void> Trainer::Impl::ReconcileRecord() {
  std::ifstream in(config.log_file);
  std::string line, kept, dropped_text;
  size_t dropped = 0;
  int64_t last = 0;  // the last step the kept record holds
  while (in && std::getline(in, line)) {
    const auto step = RecordStep(line);
    if (step && *step > progress.step) {
      ++dropped;
      dropped_text += line + "\n";
      continue;
    }
    if (step) last = std::max(last, *step);
    kept += line + "\n";
  }
  in.close();
  size_t restored = 0;
  for (const auto& text : checkpoint_records) {
    const auto step = RecordStep(text);
    if (!step || *step <= last || *step > progress.step) continue;
    kept += text;
    if (kept.back() != '\n') kept += '\n';
    last = *step;
    ++restored;
  }
  checkpoint_records.clear();
  if (dropped == 0 && restored == 0) return {};
  // The dropped lines are kept beside the record, not deleted: they may be another run's
  // whole curve (a new job, or a fresh start, given the same log.file: nothing resumed, so
  // every line is past step 0).
  const std::string aside = config.log_file + ".dropped";
  if (dropped > 0) {
    std::ofstream out(aside, std::ios::app);
    out << dropped_text;
    out.flush();
    if (!out) {
      return FieldError("log.file", "cannot keep the {} lines past step {} in {}: {}", dropped,
                        progress.step, aside, std::strerror(errno));
    }
  }
  const std::string tmp = config.log_file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    out.flush();
    if (!out) {
      return FieldError("log.file", "cannot rewrite {}: {}", config.log_file, std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), config.log_file.c_str()) != 0) {
    return FieldError("log.file", "cannot replace {}: {}", config.log_file, std::strerror(errno));
  }
  if (dropped > 0) {
    Log("loss record: dropped {} lines past step {} (no checkpoint holds them: lost, or never "
        "in this checkpoint.dir; those steps are trained again), moved to {}",
        dropped, progress.step, aside);
  }
  if (restored > 0) {
    Log("loss record: restored {} lines up to step {} from the checkpoint (the run that wrote "
        "it stopped before writing them)",
        restored, last);
  }
  return {};
}

void Trainer::Impl::FlushRecords() {
  if (!record) return;
  for (const auto& text : pending_records) std::fwrite(text.data(), 1, text.size(), record);
  pending_records.clear();
  std::fflush(record);
}

Result<void> Trainer::Impl::SetupDevice() {
  if (config.device != "cuda") return {};
  gpu = COHORT_TRY(SelectCudaDevice(ctx.env.local_rank));
  return {};
}

Result<void> Trainer::Impl::SetupComm() {
  rank = ctx.env.rank;
  world = ctx.env.world_size;
  if (world == 1) return {};
  COHORT_TRY_VOID(CheckDeviceBackend(config));
  const Millis timeout(static_cast<int64_t>(config.comm_timeout_s * 1000));
  store = std::shared_ptr<comm::Store>(
      COHORT_TRY(comm::OpenStore(ctx.env.store_url, ctx.env.hosts_store(), timeout)));
  comm::CommOptions o;
  o.backend = config.backend;
  o.rank = rank;
  o.world_size = world;
  o.store = store;
  o.prefix = fmt::format("train/{}/{}", ctx.job_id, ctx.attempt);
  o.timeout = timeout;
  comm = COHORT_TRY(comm::CreateCommunicator(o));
  if (config.backend == "auto") {
    if (comm->backend() == "shm") {
      Log("comm: shm (every rank on this host: shared memory)");
    } else {
      Log("comm: {} (ranks on several hosts, or under {} MiB free in /dev/shm: TCP, and shared "
          "memory inside a group whose ranks share a host when there is room)",
          comm->backend(), comm::kShmRoomForAuto >> 20);
    }
  }
  if (layout.model_parallel() && config.device == "cuda" && config.backend == "nccl") {
    o.backend = "auto";
    o.prefix += "/host";
    host_comm = COHORT_TRY(comm::CreateCommunicator(o));
  }
  return {};
}

Result<void> Trainer::Impl::SetupLayout() {
  tokenizer = COHORT_TRY(MakeTokenizer(config));
  model_config = COHORT_TRY(ModelShape(config, *tokenizer));
  layout = COHORT_TRY(LayoutFor(config, model_config, ctx.env.world_size));
  const RankCoords at = layout.CoordsOf(ctx.env.rank);
  data_rank = at.data;
  data_world = layout.data;
  // The batch too is decided by the config and the world alone: before any data is read.
  micro_batch_limit = config.micro_batch;
  COHORT_TRY_VOID(BatchFor(config, data_world));
  rank = ctx.env.rank;
  if (layout.tensor > 1 && ctx.env.local_world_size % layout.tensor != 0) {
    Log("layout: warning: {} ranks per node (LOCAL_WORLD_SIZE) is not a multiple of "
        "parallel.tensor {}, so some tensor groups span nodes (every block's all-reduces then "
        "cross the network); a job spec can declare tensor_group_size to refuse that",
        ctx.env.local_world_size, layout.tensor);
  }
  return {};
}

Result<void> Trainer::Impl::SetupData() {
  if (!config.data_text.empty()) {
    TextCorpus corpus = COHORT_TRY(LoadTextCorpus(config.data_text, *tokenizer, config.val_fraction));
    Log("data: {} text files, {} bytes -> {} training and {} validation tokens ({} tokenizer)",
        corpus.files.size(), corpus.bytes, corpus.train.size(), corpus.val.size(),
        tokenizer->name());
    train_data = TokenDataset::FromTokens(std::move(corpus.train));
    if (!corpus.val.empty()) val_data = TokenDataset::FromTokens(std::move(corpus.val));
  } else {
    train_data = COHORT_TRY(TokenDataset::Open(config.data_train));
    if (!config.data_val.empty()) val_data = COHORT_TRY(TokenDataset::Open(config.data_val));
    Log("data: {} training tokens in {} shards, {} validation tokens", train_data->size(),
        train_data->files().size(), val_data ? val_data->size() : 0);
  }
  COHORT_TRY_VOID(SetupBatches());
  return {};
}

// The global batch (accumulation steps for this world size) and the samplers that follow
// from it. Again at resume when the checkpoint's batch is kept (KeepCheckpointBatch).
Result<void> Trainer::Impl::SetupBatches() {
  TrainConfig asked = config;
  asked.micro_batch = micro_batch_limit;
  const BatchShape shape = COHORT_TRY(BatchFor(asked, data_world));
  accum = shape.accum;
  config.micro_batch = shape.micro_batch;  // what every use below and later runs
  global_batch = int64_t{data_world} * accum * config.micro_batch;
  if (config.micro_batch != micro_batch_limit) {
    Log("batch: micro-batches of {} sequences, not train.micro_batch {}: it does not divide "
        "the {} sequences each of the {} data-parallel ranks trains per step",
        config.micro_batch, micro_batch_limit, int64_t{accum} * config.micro_batch, data_world);
  }

  SamplerConfig sc;
  sc.num_tokens = train_data->size();
  sc.seq_len = config.seq_len;
  sc.global_batch = global_batch;
  sc.seed = config.seed;
  sc.shuffle = config.shuffle;
  auto s = DistributedSampler::Create(sc);
  if (!s) {
    // Too little data for one global batch: say which settings decide the batch.
    return FieldError(config.data_text.empty() ? "data.train" : "data.text",
                      "{} ({} data-parallel rank{} x {} micro-batch{} x {} sequences of "
                      "model.seq_len {}: train.global_batch_tokens {}, train.micro_batch {}); "
                      "give more data, a shorter model.seq_len or a smaller batch",
                      s.error().message, data_world, data_world == 1 ? "" : "s", accum,
                      accum == 1 ? "" : "es", config.micro_batch, config.seq_len,
                      config.global_batch_tokens, micro_batch_limit);
  }
  sampler = std::move(*s);

  if (config.eval_every > 0) {
    if (!val_data) {
      return FieldError("eval.every", "validation needs data (data.val, or data.val_fraction > 0)");
    }
    // The validation batch is the training batch when the data allows, else the largest
    // whole number of micro-batches per rank that fits.
    const int64_t per_round = int64_t{data_world} * config.micro_batch;
    const int64_t windows = static_cast<int64_t>((val_data->size() - 1) / config.seq_len);
    val_accum = static_cast<int>(std::min<int64_t>(accum, windows / per_round));
    if (val_accum < 1) {
      return FieldError("eval.every",
                        "validation data has {} windows of {} tokens; one round of {} ranks x "
                        "train.micro_batch {} needs {}",
                        windows, config.seq_len + 1, data_world, config.micro_batch, per_round);
    }
    SamplerConfig vc = sc;
    vc.num_tokens = val_data->size();
    vc.global_batch = per_round * val_accum;
    vc.shuffle = false;
    auto v = DistributedSampler::Create(vc);
    if (!v) return std::unexpected(WithContext(v.error(), "validation data"));
    val_sampler = std::move(*v);
  }
  return {};
}

Result<void> Trainer::Impl::SetupModel() {
  const GptConfig& mc = model_config;
  // The whole initial model, unless this rank's shard can be initialised by itself (a
  // split model from a seed: each rank generates only its slices).
  std::optional<GptModel> initial;
  // Data-parallel ZeRO-3 from a seed: each rank generates its shard alone (no whole model).
  const bool sharded_init = !layout.model_parallel() && !gpu && config.parallel.zero == 3 &&
                            comm && config.init_from.empty();
  if ((!layout.model_parallel() || !config.init_from.empty()) && !sharded_init) {
    initial = COHORT_TRY(GptModel::Create(mc));
    if (!config.init_from.empty()) {
      COHORT_TRY_VOID(ImportGpt2(config.init_from, *initial));
    } else {
      initial->InitRandom(config.seed);
    }
  }
  if (auto r = train_data->CheckVocab(mc.vocab_size); !r) {
    return std::unexpected(WithContext(r.error(), "training data"));
  }
  if (val_data) {
    if (auto r = val_data->CheckVocab(mc.vocab_size); !r) {
      return std::unexpected(WithContext(r.error(), "validation data"));
    }
  }
  AdamWConfig ac;
  ac.beta1 = static_cast<float>(config.beta1);
  ac.beta2 = static_cast<float>(config.beta2);
  ac.eps = static_cast<float>(config.eps);
  ac.weight_decay = static_cast<float>(config.weight_decay);
  std::string memory;
  ParallelStepOptions step;
  step.overlap_grad_reduce = config.parallel.overlap_grad_reduce;
  step.bucket_bytes = static_cast<size_t>(config.bucket_mb * (1 << 20));
  if (layout.model_parallel() && gpu) {
    model = COHORT_TRY(MakeParallelCudaTrainModel(
        mc, InitialParams{config.seed, initial ? &*initial : nullptr}, ac, layout, *comm,
        host_comm ? *host_comm : *comm, &memory, step, config.parallel.zero,
        config.parallel.offload != "none", config.parallel.offload == "optimizer+params"));
  } else if (layout.model_parallel()) {
    model = COHORT_TRY(MakeParallelCpuTrainModel(
        mc, InitialParams{config.seed, initial ? &*initial : nullptr}, ac, layout, *comm, &memory,
        config.parallel.zero, config.parallel.prefetch, step));
  } else if (gpu) {
    // The GPU starts from the weights the CPU would (same seed or file), then the host
    // copy is dropped. ZeRO needs a data-parallel group (on one rank it changes nothing),
    // except that offload on one rank moves the whole optimizer to the host.
    CudaZeroOptions zero;
    zero.data = comm.get();
    zero.offload = config.parallel.offload != "none";
    zero.offload_params = config.parallel.offload == "optimizer+params";
    zero.stage = comm || zero.offload ? config.parallel.zero : 0;
    model = COHORT_TRY(
        MakeCudaTrainModel(*initial, ac, config.micro_batch, config.seq_len, &memory, zero));
  } else if (sharded_init) {
    model = COHORT_TRY(MakeZero3CpuTrainModelFromSeed(mc, config.seed, ac, *comm,
                                                      config.parallel.prefetch));
  } else if (config.parallel.zero > 0 && comm) {
    model = COHORT_TRY(MakeZeroCpuTrainModel(std::move(*initial), ac, *comm, config.parallel.zero,
                                             config.parallel.prefetch));
  } else {
    model = COHORT_TRY(MakeCpuTrainModel(std::move(*initial), ac));
  }

  schedule.max_lr = config.lr;
  schedule.min_lr = config.min_lr;
  schedule.warmup_steps = config.warmup_steps;
  schedule.total_steps = config.steps;
  COHORT_TRY_VOID(schedule.Validate());

  flops_per_token = TrainingFlopsPerToken(mc, config.seq_len);
  peak = gpu ? gpu->peak : CpuPeakFp32(threads);
  Log("model: GPT-2 style, {} layers, {} heads, d_model {}, context {}, vocab {} -> {:.2f}M "
      "parameters",
      mc.n_layer, mc.n_head, mc.n_embd, config.seq_len, mc.vocab_size,
      model->num_params() / 1e6);
  Log("layout: {}", layout.Describe());
  if (layout.model_parallel()) Log("shard: {}", memory);
  {
    // What the model allocated for its states on this rank (ZeRO shrinks the optimizer's).
    const TrainModel::ModelStateBytes b = model->model_state_bytes();
    const TrainModel::ZeroShape z = model->zero_shape();
    const int zero_ranks = z.stage > 0 ? z.ranks : data_world;
    std::vector<std::string> parts;  // what the scratch is
    if (gpu && layout.model_parallel() && z.stage >= 2) {
      parts.push_back("the shard's whole gradient buffer");  // cuda_shard_engine.cc
    }
    if (!gpu && layout.model_parallel() && z.stage >= 2) {
      parts.push_back("wte's gradient slices");  // trainer/shard_zero.h
    }
    if (!gpu) parts.push_back("gradient pieces");
    if (gpu && layout.model_parallel() && z.stage >= 2) parts.push_back("a receive buffer");
    if (!gpu && z.stage == 3) parts.push_back("gathered parameters");
    if (gpu && !layout.model_parallel() && z.stage >= 2) {
      parts.push_back("two gradient piece buffers and a receive buffer");
    }
    if (gpu && z.stage == 3) parts.push_back("two parameter gather buffers");
    if (gpu && z.offload) parts.push_back("the pinned gradient shard");
    const std::string scratch =
        b.scratch ? fmt::format(", scratch {:.3g} MB ({} bytes: {})", b.scratch / 1e6, b.scratch,
                                fmt::join(parts, ", "))
                  : std::string();
    Log("model states per rank: parameters {:.3g} MB, gradients {:.3g} MB, optimizer {:.3g} MB "
        "({}{}; bytes {} + {} + {}){}",
        b.params / 1e6, b.grads / 1e6, b.optimizer / 1e6, ZeroDescription(z.stage, zero_ranks),
        z.offload ? ", optimizer offloaded to host memory" : "", b.params, b.grads, b.optimizer,
        scratch);
  }
  if (layout.model_parallel()) {
    Log("batch: {} data-parallel replicas x {} micro-batches x {} sequences x {} tokens = {} "
        "tokens per step",
        data_world, accum, config.micro_batch, config.seq_len, global_batch * config.seq_len);
  } else {
    Log("batch: {} ranks x {} accumulation steps x {} sequences x {} tokens = {} tokens per "
        "step",
        data_world, accum, config.micro_batch, config.seq_len, global_batch * config.seq_len);
  }
  if (layout.pipeline > 1) {
    Log("pipeline: {} micro-batches per step through {} stages; {} schedule, theoretical "
        "bubble {:.1f}%",
        accum, layout.pipeline, ScheduleName(layout.schedule),
        TheoreticalBubble(layout, accum) * 100);
  }
  if (gpu) {
    Log("device: cuda:{} {} ({:.0f} GiB; {} visible), peak {} per rank (dense bf16); {:.3g} "
        "training FLOPs per token; bf16 activations, float32 master weights; {}",
        gpu->device, gpu->name, gpu->memory / double(1 << 30), gpu->visible,
        peak.flops > 0 ? fmt::format("{:.1f} TFLOP/s", peak.flops / 1e12)
                       : std::string("unknown (not in the table: no MFU)"),
        flops_per_token, memory);
  } else {
    const char* blas = std::getenv("OPENBLAS_CORETYPE");
    Log("device: {}, peak {:.1f} GFLOP/s per rank; {:.3g} training FLOPs per token; OpenBLAS "
        "kernels {}",
        peak.device, peak.flops / 1e9, flops_per_token, blas ? blas : "chosen by OpenBLAS");
  }
  return {};
}


Result<void> Trainer::Impl::LockCheckpointDir() {
  if (config.checkpoint_dir.empty()) return {};
  Result<void> mine;
  if (leader()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm utc{};
    gmtime_r(&now, &utc);
    const std::string owner =
        fmt::format("cohort train, pid {} on host {}, job {} attempt {}, since {:%Y-%m-%dT%H:%M:%SZ}",
                    getpid(), host, ctx.job_id, ctx.attempt, utc);
    // A restarted job's previous attempt may still be exiting: give it a few seconds.
    const std::chrono::milliseconds wait(ctx.attempt > 0 ? 10000 : 0);
    auto lock = CheckpointDirLock::Acquire(config.checkpoint_dir, owner, wait);
    if (lock) {
      checkpoint_lock.emplace(std::move(*lock));
    } else {
      mine = std::unexpected(WithContext(lock.error(), "checkpoint.dir"));
    }
  }
  if (comm) {
    int64_t ok = mine ? 1 : 0;
    COHORT_TRY_VOID(model->BroadcastHost(*comm, &ok, 1, comm::DataType::kInt64));
    if (ok == 0 && !leader()) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "checkpoint.dir: rank 0 could not take it (its error says why)");
    }
  }
  return mine;
}

Result<void> Trainer::Impl::Resume() {
  if (!config.checkpoint_dir.empty()) return ResumeByRange(model->RestoreRequest());
  // No checkpoints: every rank initialised from the same seed; rank 0's copy is the one
  // that counts.
  if (comm) COHORT_TRY_VOID(model->BroadcastParams(*comm));
  return {};
}

// Every rank reads its own ranges (checkpoint.h LoadCheckpointRanges) into the model.
Result<void> Trainer::Impl::ResumeByRange(const CheckpointReadRequest& request) {
  const auto start = Clock::now();
  std::optional<TrainModelCheckpointGroup> group;
  if (comm) group.emplace(*model, *comm);
  auto loaded = LoadCheckpointRanges(group ? &*group : nullptr, config.checkpoint_dir,
                                     model->config(), request);
  if (!loaded) {
    model->DropRestore();
    const Error& e = loaded.error();
    if (e.code != ErrorCode::kNotFound) {
      // A valid checkpoint of another model (checkpoint.h CompareConfig names the GptConfig
      // field): say which setting of this config differs, and the ways out.
      static const std::map<std::string, std::string> kSetting = {
          {"vocab_size", "tokenizer (its vocabulary size)"},
          {"max_seq_len", "model.seq_len"},
          {"n_layer", "model.n_layer"},
          {"n_head", "model.n_head"},
          {"n_embd", "model.n_embd"}};
      if (const auto it = kSetting.find(e.field); it != kSetting.end()) {
        return Errorf(ErrorCode::kInvalidArgument,
                      "cannot resume: {} holds a checkpoint of another model ({}: {} differs); "
                      "give this run its own checkpoint.dir (or none), or the checkpoint's {}",
                      config.checkpoint_dir, e.message, it->second, it->second);
      }
      return MakeError(ErrorCode::kInvalidArgument, "cannot resume: " + e.message);
    }
    // Nothing to resume: every rank takes rank 0's initial parameters.
    if (comm) COHORT_TRY_VOID(model->BroadcastParams(*comm));
    return {};
  }
  COHORT_TRY_VOID(model->FinishRestore(loaded->adam_t));
  // What the ranks read: the largest share and the sum, against the checkpoint's bytes.
  float read[2] = {static_cast<float>(loaded->bytes_read), static_cast<float>(loaded->bytes_read)};
  if (comm) {
    COHORT_TRY_VOID(model->AllReduceHost(*comm, &read[0], 1, comm::ReduceOp::kMax));
    COHORT_TRY_VOID(model->AllReduceHost(*comm, &read[1], 1, comm::ReduceOp::kSum));
  }
  if (leader()) {
    for (const auto& w : loaded->warnings) Log("checkpoint: {}", w);
    Log("resuming from {} (step {}): each rank read its own ranges, at most {:.3g} MB, {:.3g} MB "
        "over {} rank{} (the checkpoint holds {:.3g} MB), in {:.0f} ms",
        loaded->path, loaded->progress.step, read[0] / 1e6, read[1] / 1e6, world,
        world == 1 ? "" : "s", 12.0 * model->num_params() / 1e6,
        Seconds(Clock::now() - start) * 1000);
    if (const auto it = loaded->metadata.find("record");
        it != loaded->metadata.end() && it->is_array()) {
      for (const auto& l : *it) {
        if (l.is_string()) checkpoint_records.push_back(l.get<std::string>());
      }
    }
  }
  // On every rank: MaybeCheckpoint decides from it whether a stop writes a checkpoint, a
  // collective. Set on rank 0 alone, a SIGTERM in the first step after a resume had rank 0
  // keep the resumed one while the others started writing ("collective mismatch").
  checkpoint_step = loaded->progress.step;
  progress.step = loaded->progress.step;
  progress.next_batch = loaded->progress.next_batch;
  progress.tokens_seen = loaded->progress.tokens_seen;
  if (loaded->progress.rng_state.size() == 4) {
    uint64_t words[4];
    for (int i = 0; i < 4; ++i) words[i] = loaded->progress.rng_state[i];
    if ((words[0] | words[1] | words[2] | words[3]) != 0) COHORT_TRY_VOID(rng.Restore(words));
  }
  return KeepCheckpointBatch(loaded->progress.step, loaded->progress.tokens_seen);
}

// With train.global_batch_tokens 0 the global batch is one micro-batch per rank, so it
// follows the world size. A run resumed on a different world (an elastic job that shrank
// or grew back, or `-n` changed by hand) keeps the checkpoint's batch instead, through more
// or fewer accumulation steps: the schedule, the data order (next_batch counts global
// batches) and the loss curve stay those of the run that wrote the checkpoint. An explicit
// train.global_batch_tokens is the user's choice and is left alone.
Result<void> Trainer::Impl::KeepCheckpointBatch(int64_t step, int64_t tokens_seen) {
  if (config.global_batch_tokens != 0 || step <= 0 || tokens_seen <= 0 || tokens_seen % step != 0) {
    return {};
  }
  const int64_t per_step = tokens_seen / step;
  if (per_step == global_batch * config.seq_len) return {};
  config.global_batch_tokens = per_step;
  config.parallel.microbatches = 0;  // the checkpoint's batch decides the micro-batches
  if (auto r = SetupBatches(); !r) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "cannot resume: the checkpoint at step {} trained on {} tokens per step, and "
                  "train.global_batch_tokens is 0, so this run would keep that batch, but {} "
                  "(set train.global_batch_tokens)",
                  step, per_step, r.error().message);
  }
  Log("batch: keeping the checkpoint's {} tokens per step: {} ranks x {} accumulation steps x {} "
      "sequences x {} tokens (train.global_batch_tokens is 0, and this run's ranks x "
      "train.micro_batch alone would give another batch)",
      per_step, data_world, accum, config.micro_batch, config.seq_len);
  return {};
}

Result<void> Trainer::Impl::Setup() {
  threads = ConfigureThreads(config.threads, ctx.env.local_world_size);
  // The layout (pure) and the GPU first: an impossible layout or a missing GPU fails before
  // any communicator, data or checkpoint is touched, and the nccl communicator binds to the
  // device current on this thread.
  COHORT_TRY_VOID(SetupLayout());
  COHORT_TRY_VOID(SetupDevice());
  COHORT_TRY_VOID(SetupComm());
  COHORT_TRY_VOID(SetupData());
  COHORT_TRY_VOID(SetupModel());
  rng = Rng(config.seed ^ 0x5eedULL);
  if (config.checkpoints_off) {
    Log("checkpoint: none (checkpoint.dir is none): nothing is resumed or written");
  } else if (config.checkpoint_dir.empty()) {
    config.checkpoint_dir = ctx.checkpoint_dir;
  }
  if (config.checkpoint_dir.empty() && !config.checkpoints_off && config.checkpoint_every > 0) {
    Log("checkpoint: none will be written (checkpoint.every is {} but there is no "
        "checkpoint.dir, --checkpoint-dir or COHORT_CHECKPOINT_DIR)",
        config.checkpoint_every);
  }
  COHORT_TRY_VOID(LockCheckpointDir());
  COHORT_TRY_VOID(Resume());
  // ZeRO-2 and 3 reduce-scatter their gradient pieces themselves (into each rank's shard), as
  // a model split over ranks reduces its own.
  const bool reduces_own = model->model_parallel() || model->zero_shape().stage >= 2;
  if (comm && !reduces_own) {
    const size_t bucket = static_cast<size_t>(config.bucket_mb * (1 << 20));
    reducer = std::make_unique<DdpReducer>(*comm, model->grads(), bucket, model->grad_wait(),
                                           model->grad_reduced());
  }
  if (leader()) reporter = std::make_unique<ProgressReporter>(ctx.report_url);
  if (leader() && !config.log_file.empty()) {
    if (!config.checkpoint_dir.empty()) COHORT_TRY_VOID(ReconcileRecord());
    record = std::fopen(config.log_file.c_str(), "a");
    if (!record) {
      return FieldError("log.file", "cannot open {} for appending: {}", config.log_file,
                        std::strerror(errno));
    }
  }
  return {};
}

Result<double> Trainer::Impl::TrainStep() {
  const int B = config.micro_batch, T = config.seq_len;
  auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
    auto starts = COHORT_TRY(
        sampler->WindowStarts(progress.next_batch, data_rank, data_world, accum, a, B));
    return LoadBatch(*train_data, starts, T, in, out);
  };
  const double loss = COHORT_TRY(model->TrainMicrobatches(accum, B, T, load, reducer.get()));
  return AverageOverRanks(loss);
}

Result<double> Trainer::Impl::AverageOverRanks(double value) {
  if (!comm) return value;
  float v = static_cast<float>(value);
  COHORT_TRY_VOID(model->AllReduceHost(*comm, &v, 1, comm::ReduceOp::kAvg));
  return v;
}

Result<double> Trainer::Impl::Evaluate() {
  const int B = config.micro_batch, T = config.seq_len;
  double sum = 0;
  const int64_t batches = std::min<int64_t>(config.eval_batches, val_sampler->batches_per_epoch());
  for (int64_t b = 0; b < batches; ++b) {
    auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
      auto starts = COHORT_TRY(
          val_sampler->WindowStarts(b, data_rank, data_world, val_accum, a, B));
      return LoadBatch(*val_data, starts, T, in, out);
    };
    sum += COHORT_TRY(model->EvalMicrobatches(val_accum, B, T, load));
  }
  return AverageOverRanks(sum / double(batches));
}

Result<void> Trainer::Impl::SaveCheckpointNow() {
  const auto start = Clock::now();
  CheckpointHeader header;
  header.config = model->config();
  header.progress = progress;
  const auto words = rng.state();
  header.progress.rng_state.assign(words.begin(), words.end());
  header.metadata = json{{"world_size", world},
                         {"parallel", {{"data", layout.data},
                                       {"pipeline", layout.pipeline},
                                       {"tensor", layout.tensor},
                                       {"schedule", ScheduleName(layout.schedule)}}},
                         {"accumulation_steps", accum},
                         {"micro_batch", config.micro_batch},
                         {"seq_len", config.seq_len},
                         {"tokenizer", std::string(tokenizer->name())},
                         {"job", ctx.job_id},
                         {"attempt", ctx.attempt}};
  // The record lines this checkpoint covers, written to log.file only once it is durable:
  // a run killed in between gets them back from here when it resumes.
  if (record) header.metadata["record"] = pending_records;
  // Every rank writes the ranges it owns, in parallel (checkpoint.h); a rank whose state
  // cannot be read still takes part, with no ranges, so that the others learn of it.
  auto mine = model->CheckpointRanges(data_rank, data_world, &header.adam_t);
  std::vector<CheckpointRange> none;
  std::optional<TrainModelCheckpointGroup> group;
  if (comm) group.emplace(*model, *comm);
  auto path = SaveCheckpointRanges(group ? &*group : nullptr, config.checkpoint_dir, header,
                                   mine ? *mine : none, config.checkpoint_keep);
  if (!mine && path) path = std::unexpected(mine.error());
  if (!path) {
    // Training goes on: a later checkpoint may succeed, and older ones are intact.
    Log("checkpoint at step {} FAILED (training continues; older checkpoints kept): {}",
        progress.step, (mine ? path.error() : mine.error()).ToString());
    checkpoint_failure = path.error();
    return std::unexpected(path.error());
  }
  checkpoint_failure.reset();
  Log("checkpoint: wrote {} in {:.0f} ms ({} ranks wrote their ranges)", *path,
      Seconds(Clock::now() - start) * 1000, comm ? world : 1);
  checkpoint_step = progress.step;
  FlushRecords();
  // The head hears of it now, not at the next logged step (never, for the last step's):
  // `cohort show` and a preemption's work at risk count from the newest checkpoint, and a
  // job asked for one moves once the head sees it. The reply says whether another is wanted.
  if (reporter) {
    checkpoint_requested =
        reporter->Post({progress.step, std::nan(""), 0, 0, rank, checkpoint_step, config.steps});
  }
  return {};
}

Result<std::string> Trainer::Impl::SampleText() {
  std::vector<int32_t> prompt = tokenizer->Encode(config.sample_prompt);
  if (prompt.empty()) prompt = tokenizer->Encode("\n");
  SampleOptions o;
  o.tokens = config.sample_tokens;
  o.temperature = config.temperature;
  o.top_k = config.top_k;
  TrainModel& m = *model;
  auto next = [&m](std::span<const int32_t> window) { return m.NextTokenLogits(window); };
  auto ids = COHORT_TRY(Generate(next, model->max_window(), prompt, o, rng));
  return config.sample_prompt + tokenizer->Decode(ids);
}

Result<TrainResult> Trainer::Impl::Run() {
  InstallSignalHandlers();
  TrainResult result;
  result.start_step = progress.step;
  // --stop-at-step names a step to stop at, not a number of steps: a run resumed at or past
  // it trains nothing (a step more would move the checkpoints past what was asked).
  const bool past_stop = ctx.stop_at_step > 0 && progress.step >= ctx.stop_at_step;
  if (progress.step >= config.steps) {
    Log("training already complete: the checkpoint is at step {} of {}", progress.step,
        config.steps);
  } else if (past_stop) {
    Log("nothing to train: the checkpoint is at step {}, at or past --stop-at-step {}",
        progress.step, ctx.stop_at_step);
  }
  std::vector<double> rates;
  while (progress.step < config.steps && !past_stop) {
    const StepStats s = COHORT_TRY(Step());
    if (rates.empty()) result.first_loss = s.loss;
    result.final_loss = s.loss;
    rates.push_back(s.tokens_per_s);
    LogStep(s);
    json line = {{"step", progress.step}, {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.norm},
                 {"tokens_per_s", s.tokens_per_s}};
    COHORT_TRY_VOID(MaybeEvaluate(result, line));
    Record(std::move(line));
    const bool stopping = ctx.stop_at_step > 0 && progress.step >= ctx.stop_at_step;
    if (MaybeCheckpoint(stopping)) {
      result.terminated = true;
      if (config.checkpoint_dir.empty()) {
        Log("stopping at step {} of {}: SIGTERM (no checkpoint.dir: nothing kept)", progress.step, config.steps);
      } else if (checkpoint_step == progress.step) {
        Log("stopping at step {} of {}: SIGTERM, after its checkpoint", progress.step, config.steps);
      } else {
        Log("stopping at step {} of {}: SIGTERM; a rerun resumes from the checkpoint of step {}", progress.step,
            config.steps, checkpoint_step);
      }
      break;
    }
    COHORT_TRY_VOID(MaybeSample());
    if (stopping) {
      Log("stopping at step {} of {} (--stop-at-step)", progress.step, config.steps);
      break;
    }
  }
  if (!result.terminated) RestoreStopSignal();
  auto finished = Finish(std::move(result), std::move(rates));
  if (finished && checkpoint_failure) {
    // The last step is in no checkpoint: a job that reported success would leave nothing
    // to resume or serve from, so the run fails (a job with restarts resumes and retries).
    Error e = *checkpoint_failure;
    e.message = fmt::format("trained to step {} but could not checkpoint it, so a rerun resumes "
                            "from an older checkpoint: {}",
                            progress.step, e.message);
    return std::unexpected(e);
  }
  return finished;
}

Result<StepStats> Trainer::Impl::Step() {
  const int64_t tokens_per_step = global_batch * config.seq_len;
  StepStats s;
  s.lr = LearningRate(schedule, progress.step);
  const auto start = Clock::now();
  s.loss = COHORT_TRY(TrainStep());
  s.norm = COHORT_TRY(model->ClipAndStep(config.grad_clip, static_cast<float>(s.lr)));
  s.seconds = Seconds(Clock::now() - start);
  ++progress.step;
  ++progress.next_batch;
  progress.tokens_seen += tokens_per_step;
  if (!std::isfinite(s.loss)) {
    return Errorf(ErrorCode::kInternal, "loss is {} at step {}; stopping (lower train.lr?)",
                  s.loss, progress.step);
  }
  s.tokens_per_s = tokens_per_step / s.seconds;
  return s;
}

void Trainer::Impl::LogStep(const StepStats& s) {
  if (progress.step % config.log_every != 0 && progress.step != config.steps) return;
  // MFU against the device's peak (unknown for a GPU that is not in the table).
  const std::string mfu =
      peak.flops > 0
          ? fmt::format("{:.1f}%", flops_per_token * s.tokens_per_s / (peak.flops * world) * 100)
          : std::string("n/a");
  std::string note;
  if (const auto ps = model->parallel_stats(); ps && ps->pipeline > 1) {
    note = fmt::format("bubble {:.1f}% ({} theory {:.1f}%)", ps->bubble * 100, ps->schedule,
                       ps->theory * 100);
  }
  Log("step {:5d}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:6.0f} ms | {:.0f} tok/s | "
      "MFU {}{}",
      progress.step, config.steps, s.loss, s.lr, s.norm, s.seconds * 1000, s.tokens_per_s, mfu,
      note.empty() ? "" : " | " + note);
  if (reporter) {
    checkpoint_requested |= reporter->Post({progress.step, s.loss, s.tokens_per_s,
                                            s.tokens_per_s / config.seq_len, rank,
                                            checkpoint_step, config.steps});
  }
}

Result<void> Trainer::Impl::MaybeEvaluate(TrainResult& result, json& line) {
  if (config.eval_every <= 0 ||
      (progress.step % config.eval_every != 0 && progress.step != config.steps)) {
    return {};
  }
  result.final_val_loss = COHORT_TRY(Evaluate());
  Log("step {:5d}/{} | val loss {:.4f}", progress.step, config.steps, result.final_val_loss);
  line["val_loss"] = result.final_val_loss;
  if (reporter) {  // the head keeps it beside the loss curve (a report without a loss)
    checkpoint_requested |= reporter->Post({progress.step, std::nan(""), 0, 0, rank, checkpoint_step, config.steps,
                                            result.final_val_loss});
  }
  return {};
}

bool Trainer::Impl::MaybeCheckpoint(bool stopping) {
  // A checkpoint asked for from outside: the head's reply, or the job's checkpoint
  // signal (SIGUSR1; every rank takes the signal, rank 0 writes the checkpoint).
  const bool signalled = CheckpointSignalled();
  bool requested = leader() && (checkpoint_requested || signalled);
  // SIGTERM on any rank stops them all: a rank stopped on its own would leave the others
  // waiting in the next step's collectives.
  bool terminate = g_stop_signal != 0;
  if (comm) {
    // Writing is a collective: every rank learns of rank 0's request, and of any stop.
    float flags[2] = {requested ? 1.0f : 0.0f, terminate ? 1.0f : 0.0f};
    if (auto r = model->AllReduceHost(*comm, flags, 2, comm::ReduceOp::kMax); r) {
      requested = flags[0] != 0;
      terminate = flags[1] != 0;
    } else {
      Log("checkpoint request could not reach every rank: {}", r.error().ToString());
    }
  }
  if (requested) {
    if (leader()) Log("checkpoint requested ({}): writing one at step {}",
        signalled ? "SIGUSR1" : "by the head", progress.step);
  }
  // A stop just after a checkpoint keeps that one (one step is less than a checkpoint's
  // write): that is a planned move's stop, which the head sends once it sees the checkpoint
  // it waited for, and the next attempt resumes from exactly that step.
  const bool save_for_stop = terminate && checkpoint_step < progress.step - 1;
  if (!config.checkpoint_dir.empty() &&
      ((config.checkpoint_every > 0 && progress.step % config.checkpoint_every == 0) ||
       progress.step == config.steps || stopping || requested || save_for_stop)) {
    (void)SaveCheckpointNow();  // (tells the head at once: it moves the job when it sees it)
  } else if (requested) {
    Log("no checkpoint.dir: cannot checkpoint on request");
    checkpoint_requested = false;
  }
  return terminate;
}

Result<void> Trainer::Impl::MaybeSample() {
  if ((leader() || collective_io()) && config.sample_every > 0 && config.sample_tokens > 0 &&
      progress.step % config.sample_every == 0 && progress.step != config.steps) {
    Log("---- sample at step {} ----\n{}\n----", progress.step, COHORT_TRY(SampleText()));
  }
  return {};
}

Result<TrainResult> Trainer::Impl::Finish(TrainResult result, std::vector<double> rates) {
  result.final_step = progress.step;
  FlushRecords();
  if (!rates.empty()) {
    std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
    result.tokens_per_s = rates[rates.size() / 2];
  }
  {
    // Peak resident memory of the ranks (the largest), beside this rank's model states.
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    float peak_mb = static_cast<float>(usage.ru_maxrss) * 1024.0f / 1e6f;
    if (comm) COHORT_TRY_VOID(model->AllReduceHost(*comm, &peak_mb, 1, comm::ReduceOp::kMax));
    const TrainModel::ModelStateBytes b = model->model_state_bytes();
    Log("peak memory per rank: RSS {:.1f} MB (the largest of {} rank{}; model states {:.3g} MB)",
        peak_mb, world, world == 1 ? "" : "s", (b.params + b.grads + b.optimizer) / 1e6);
  }
  // A run stopped by SIGTERM leaves at once: its checkpoint is written; the export and the
  // sample are of the end of training, which it did not reach.
  if (result.terminated) {
    if (comm) COHORT_TRY_VOID(comm->Barrier());
    return result;
  }
  if ((leader() || collective_io()) && !ctx.export_path.empty()) {
    COHORT_TRY_VOID(model->Export(ctx.export_path));
    Log("exported the model to {} (GPT-2 safetensors)", ctx.export_path);
  }
  if ((leader() || collective_io()) && config.sample_tokens > 0) {
    result.sample = COHORT_TRY(SampleText());
    Log("---- sample after {} steps (temperature {}, top-k {}) ----\n{}\n----", progress.step,
        config.temperature, config.top_k, result.sample);
  }
  // Nobody leaves before rank 0 has written its last checkpoint and sample.
  if (comm) COHORT_TRY_VOID(comm->Barrier());
  return result;
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config,
                                                 const TrainerContext& context) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->ctx = context;
  COHORT_TRY_VOID(impl->Setup());
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Result<TrainResult> Trainer::Run() { return impl_->Run(); }

Result<void> CheckTrainLayout(const TrainConfig& config, int world) {
  const auto tokenizer = COHORT_TRY(MakeTokenizer(config));
  const GptConfig mc = COHORT_TRY(ModelShape(config, *tokenizer));
  const ParallelLayout layout = COHORT_TRY(LayoutFor(config, mc, world));
  COHORT_TRY_VOID(BatchFor(config, layout.data));
  return {};
}

}  // namespace cohort::engine
