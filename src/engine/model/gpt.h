// GptModel: a GPT-2-style decoder-only transformer on the CPU (float32), the reference
// implementation every other backend is checked against.
//
// Architecture (GPT-2): token embedding wte (Vp × C) + position embedding wpe (T × C);
// n_layer pre-LayerNorm blocks, each x += attn(ln1(x)); x += mlp(ln2(x)) with causal
// multi-head attention (n_head heads) and a 4C GELU (tanh approximation) MLP; a final
// LayerNorm; logits = ln_f(x) · wteᵀ (the output head is tied to wte). Loss: mean
// cross-entropy over the positions whose target is >= 0.
//
// Parameters live in one flat float buffer (params()), gradients in a second buffer of
// the same layout (grads()); tensors() names every slice. Layout, in order:
//   wte (Vp, C), wpe (T, C),
//   for each layer l = 0..L-1, contiguous: ln1.w (C), ln1.b (C), qkv.w (3C, C),
//     qkv.b (3C), attn_proj.w (C, C), attn_proj.b (C), ln2.w (C), ln2.b (C),
//     fc.w (4C, C), fc.b (4C), fc_proj.w (C, 4C), fc_proj.b (C),
//   ln_f.w (C), ln_f.b (C).
// Weights are (out, in), row-major: y = x · Wᵀ + b (llm.c's convention; Hugging Face's
// Conv1D stores the transpose). Vp is vocab_size rounded up to a multiple of 128; the
// padded rows of wte are zero and their logits are ignored by the loss.
//
// Backward accumulates into grads() (call ZeroGrad() before the first micro-batch of a
// step), so gradient accumulation is a loop of Forward/Backward. It calls `ready`
// for each parameter slice as soon as that slice's gradient is final for this
// micro-batch, in this order: ln_f, layer L-1 (the whole contiguous block), ...,
// layer 0, wpe, wte. Data parallelism starts reducing a bucket from that callback.
//
// Sharded gradients (ZeRO-2, parallel/zero_grads.h). BackwardToSink writes no whole
// gradient buffer: it asks a GradSink for a buffer per piece of the layout, in the order the
// pieces become final (ln_f, layer L-1, ..., layer 0, wpe, then wte in row chunks from the
// last), zeroes it, writes the piece's gradient of this micro-batch into it and hands it
// back. No piece is larger than MaxGradPiece(config) floats (wte is cut into chunks of rows
// that fit), so a sink needs bucket-sized scratch only. ReleaseGradients frees grads() for a
// model trained that way.
//
// Threads: one thread calls a GptModel at a time; kernels use OpenMP internally. The
// `ready` callback runs on the calling thread and must not touch the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cohort::engine {

struct GptConfig {
  int vocab_size = 50257;   // V: tokens the tokenizer produces
  int max_seq_len = 1024;   // T_max: rows of wpe
  int n_layer = 12;         // L
  int n_head = 12;          // NH
  int n_embd = 768;         // C; must be divisible by n_head

  // Vp: vocab_size rounded up to a multiple of 128.
  int padded_vocab_size() const;
  // kInvalidArgument naming the field when a value is out of range (every field >= 1,
  // n_embd % n_head == 0, sizes small enough that the parameter count fits in int64).
  Result<void> Validate() const;
  // Number of floats in params() for this configuration.
  size_t num_parameters() const;
};

// One named slice of the flat parameter (and gradient) buffer.
struct ParamTensor {
  std::string name;           // "wte", "wpe", "h.3.qkv.w", "ln_f.b", ...
  std::vector<int64_t> shape;  // {3C, C} for "h.3.qkv.w"
  size_t offset = 0;          // in floats, into params() / grads()
  size_t numel = 0;
  bool weight_decay = false;  // true for matrices and embeddings (2-D), false for biases and LayerNorm
};

// Called with a slice [offset, offset + count) of grads() whose gradient is final.
using GradReadyFn = std::function<void(size_t offset, size_t count)>;

// Where BackwardToSink writes gradients. Acquire returns a buffer of at least `count`
// floats for grads [offset, offset + count) (it may block until one is free); Done hands the
// written piece back. Pieces arrive in descending offset order, each exactly once per
// Backward, and at most one piece is held at a time.
class GradSink {
 public:
  virtual ~GradSink() = default;
  virtual float* Acquire(size_t offset, size_t count) = 0;
  virtual void Done(size_t offset, size_t count) = 0;
};

// Where Forward and the backward passes read the parameters when the model does not hold
// them (ZeRO-3: each rank holds a shard). Gather returns a buffer holding parameters
// [offset, offset + count), valid until the matching Release; the model holds one piece at
// a time, in this order: Forward wte, wpe, each layer's block 0..L-1, ln_f, wte (the head);
// the backward passes wte (the head), ln_f, blocks L-1..0 (their gradients need no
// embedding parameters). The order is the same on every call with
// the same config, so a source can gather collectively and prefetch the next piece.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual const float* Gather(size_t offset, size_t count) = 0;
  virtual void Release(size_t offset, size_t count) = 0;
};

class GptModel {
 public:
  // kInvalidArgument if config.Validate() fails. Parameters start zeroed; call InitRandom
  // or copy weights into params().
  static Result<GptModel> Create(const GptConfig& config);
  // As Create with params() and grads() never allocated (both empty): a model whose
  // parameters come from a ParamSource and whose gradients go to a GradSink (ZeRO-3), so the
  // rank never holds the whole model, not even for a moment.
  static Result<GptModel> CreateUnallocated(const GptConfig& config);

  GptModel(GptModel&&) noexcept;
  GptModel& operator=(GptModel&&) noexcept;
  ~GptModel();

  const GptConfig& config() const;
  const std::vector<ParamTensor>& tensors() const;
  // Returns the tensor called `name`, or nullptr.
  const ParamTensor* FindTensor(std::string_view name) const;
  std::span<float> params();
  std::span<const float> params() const;
  std::span<float> grads();

  // GPT-2 initialisation from `seed` (deterministic): weights N(0, 0.02), the two residual
  // projections (attn_proj.w, fc_proj.w) N(0, 0.02/sqrt(2L)), LayerNorm weights 1,
  // biases 0, padded wte rows 0.
  void InitRandom(uint64_t seed);

  // Runs the model on `tokens` (B*T ids in [0, vocab_size), row-major B × T, T <=
  // max_seq_len). With `targets` (B*T ids, or -1 to ignore a position) returns the mean
  // cross-entropy loss; with empty targets returns 0 and only computes logits.
  // kInvalidArgument on a bad shape or an id out of range (nothing is changed then).
  Result<float> Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        int B, int T);

  // Logits of the last Forward, B × T × Vp (padded entries beyond vocab_size included).
  // Valid until the next Forward or Backward: Backward reuses the buffer for d(loss)/d(logits).
  std::span<const float> logits() const;

  void ZeroGrad();

  // Backpropagates the loss of the last Forward (which must have had targets) and adds
  // loss_scale × d(loss)/d(params) into grads(). loss_scale = 1/accumulation_steps makes
  // the accumulated gradient the gradient of the mean loss. `ready` may be empty.
  // kFailedPrecondition if no Forward with targets preceded it (each Forward can be
  // back-propagated once).
  Result<void> Backward(float loss_scale, const GradReadyFn& ready = {});
  // As Backward, but this micro-batch's gradient (× loss_scale) goes piece by piece to
  // `sink` (see above) instead of into grads(), which it neither reads nor needs.
  Result<void> BackwardToSink(float loss_scale, GradSink& sink);
  // The largest piece BackwardToSink hands a sink, in floats: the largest of a layer's
  // block, wpe and ln_f (wte's chunks are cut to fit).
  static size_t MaxGradPiece(const GptConfig& config);
  // Reads parameters from `source` (null: params(), the default) in Forward and the backward
  // passes; `source` must outlive its use. ReleaseParams frees params() (it becomes empty)
  // for a model whose parameters come from a source.
  void SetParamSource(ParamSource* source);
  // The sizes of the pieces a ParamSource is asked for, in floats: wte, wpe, a layer's block,
  // ln_f; and the largest of them.
  static std::vector<size_t> ParamPieceSizes(const GptConfig& config);
  static size_t MaxParamPiece(const GptConfig& config);
  void ReleaseParams();
  // Frees grads() (it becomes empty; Backward then fails with kFailedPrecondition) for a
  // model whose gradients go to a GradSink.
  void ReleaseGradients();

 private:
  struct Impl;
  explicit GptModel(std::unique_ptr<Impl> impl);
  Result<void> BackwardPass(float loss_scale, const GradReadyFn& ready, GradSink* sink);
  std::unique_ptr<Impl> impl_;
};

// Checks a batch for Forward, the same on every backend: B >= 1, 1 <= T <= max_seq_len,
// B*T within an int's quarter, tokens.size() == B*T, targets empty or B*T, ids in
// [0, vocab_size) and targets in [-1, vocab_size). Returns the number of targets >= 0;
// kInvalidArgument naming the field otherwise.
Result<int> ValidateBatch(const GptConfig& config, std::span<const int32_t> tokens,
                          std::span<const int32_t> targets, int B, int T);

// GptModel::InitRandom one tensor at a time, without a model: calls sink(tensor, values)
// for every tensor of the layout in order, `values` holding its numel() initial values
// (valid during the call). Needs memory for the largest tensor only, so a rank holding a
// shard of a large model initialises its slices without the whole model.
void GenerateInitialParams(
    const GptConfig& config, uint64_t seed,
    const std::function<void(const ParamTensor&, std::span<const float>)>& sink);

// A run of the logical parameter buffer (GptModel's layout) to fill: `count` values from
// `offset` into `out`.
struct ParamRun {
  size_t offset = 0, count = 0;
  float* out = nullptr;
};
// GptModel::InitRandom restricted to `runs` (any order; they may overlap): each run receives
// exactly the values InitRandom writes there, without the rest of the model. The generator
// seeks past what no run needs (NormalRng::Skip: time linear in the parameter count, memory
// constant), so a rank holding a ZeRO-3 shard initialises it alone. Returns the number of
// values written (the sum of the counts; a counter for tests of what a rank initialised).
size_t GenerateInitialRuns(const GptConfig& config, uint64_t seed, std::span<const ParamRun> runs);

// Model FLOPs per token for a training step (forward + backward), as in PaLM's MFU:
// 6 × (non-embedding parameters + the tied output head) + 12 × L × C × T (attention).
double TrainingFlopsPerToken(const GptConfig& config, int seq_len);

}  // namespace cohort::engine
