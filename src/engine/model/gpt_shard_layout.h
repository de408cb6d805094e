// GptShardLayout: the parameters one rank of a tensor × pipeline layout holds, in one flat
// buffer, and where each of its tensors comes from in the logical (single-rank) model, the
// GptLayout of gpt.h. Checkpoints store the logical tensors, so a checkpoint written in one
// layout resumes in any other (each rank reads its slices through LogicalRunsOf below).
//
// A rank holds its stage's chunks (parallel/layout.h) in model order; per chunk: wte's
// vocabulary slice and wpe (the first chunk), each block's tensors, then ln_f and, on a
// last chunk that is not also the first, its own copy of wte's slice (the tied output
// head). Tensor rank r of t holds, per block (C = n_embd, heads split in t groups):
//   ln1.w/b, ln2.w/b, attn_proj.b, fc_proj.b  whole (replicated)
//   qkv.w (3C/t, C), qkv.b (3C/t)             rows of its heads in q, k and v
//   attn_proj.w (C, C/t)                       the columns of its heads
//   fc.w (4C/t, C), fc.b (4C/t)                rows [r·4C/t, (r+1)·4C/t)
//   fc_proj.w (C, 4C/t)                        the same columns
// and wte rows [r·Vp/t, (r+1)·Vp/t), wpe and ln_f whole.
//
// Each local tensor is a set of row ranges of its logical tensor (viewed as rows × cols;
// a vector is one column) restricted to one column range, the rows concatenated in order.
// Plain values; Build is a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/model/gpt.h"

namespace cohort::engine {

struct ShardChunkSpec {
  int begin_layer = 0, end_layer = 0;
  bool embedding = false, head = false;
};

struct ShardSpec {
  GptConfig config;
  int tensor_rank = 0, tensor_size = 1;
  std::vector<ShardChunkSpec> chunks;  // this rank's chunks in model order
};

struct RowRange {
  int64_t begin = 0, end = 0;
};

struct ShardTensor {
  ParamTensor local;        // name (the logical one), local shape, offset in the shard buffer
  size_t logical_offset = 0;  // where the logical tensor starts in the GptLayout buffer
  int64_t logical_rows = 0, logical_cols = 1;
  std::vector<RowRange> rows;  // logical rows held, in local order
  int64_t col_begin = 0, col_end = 1;
  // False for values another rank (or another tensor here) also counts: a replicated tensor
  // on tensor ranks > 0, and the output head's copy of wte. The global gradient norm sums
  // the tensors that count once each.
  bool counts_in_norm = true;
  bool tied_head_copy = false;  // the last chunk's copy of wte
};

// Offsets (in floats, into the shard buffer) of one block's local tensors.
struct ShardBlockOffsets {
  size_t begin = 0, end = 0;
  size_t ln1_w = 0, ln1_b = 0, qkv_w = 0, qkv_b = 0, attn_proj_w = 0, attn_proj_b = 0;
  size_t ln2_w = 0, ln2_b = 0, fc_w = 0, fc_b = 0, fc_proj_w = 0, fc_proj_b = 0;
};

struct ShardChunkOffsets {
  size_t begin = 0, end = 0;             // the chunk's slice of the buffer
  size_t wte = 0, wpe = 0;               // embedding chunk
  std::vector<ShardBlockOffsets> blocks;  // one per layer of the chunk
  size_t ln_f_w = 0, ln_f_b = 0;         // head chunk
  size_t head_wte = 0;                   // head chunk: wte's slice (== wte when both)
};

struct GptShardLayout {
  ShardSpec spec;
  int64_t vocab_begin = 0, vocab_end = 0;  // this rank's rows of the padded vocabulary
  std::vector<ShardTensor> tensors;
  std::vector<ShardChunkOffsets> chunks;
  size_t total = 0;

  // `spec.config` must be valid, tensor_size must divide n_head and the padded vocabulary,
  // and the chunks' layers must lie in [0, n_layer).
  static GptShardLayout Build(const ShardSpec& spec);
};

// Copies this shard's slices out of a logical buffer (the GptLayout of spec.config) into
// `local` (total floats).
void ExtractShard(const GptShardLayout& layout, std::span<const float> logical,
                  std::span<float> local);
// Copies this shard's slices of one logical tensor (`values`: its numel() values, e.g. from
// GenerateInitialParams) into `local` (total floats); tensors the shard does not hold are
// skipped, and both copies of wte get their slice.
void ExtractTensor(const GptShardLayout& layout, const ParamTensor& logical,
                   std::span<const float> values, std::span<float> local);
// The logical runs behind elements [lo, hi) of the shard buffer, each pointing into `out`
// (hi − lo floats, element lo first): GenerateInitialRuns (gpt.h) on them initialises that part
// of the shard from a seed alone (a ZeRO-3 rank's part: nothing else is generated or held).
// Both copies of wte map to the same logical rows.
std::vector<ParamRun> LogicalRunsOf(const GptShardLayout& layout, size_t lo, size_t hi,
                                    float* out);

// A strided slice of the shard for a checkpoint: `runs` runs of `width` floats, contiguous in
// the shard buffer from `local`, in the logical buffer from `logical`, `stride` apart.
struct ShardRun {
  size_t local = 0, logical = 0, width = 0, stride = 0, runs = 1;
};
// The slices this shard writes into a logical checkpoint: over the ranks of one data
// replica every logical value exactly once (tensors that count in the norm: replicated ones
// only on tensor rank 0, never the tied head copy). One run per row range, strided when the
// shard holds a column range.
std::vector<ShardRun> CheckpointRuns(const GptShardLayout& layout);
// The parts of `runs` that lie in [lo, hi) of the shard buffer (a ZeRO shard of it): a run cut
// mid-way becomes up to three (a partial first row, whole rows, a partial last row).
std::vector<ShardRun> CutRuns(std::span<const ShardRun> runs, size_t lo, size_t hi);

// A piece of a shard's gradient buffer that one chunk's Backward finishes at once.
struct ShardGradPiece {
  size_t offset = 0, count = 0;
};
// The pieces of local chunk `chunk`'s gradient in the order its Backward finishes them: the
// head (ln_f and the tied copy of wte) on a head chunk, each block from the last, then the
// embedding (wte and wpe) on the embedding chunk. Together they tile the chunk's slice
// [begin, end); a chunk holding both the embedding and the head writes wte in both its head
// and its embedding part, and wte is in the embedding piece, which comes last. The data-
// parallel reduction of a piece may start once the last micro-batch's Backward reported it.
std::vector<ShardGradPiece> ShardGradPieces(const GptShardLayout& layout, int chunk);

// Writes this shard's slices into a logical buffer; tied head copies are skipped (the
// embedding's slice is the one that counts).
void PlaceShard(const GptShardLayout& layout, std::span<const float> local,
                std::span<float> logical);

}  // namespace cohort::engine
