#include "engine/parallel/layout.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace cohort::engine {
namespace {

// Forward FLOPs per token of a block, the output head and the embedding (see layout.h).
struct Costs {
  double block = 0, head = 0, embedding = 0;
};

Costs CostsOf(const GptConfig& m) {
  const double C = m.n_embd, T = m.max_seq_len, Vp = m.padded_vocab_size();
  return {24.0 * C * C + 4.0 * T * C, 2.0 * C * Vp, C};
}

// Blocks per chunk that minimise the costliest chunk (dynamic programming over contiguous
// splits; ties go to the split found first, which gives earlier chunks fewer blocks).
std::vector<int> BalancedSplit(int layers, int chunks, const Costs& cost) {
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][l]: the smallest maximum cost of the first k chunks holding the first l blocks.
  std::vector<std::vector<double>> best(chunks + 1, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<int>> cut(chunks + 1, std::vector<int>(layers + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= chunks; ++k) {
    for (int l = k; l <= layers - (chunks - k); ++l) {
      for (int prev = k - 1; prev < l; ++prev) {
        if (best[k - 1][prev] == inf) continue;
        double c = (l - prev) * cost.block;
        if (k == 1) c += cost.embedding;
        if (k == chunks) c += cost.head;
        const double worst = std::max(best[k - 1][prev], c);
        if (worst < best[k][l] * (1 - 1e-12)) {
          best[k][l] = worst;
          cut[k][l] = prev;
        }
      }
    }
  }
  std::vector<int> sizes(chunks);
  for (int k = chunks, l = layers; k >= 1; --k) {
    sizes[k - 1] = l - cut[k][l];
    l = cut[k][l];
  }
  return sizes;
}

std::string ChunkText(const ModelChunk& c) {
  std::string s;
  if (c.embedding) s += "embedding + ";
  s += c.end_layer - c.begin_layer == 1
           ? fmt::format("layer {}", c.begin_layer)
           : fmt::format("layers {}-{}", c.begin_layer, c.end_layer - 1);
  if (c.head) s += " + head";
  return s;
}

}  // namespace

const char* ScheduleName(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::kGpipe: return "gpipe";
    case PipelineScheduleKind::kOneFOneB: return "1f1b";
    case PipelineScheduleKind::kInterleaved: return "interleaved";
  }
  return "?";
}

RankCoords ParallelLayout::CoordsOf(int rank) const {
  return {rank / (pipeline * tensor), (rank / tensor) % pipeline, rank % tensor};
}

int ParallelLayout::RankOf(const RankCoords& c) const {
  return (c.data * pipeline + c.stage) * tensor + c.tensor;
}

std::vector<int> ParallelLayout::ChunksOf(int stage) const {
  std::vector<int> out;
  for (int c = stage; c < num_chunks(); c += pipeline) out.push_back(c);
  return out;
}

std::vector<int> ParallelLayout::TensorGroup(int rank) const {
  RankCoords c = CoordsOf(rank);
  std::vector<int> out;
  for (c.tensor = 0; c.tensor < tensor; ++c.tensor) out.push_back(RankOf(c));
  return out;
}

std::vector<int> ParallelLayout::PipelineGroup(int rank) const {
  RankCoords c = CoordsOf(rank);
  std::vector<int> out;
  for (c.stage = 0; c.stage < pipeline; ++c.stage) out.push_back(RankOf(c));
  return out;
}

std::vector<int> ParallelLayout::DataGroup(int rank) const {
  RankCoords c = CoordsOf(rank);
  std::vector<int> out;
  for (c.data = 0; c.data < data; ++c.data) out.push_back(RankOf(c));
  return out;
}

std::vector<int> ParallelLayout::ModelGroup(int rank) const {
  const int first = CoordsOf(rank).data * pipeline * tensor;
  std::vector<int> out(pipeline * tensor);
  std::iota(out.begin(), out.end(), first);
  return out;
}

std::vector<int> ParallelLayout::EmbeddingGroup(int rank) const {
  RankCoords c = CoordsOf(rank);
  c.stage = 0;
  const int first = RankOf(c);
  c.stage = pipeline - 1;
  const int last = RankOf(c);
  if (first == last) return {first};
  return {first, last};
}

std::string ParallelLayout::Describe() const {
  std::string s = fmt::format("{} rank{} = data {} x pipeline {} x tensor {}", world,
                              world == 1 ? "" : "s", data, pipeline, tensor);
  if (pipeline > 1) s += fmt::format(" ({} schedule", ScheduleName(schedule));
  if (pipeline > 1 && virtual_stages > 1) s += fmt::format(", {} chunks per stage", virtual_stages);
  if (pipeline > 1) s += ")";
  for (int stage = 0; stage < pipeline; ++stage) {
    s += fmt::format("; stage {}: ", stage);
    const std::vector<int> mine = ChunksOf(stage);
    for (size_t i = 0; i < mine.size(); ++i) {
      if (i > 0) s += ", ";
      if (mine.size() > 1) s += fmt::format("chunk {} ", mine[i]);
      s += ChunkText(chunks[mine[i]]);
    }
  }
  return s;
}

Result<ParallelLayout> MakeParallelLayout(const ParallelConfig& config, const GptConfig& model,
                                          int world) {
  ParallelLayout lay;
  lay.world = world;
  lay.tensor = config.tensor;
  lay.pipeline = config.pipeline;
  lay.virtual_stages = config.virtual_stages;
  if (world < 1) return FieldError("world_size", "must be >= 1, got {}", world);
  if (config.tensor < 1) return FieldError("parallel.tensor", "must be >= 1, got {}", config.tensor);
  if (config.pipeline < 1) {
    return FieldError("parallel.pipeline", "must be >= 1, got {}", config.pipeline);
  }
  if (config.schedule == "gpipe") {
    lay.schedule = PipelineScheduleKind::kGpipe;
  } else if (config.schedule == "1f1b") {
    lay.schedule = PipelineScheduleKind::kOneFOneB;
  } else if (config.schedule == "interleaved") {
    lay.schedule = PipelineScheduleKind::kInterleaved;
  } else {
    return FieldError("parallel.schedule", "must be gpipe, 1f1b or interleaved, got '{}'",
                      config.schedule);
  }
  if (model.n_head % config.tensor != 0) {
    return FieldError("parallel.tensor", "{} does not divide n_head {}", config.tensor,
                      model.n_head);
  }
  if (model.padded_vocab_size() % config.tensor != 0) {
    return FieldError("parallel.tensor", "{} does not divide the padded vocabulary {}",
                      config.tensor, model.padded_vocab_size());
  }
  const int model_ranks = config.tensor * config.pipeline;
  if (world % model_ranks != 0) {
    return FieldError("parallel",
                      "tensor {} x pipeline {} = {} ranks per replica does not divide the world "
                      "size {}",
                      config.tensor, config.pipeline, model_ranks, world);
  }
  lay.data = world / model_ranks;
  if (lay.schedule == PipelineScheduleKind::kInterleaved) {
    if (config.pipeline < 2) {
      return FieldError("parallel.schedule", "interleaved needs parallel.pipeline >= 2, got {}",
                        config.pipeline);
    }
    if (config.virtual_stages < 2) {
      return FieldError("parallel.virtual_stages",
                        "the interleaved schedule needs at least 2 chunks per stage, got {}",
                        config.virtual_stages);
    }
  } else if (config.virtual_stages != 1) {
    return FieldError("parallel.virtual_stages",
                      "{} chunks per stage need parallel.schedule interleaved (it is {})",
                      config.virtual_stages, config.schedule);
  }
  const int chunks = config.pipeline * config.virtual_stages;
  if (chunks > model.n_layer) {
    return FieldError("parallel.pipeline",
                      "pipeline {} x virtual_stages {} = {} chunks, but n_layer {} gives each "
                      "chunk less than one layer",
                      config.pipeline, config.virtual_stages, chunks, model.n_layer);
  }
  std::vector<int> sizes = config.pipeline_layers;
  if (sizes.empty()) {
    sizes = BalancedSplit(model.n_layer, chunks, CostsOf(model));
  } else {
    if (static_cast<int>(sizes.size()) != chunks) {
      return FieldError("parallel.pipeline_layers",
                        "has {} entries; pipeline {} x virtual_stages {} needs {}", sizes.size(),
                        config.pipeline, config.virtual_stages, chunks);
    }
    long sum = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] < 1) {
        return FieldError("parallel.pipeline_layers", "entry {} is {}; every chunk needs a layer",
                          i, sizes[i]);
      }
      sum += sizes[i];
    }
    if (sum != model.n_layer) {
      return FieldError("parallel.pipeline_layers", "sums to {} layers; n_layer is {}", sum,
                        model.n_layer);
    }
  }
  int begin = 0;
  for (int c = 0; c < chunks; ++c) {
    ModelChunk mc;
    mc.begin_layer = begin;
    mc.end_layer = begin + sizes[c];
    mc.embedding = c == 0;
    mc.head = c == chunks - 1;
    mc.stage = c % config.pipeline;
    lay.chunks.push_back(mc);
    begin = mc.end_layer;
  }
  return lay;
}

ShardSpec ShardSpecFor(const ParallelLayout& layout, const GptConfig& model, int rank) {
  const RankCoords at = layout.CoordsOf(rank);
  ShardSpec spec;
  spec.config = model;
  spec.tensor_rank = at.tensor;
  spec.tensor_size = layout.tensor;
  for (int c : layout.ChunksOf(at.stage)) {
    const ModelChunk& mc = layout.chunks[c];
    spec.chunks.push_back({mc.begin_layer, mc.end_layer, mc.embedding, mc.head});
  }
  return spec;
}

double TheoreticalBubble(const ParallelLayout& layout, int microbatches) {
  const double p = layout.pipeline, v = layout.virtual_stages, m = microbatches;
  return (p - 1) / (v * m + p - 1);
}

}  // namespace cohort::engine
