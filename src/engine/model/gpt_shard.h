// GptShardModel: one rank's part of a GPT-2 model under tensor and pipeline parallelism, on
// the CPU (float32, the kernels of kernels/cpu): the chunks of its pipeline stage, each
// block split across the tensor group as gpt_shard_layout.h describes. It is GptModel
// (gpt.h) cut into pieces: with one chunk holding everything and a tensor group of one it
// computes the same function (up to float summation order).
//
// A pipeline drives it one (chunk, micro-batch) at a time: Forward stashes the chunk's
// activations under the micro-batch's slot until the matching Backward consumes them, so
// any number of micro-batches may be in flight (GPipe holds m of them, 1F1B at most p).
// The first chunk reads token ids; the others read the activation (B·T·C floats) the
// previous chunk produced, and all but the last write theirs. The last chunk computes the
// vocabulary-parallel cross-entropy and its Backward starts from the loss; the others
// start from the gradient of their output and write the gradient of their input.
//
// Tensor parallelism goes through TensorParallelGroup (parallel/tensor_parallel.h): one
// all-reduce per block half in forward and one in backward, one after the embedding, and
// the cross-entropy's row statistics. LayerNorms and the row-parallel biases are
// replicated: every tensor rank computes the same gradient for them from the same
// (all-reduced) inputs.
//
// Gradients accumulate over Backward calls until ZeroGrad (gradient accumulation is the
// micro-batch loop). Backward reports each piece of the buffer whose gradient this pass has
// finished (`ready`, as GptModel's): the head's ln_f and its copy of wte, the blocks from the
// last, wpe and wte; ZeRO-2 and 3 reduce-scatter a chunk's pieces from there during its last
// micro-batch's backward.
//
// ZeRO-3 (SetParamSource, gpt.h ParamSource): the model holds no parameters and asks the
// source for each piece just before it computes with it, one piece at a time: a chunk's
// Forward wte's slice and wpe (the embedding chunk), each block, ln_f and the head's wte
// slice (the head chunk); its Backward the head's wte slice, ln_f and the blocks from the
// last (the embeddings' gradients need no parameters). ShardParamPieces lists them.
//
// Threads: one thread at a time; kernels use OpenMP inside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/error.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/tensor_parallel.h"

namespace cohort::engine {

// What a chunk reads of a micro-batch: the embedding chunk the tokens, the head chunk the
// targets (empty: no loss, logits only).
struct MicrobatchTokens {
  std::span<const int32_t> tokens;
  std::span<const int32_t> targets;
  int B = 0, T = 0;
};

// The checks of Create (shared with the CUDA shard, gpt_shard_cuda.h): a valid config, a
// tensor group that matches spec and splits n_head and the padded vocabulary, chunks inside
// [0, n_layer). kInvalidArgument naming the numbers.
Result<void> ValidateShardSpec(const ShardSpec& spec, const TensorParallelGroup& tp);
// The checks of Forward of `chunk` on a micro-batch into `slot` (`slot_taken`: the chunk
// already stashes that slot): a chunk of the layout, a free slot, the shape (B, T >= 1,
// T <= max_seq_len), B·T token ids in [0, vocab_size) for the embedding chunk, B·T targets
// in [-1, vocab_size) (or none) for the head chunk. kInvalidArgument naming the first bad
// value.
Result<void> ValidateShardForward(const GptShardLayout& layout, int chunk, int slot,
                                  bool slot_taken, const MicrobatchTokens& batch);
// The checks of Backward of (chunk, slot) (`stashed`: its forward's stash is held;
// `loss_ready`: that forward had targets) and of Logits at `position` (`T`: the stashed
// micro-batch's length). kFailedPrecondition without the forward (or, for the head chunk,
// its targets; for Logits a chunk that is not the head), kInvalidArgument for a position
// outside [0, T).
Result<void> ValidateShardBackward(const GptShardLayout& layout, int chunk, int slot,
                                   bool stashed, bool loss_ready);
Result<void> ValidateShardLogits(const GptShardLayout& layout, int chunk, int slot, bool stashed,
                                 int position, int T);
// The vocabulary-parallel cross-entropy from the tensor group's combined row statistics
// (max, Σ e^{x − max}, the target's logit; N each): lse[n] = max + log(sum), and the mean of
// lse − target logit over the rows whose target is >= 0 (0 when none; *count gets their
// number). Summed in double.
float ShardCrossEntropyLoss(const float* max, const float* sum_exp, const float* target_logit,
                            const int32_t* targets, int N, float* lse, int* count);

// A piece of the shard buffer: [begin, end).
struct ShardPiece {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};
// The pieces a ParamSource is asked for (see above) for `chunk`: wte's slice and wpe (empty
// unless the embedding chunk), ln_f and the head's wte slice (empty unless the head chunk;
// the wte piece when the chunk is both).
struct ShardChunkPieces {
  ShardPiece wte, wpe, ln_f, head_wte;
};
ShardChunkPieces ShardParamPieces(const GptShardLayout& layout, int chunk);
// The sizes of every piece a source is asked for (floats), and the largest piece a source or
// a `ready` callback is given.
std::vector<size_t> ShardParamPieceSizes(const GptShardLayout& layout);
size_t MaxShardPiece(const GptShardLayout& layout);
// The largest gradient piece a GradSink is given (SetGradSink) but wte's slices, in floats: a
// block, wpe, ln_f or a row of wte (wte comes in row chunks of at most this size where no
// other stage holds a copy of it, whole otherwise).
size_t MaxShardGradPiece(const GptShardLayout& layout);

class GptShardModel {
 public:
  // `tp` (tensor group of spec.tensor_size ranks) must outlive the model. Parameters start
  // zeroed: ExtractShard a logical model into params().
  static Result<std::unique_ptr<GptShardModel>> Create(const ShardSpec& spec,
                                                       TensorParallelGroup& tp);
  ~GptShardModel();

  const GptShardLayout& layout() const;
  int num_chunks() const;
  std::span<float> params();
  std::span<float> grads();
  void ZeroGrad();
  // Reads the parameters from `source` (null: params()); it must outlive its use.
  // ReleaseParams frees params() (it becomes empty) for a model whose parameters come from a
  // source.
  void SetParamSource(ParamSource* source);
  void ReleaseParams();
  // Writes each Backward's gradient piece by piece into buffers from `sink` (null: grads())
  // instead of adding it into grads(): for every piece (ShardParamPieces' wte, wpe, ln_f and
  // head_wte; each block) Acquire(offset, count) gives the buffer to ADD this micro-batch's
  // loss_scale × gradient into (zeroed by the sink for a piece reduced per micro-batch, an
  // accumulator for one it keeps), and Done hands it back as soon as it is written, one piece
  // held at a time. The head's wte comes first, then ln_f, the blocks from the last, wpe and
  // wte; on a chunk that holds both the embedding and the head, wte comes at the end only, in
  // chunks of rows from the last (MaxShardGradPiece), each the head's dlogitsᵀ · ln_f(x) rows
  // and the token embedding's. ReleaseGradients frees grads() (it becomes empty) for a model
  // trained that way.
  void SetGradSink(GradSink* sink);
  void ReleaseGradients();

  // Forward of local chunk `chunk` on a micro-batch, stashed under `slot` (kInvalidArgument
  // if that slot is already stashed, or on a bad batch). `input`: the previous chunk's
  // output (not read by the embedding chunk); `output`: B·T·C floats (not written by the
  // head chunk). Returns the mean cross-entropy over targets >= 0 for the head chunk with
  // targets, 0 otherwise.
  Result<float> Forward(int chunk, int slot, const MicrobatchTokens& batch, const float* input,
                        float* output);
  // Backward of the stash in `slot`, adding loss_scale × the gradient into grads() and
  // releasing the stash. `doutput`: the gradient of the chunk's output (not read by the
  // head chunk); `dinput`: B·T·C floats receiving the gradient of its input (not written
  // by the embedding chunk). kFailedPrecondition if nothing is stashed there, or the head
  // chunk's forward had no targets. `ready` (optional) is called with each piece of the
  // chunk's gradient (ShardGradPieces, gpt_shard_layout.h) as soon as this call has written
  // it, in that order (the data-parallel reduction overlaps the rest of the backward).
  Result<void> Backward(int chunk, int slot, float loss_scale, const float* doutput,
                        float* dinput, const GradReadyFn& ready = {});
  // Drops the stash in `slot` without a backward (evaluation, sampling).
  void Release(int chunk, int slot);

  // The head chunk, after a Forward of `slot`: the vocab_size logits of sequence 0's
  // position `position`, gathered from the tensor group (a collective on it).
  Result<std::vector<float>> Logits(int chunk, int slot, int position);

  // Bytes of activations stashed now, and the most at once since the last ResetPeak.
  size_t activation_bytes() const;
  size_t peak_activation_bytes() const;
  void ResetPeak();

 private:
  struct Impl;
  explicit GptShardModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::engine
