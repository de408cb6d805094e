// InferenceModel: a GPT model as the server runs it — one batched step over many
// sequences, each bringing some new tokens (a prefill chunk, or the one token a decoding
// sequence just sampled), with keys and values kept in the block cache (kv_cache.h).
//
// Backends: CpuInferenceModel (float32, the engine's CPU kernels; the reference) and
// CudaInferenceModel (bf16 weights and cache, the engine's CUDA kernels; cuda_model.h).
// Both own their cache of plan.num_blocks blocks, allocated once at creation.
//
// Threads: one thread (the batcher's) calls Step at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "engine/model/gpt.h"
#include "serve/kv_cache.h"

namespace cohort::serve {

// One sequence's share of a step.
struct StepSequence {
  std::span<const int32_t> tokens;  // new tokens, at positions start .. start+n-1
  int start = 0;
  std::span<const int> blocks;      // the sequence's block table (covers start + n)
  bool want_logits = false;         // return the logits after its last new token
  // Return the logits after each of its new tokens, in order (an echoed prompt's
  // log-probabilities, batcher.h); want_logits is then implied.
  bool all_logits = false;
};

class InferenceModel {
 public:
  virtual ~InferenceModel() = default;
  virtual const engine::GptConfig& config() const = 0;
  virtual std::string_view device() const = 0;  // "cpu" or "cuda"
  virtual const KvCachePlan& cache() const = 0;
  // The most new tokens one Step takes (all sequences together); the backend's choice when
  // created with kAutoStepTokens.
  virtual int max_step_tokens() const = 0;

  // Runs the step: stores each sequence's keys and values in its blocks and, for the
  // sequences that want them, writes vocab_size logits per wanted row into `logits`, in
  // order (one row per want_logits sequence, one per new token of an all_logits one).
  // kInvalidArgument naming the field for a token out of range, a position past
  // max_seq_len, a block table too short or a step larger than max_step_tokens.
  virtual Result<void> Step(std::span<const StepSequence> seqs, std::vector<float>& logits) = 0;
};

// max_step_tokens 0: the backend chooses (`--max-step-tokens` auto). The CPU takes
// kCpuAutoStepTokens (a CPU step's time grows with its tokens from the first: a larger step
// only delays the streams decoding in it); a GPU far more (cuda_model.h), since a step of a
// few thousand tokens costs little more than one of a hundred.
inline constexpr int kAutoStepTokens = 0;
inline constexpr int kCpuAutoStepTokens = 512;

// Checks a step's shape against a config and cache (shared by the backends).
Result<int> ValidateStep(const engine::GptConfig& config, const KvCachePlan& cache,
                         int max_step_tokens, std::span<const StepSequence> seqs);

// The CPU backend over `params` (the GptModel layout, num_parameters() floats).
// kInvalidArgument naming --max-step-tokens when it is negative.
Result<std::unique_ptr<InferenceModel>> CreateCpuInferenceModel(const engine::GptConfig& config,
                                                                std::vector<float> params,
                                                                const KvCachePlan& cache,
                                                                int max_step_tokens);

}  // namespace cohort::serve
