// ParallelLayout: how `cohort train` cuts its ranks and its model (Megatron-LM's 3-D
// parallelism): world = data × pipeline × tensor.
//
// Ranks. Rank r has coordinates (data d, stage s, tensor t) with
// r = (d · pipeline + s) · tensor + t: the ranks of one tensor group are consecutive (so
// they share a node when a node runs a multiple of `tensor` consecutive LOCAL_RANKs), then
// the stages of one pipeline, then the data-parallel replicas.
//
// Model. The n_layer blocks are cut into pipeline × virtual_stages contiguous chunks in
// order; chunk c lives on stage c % pipeline (Megatron's interleaving: stage s holds chunks
// s, s + p, s + 2p, ...; with virtual_stages 1 chunk c is stage c). Chunk 0 also holds the
// token and position embeddings, the last chunk the final LayerNorm and the output head
// (tied to the token embedding, so the first and the last stage each keep a copy). Unless
// `pipeline_layers` names the split, chunks are balanced by their forward FLOPs per token,
// the embedding and the head included: a block costs 24·C² + 4·T·C, the head 2·C·Vp, the
// embedding C; every chunk gets at least one block.
//
// Within a chunk, tensor parallelism splits each block across the tensor group: attention
// heads (qkv column-parallel, the attention projection row-parallel), the MLP (fc column-
// parallel, its projection row-parallel) and the vocabulary (embedding rows, output
// logits); LayerNorms, wpe and the row-parallel biases are replicated.
//
// Plain values; MakeParallelLayout is a pure function.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_shard_layout.h"

namespace cohort::engine {

enum class PipelineScheduleKind { kGpipe, kOneFOneB, kInterleaved };

// "gpipe", "1f1b", "interleaved".
const char* ScheduleName(PipelineScheduleKind kind);

// The `parallel:` section of the train config.
struct ParallelConfig {
  int tensor = 1;
  int pipeline = 1;
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved
  int virtual_stages = 1;         // chunks per stage; interleaved needs >= 2
  int microbatches = 0;           // per replica and step; 0: what the batch gives
  std::vector<int> pipeline_layers;  // blocks per chunk, in chunk order; empty: balanced
  int zero = 0;                      // ZeRO stage in the data-parallel group (zero.h)
  // Average each data-parallel gradient bucket during the last micro-batch's backward
  // (shard_grad_reducer.h) rather than after the step.
  bool overlap_grad_reduce = true;
  std::string offload = "none";      // none | optimizer | optimizer+params (cuda only)
  bool prefetch = true;              // ZeRO-3: the next piece's gather on a comm thread
};

// One contiguous piece of the model.
struct ModelChunk {
  int begin_layer = 0, end_layer = 0;  // blocks [begin, end)
  bool embedding = false;              // wte + wpe (chunk 0)
  bool head = false;                   // ln_f + the output head (the last chunk)
  int stage = 0;                       // the pipeline stage that runs it
};

struct RankCoords {
  int data = 0, stage = 0, tensor = 0;
};

struct ParallelLayout {
  int world = 1, data = 1, pipeline = 1, tensor = 1, virtual_stages = 1;
  PipelineScheduleKind schedule = PipelineScheduleKind::kOneFOneB;
  std::vector<ModelChunk> chunks;  // pipeline × virtual_stages, in model order

  bool model_parallel() const { return pipeline > 1 || tensor > 1; }
  int num_chunks() const { return static_cast<int>(chunks.size()); }
  RankCoords CoordsOf(int rank) const;
  int RankOf(const RankCoords& c) const;
  // The global chunk indices stage `stage` runs, in model order.
  std::vector<int> ChunksOf(int stage) const;
  // World ranks of `rank`'s groups, sorted: its tensor group, its pipeline (same data and
  // tensor index), its data-parallel group (same stage and tensor index), its
  // model-parallel group (same data index: every stage and tensor rank of one replica), and
  // the embedding group (the first and the last stage at its data and tensor index; one
  // rank when pipeline is 1).
  std::vector<int> TensorGroup(int rank) const;
  std::vector<int> PipelineGroup(int rank) const;
  std::vector<int> DataGroup(int rank) const;
  std::vector<int> ModelGroup(int rank) const;
  std::vector<int> EmbeddingGroup(int rank) const;

  // "8 ranks = data 2 x pipeline 2 x tensor 2; stage 0: embedding + layers 0-5; stage 1:
  // layers 6-11 + head" (interleaved stages list their chunks).
  std::string Describe() const;
};

// Builds the layout of `world` ranks for `model` (which must be valid). kInvalidArgument
// naming the field and the numbers for every impossible layout: a tensor size that does
// not divide model.n_head or the padded vocabulary, tensor × pipeline not dividing the
// world size, a schedule name that does not exist, virtual_stages other than 1 outside the
// interleaved schedule (or below 2 in it), an interleaved schedule on one stage, more
// chunks than blocks, and a pipeline_layers list of the wrong length, with a non-positive
// entry or a sum other than n_layer.
Result<ParallelLayout> MakeParallelLayout(const ParallelConfig& config, const GptConfig& model,
                                          int world);

// What world rank `rank` holds of `model` (its stage's chunks, its tensor slice).
ShardSpec ShardSpecFor(const ParallelLayout& layout, const GptConfig& model, int rank);

// The schedule's idle fraction (Narayanan et al. 2021): (p − 1) / (v·m + p − 1).
double TheoreticalBubble(const ParallelLayout& layout, int microbatches);

}  // namespace cohort::engine
