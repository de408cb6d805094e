// Trainer: the training loop of `cohort train` — one rank of a data × pipeline × tensor
// parallel job.
//
// Without tensor or pipeline parallelism (parallel.tensor = parallel.pipeline = 1) every
// rank holds the whole model and optimizer state, in host memory (train.device cpu) or on
// its GPU (cuda: GPU LOCAL_RANK, reduced over nccl; train_model.h). With them (on either
// device; on cuda the host values go over a second, gloo, communicator), each rank holds its
// shard (engine/parallel/layout.h) and the model runs whole steps
// through the pipeline; the data-parallel replicas below are then the world size divided by
// tensor × pipeline, and checkpoints, export and sampling are collectives of every rank. A
// step trains on
// one global batch of G = global_batch_tokens / seq_len sequences: each of the `world`
// ranks runs `accum` micro-batches of micro_batch sequences (DistributedSampler decides
// which), the last micro-batch's backward pass all-reduces the gradient in buckets as they
// complete (DdpReducer), then every rank clips and applies the same AdamW update. The
// sequence of global batches does not depend on the world size, so 1, 2 or 4 ranks train
// the same model (up to float summation order).
//
// Rank 0 owns the outside world: it loads the newest valid checkpoint (and broadcasts it),
// writes checkpoints, prints the log, posts progress to COHORT_REPORT and prints samples.
// A resumed run continues exactly where the checkpoint left off: same data position,
// optimizer state and sampling generator (bitwise on the CPU with the same threads).
//
// Errors: train.device cuda in a build without CUDA or on a machine without a usable GPU
// fails in Create, before any checkpoint or log file is read or written.
//
// Threads: Create and Run on one thread; kernels use OpenMP; DdpReducer adds one thread.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "comm/launch_env.h"
#include "common/error.h"
#include "engine/trainer/config.h"

namespace cohort::engine {

// Where a rank stands in its job and where it talks to the outside.
struct TrainerContext {
  comm::LaunchEnv env;         // rank, world size, rendezvous store
  std::string job_id;          // COHORT_JOB_ID, for store keys ("local" outside Cohort)
  int attempt = 0;             // COHORT_ATTEMPT
  std::string report_url;      // COHORT_REPORT ("" : none)
  std::string checkpoint_dir;  // COHORT_CHECKPOINT_DIR, used when the config names none
  std::string export_path;     // write the final model as GPT-2 safetensors here ("" : no)
  int64_t stop_at_step = 0;    // > 0: stop once this step is done (checkpointed when
                               // checkpoints are on), without changing the schedule
  std::FILE* out = stdout;     // the log (rank 0 only)
};

struct TrainResult {
  int64_t start_step = 0;   // where this run started (> 0 when it resumed)
  int64_t final_step = 0;
  double first_loss = 0;    // of this run's first step
  double final_loss = 0;    // of the last step
  double final_val_loss = -1;  // -1: no validation
  double tokens_per_s = 0;     // median over this run's steps
  std::string sample;          // the final generated text (rank 0; empty if disabled)
  // SIGTERM (a cancel, a time limit, `cohort run` stopping its ranks) stopped the run at the
  // end of a step, after a checkpoint of it when there is a checkpoint.dir.
  bool terminated = false;
};

class Trainer {
 public:
  static Result<std::unique_ptr<Trainer>> Create(const TrainConfig& config,
                                                 const TrainerContext& context);
  ~Trainer();
  // Trains to config.steps (or returns at once when a checkpoint is already there).
  Result<TrainResult> Run();

 private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The checks of `config` that need only the world size: the tokenizer and the model's
// shape (init_from's header), the data x pipeline x tensor layout of `world` ranks and the
// micro-batches per step; Create makes the same ones. `cohort train -n N` runs them before
// it starts N ranks, so that an impossible layout or batch is said once, not by every rank.
// kInvalidArgument naming the field (e.g. "parallel.tensor: 3 does not divide n_head 4").
Result<void> CheckTrainLayout(const TrainConfig& config, int world);

}  // namespace cohort::engine
