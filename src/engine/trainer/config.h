// TrainConfig: everything `cohort train` needs, read from a YAML or JSON file.
//
// Sections (every field optional unless marked; unknown keys are rejected with a
// "did you mean" hint, and each error names the field, e.g. "train.micro_batch: must be
// an integer between 1 and 65536, got 0"):
//   model:      n_layer, n_head, n_embd, seq_len (context length), init_from (a GPT-2
//               safetensors file in Hugging Face naming; its shape wins: n_layer, n_head and
//               n_embd must then agree with it or be absent (0 in TrainConfig: the file's;
//               n_head from its __metadata__ or the config.json beside it, else required),
//               and seq_len may be up to its positions)
//   tokenizer:  type (byte | gpt2), vocab, merges (Hugging Face vocab.json/merges.txt,
//               required for gpt2)
//   data:       text (a text file, a directory of text files, or a glob; tokenized at
//               start; val_fraction of the tokens at the end go to validation) or
//               train/val (token shards: llm.c .bin or raw uint16; a path or glob);
//               shuffle
//   train:      steps (required), micro_batch, global_batch_tokens, lr, min_lr,
//               warmup_steps, weight_decay, beta1, beta2, eps, grad_clip, seed,
//               bucket_mb (data-parallel bucket size), threads (0: usable CPUs / local ranks),
//               device (cpu: the float32 reference; cuda: bf16 mixed precision on GPU
//               LOCAL_RANK, data parallel over nccl)
//   eval:       every (steps; 0 = never), batches (global batches of validation data)
//   checkpoint: dir (default $COHORT_CHECKPOINT_DIR; none: no checkpoints: nothing is
//               written or resumed, whatever COHORT_CHECKPOINT_DIR says; one run at a
//               time: rank 0 holds dir/LOCK, checkpoint/dir_lock.h), every, keep (the
//               newest step directories kept, default 3; 0 keeps all, as Megatron does)
//   sample:     every (0 = only at the end), prompt, tokens, temperature, top_k
//   log:        every (steps between printed lines), file (JSON lines, one per step
//               whatever log.every says, appended by rank 0: step, loss, lr, grad norm,
//               tokens/s, attempt; val_loss on evaluated steps; with checkpoints, a step is
//               appended once a checkpoint covers it, and lines past the resumed step move
//               to <file>.dropped)
//   parallel:   tensor, pipeline (ranks per tensor group and pipeline; data parallelism
//               takes what remains of the world size), schedule (gpipe | 1f1b |
//               interleaved), virtual_stages (chunks per stage, interleaved), microbatches
//               (per replica and step; 0: what the batch gives), pipeline_layers (blocks
//               per chunk; default: balanced). See engine/parallel/layout.h.
//               zero (0 | 1 | 2 | 3: ZeRO stage in the data-parallel group, engine/parallel/
//               zero.h; on train.device cuda 0 to 2, trainer/cuda_zero.h), offload (none |
//               optimizer: train.device cuda only, AdamW's state and step on the host;
//               optimizer+params is refused until built), prefetch (true | false, default
//               true: ZeRO-3 gathers the next piece of parameters on a communication
//               thread while the current one computes, parallel/zero_params.h),
//               overlap_grad_reduce (true: with tensor/pipeline and data > 1, each
//               data-parallel gradient bucket is averaged during the last micro-batch's
//               backward; false: after the step).
//   comm:       backend (for train.device cpu: auto, the default, picks shm when every
//               rank is on one host and gloo otherwise; shm and gloo force one; nccl for
//               cuda, its default; a backend that cannot reach the gradients is an
//               error), timeout_s
// Relative paths are resolved against the config file's directory. Plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "engine/parallel/layout.h"

namespace cohort::engine {

struct TrainConfig {
  // model
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int seq_len = 128;
  std::string init_from;
  // tokenizer
  std::string tokenizer = "byte";
  std::string bpe_vocab, bpe_merges;
  // data
  std::string data_text;
  std::string data_train, data_val;
  double val_fraction = 0.1;
  bool shuffle = true;
  // train
  int64_t steps = 0;
  int micro_batch = 8;
  int64_t global_batch_tokens = 0;  // 0: world × micro_batch × seq_len (no accumulation)
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 0;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;
  uint64_t seed = 1337;
  double bucket_mb = 4;
  int threads = 0;
  std::string device = "cpu";  // "cpu" or "cuda"
  // eval
  int64_t eval_every = 0;
  int eval_batches = 4;
  // checkpoint
  std::string checkpoint_dir;      // empty: COHORT_CHECKPOINT_DIR, unless checkpoints_off
  bool checkpoints_off = false;    // checkpoint.dir: none
  int64_t checkpoint_every = 0;
  int checkpoint_keep = 3;
  // sample
  int64_t sample_every = 0;
  std::string sample_prompt = "\n";
  int sample_tokens = 0;
  double temperature = 0.8;
  int top_k = 40;
  // log
  int64_t log_every = 1;
  std::string log_file;
  // parallel
  ParallelConfig parallel;
  // comm (TrainConfigFromJson sets "nccl" when device is cuda and no backend is given)
  std::string backend = "auto";
  double comm_timeout_s = 300;
};

// Decodes a config document; `base_dir` resolves relative paths.
Result<TrainConfig> TrainConfigFromJson(const json& doc, const std::string& base_dir);

// Reads `path` (YAML or JSON) and decodes it; errors start with the path. `overrides` are
// "section.key=value" settings (`cohort train --set`) applied to the document before
// decoding: the value is read as JSON when it parses (numbers, true/false, [lists]) and as
// a string otherwise. kInvalidArgument naming the setting when it has no '=' or no
// section.
Result<TrainConfig> LoadTrainConfig(const std::string& path,
                                    const std::vector<std::string>& overrides = {});

// kInvalidArgument (field comm.backend) for an unknown backend, or one that cannot move
// the device's gradients: cuda needs nccl, and nccl needs cuda.
Result<void> CheckDeviceBackend(const TrainConfig& c);

// Sets checkpoint.dir from the config or --checkpoint-dir: the word "none" turns checkpoints
// off (checkpoints_off, empty dir); anything else is a directory, resolved against base_dir.
void SetCheckpointDir(TrainConfig& c, const std::string& dir, const std::string& base_dir);

// Accumulation steps per rank for `world` ranks: global_batch_tokens / (world ×
// micro_batch × seq_len). kInvalidArgument (field train.global_batch_tokens) when that is
// not a whole positive number, spelling out the product.
Result<int> AccumulationSteps(const TrainConfig& c, int world);

}  // namespace cohort::engine
