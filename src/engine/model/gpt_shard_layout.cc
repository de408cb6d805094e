#include "engine/model/gpt_shard_layout.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/model/gpt_layout.h"

namespace cohort::engine {
namespace {

class Builder {
 public:
  Builder(const ShardSpec& spec, GptShardLayout& out)
      : spec_(spec), out_(out), logical_(GptLayout::Build(spec.config)) {}

  // Adds the slice of logical tensor `name` given by `rows` × [c0, c1); returns its offset.
  size_t Add(const std::string& name, std::vector<RowRange> rows, int64_t c0, int64_t c1,
             bool replicated, bool tied_copy = false) {
    const ParamTensor* lt = Find(name);
    ShardTensor t;
    t.logical_offset = lt->offset;
    t.logical_rows = lt->shape[0];
    t.logical_cols = lt->shape.size() > 1 ? lt->shape[1] : 1;
    if (rows.empty()) rows.push_back({0, t.logical_rows});
    if (c1 < 0) c1 = t.logical_cols;
    int64_t nrows = 0;
    for (const RowRange& r : rows) nrows += r.end - r.begin;
    t.rows = std::move(rows);
    t.col_begin = c0;
    t.col_end = c1;
    t.local.name = name;
    t.local.shape = lt->shape.size() > 1 ? std::vector<int64_t>{nrows, c1 - c0}
                                          : std::vector<int64_t>{nrows};
    t.local.numel = static_cast<size_t>(nrows * (c1 - c0));
    t.local.offset = offset_;
    t.local.weight_decay = lt->weight_decay;
    t.counts_in_norm = !tied_copy && !(replicated && spec_.tensor_rank > 0);
    t.tied_head_copy = tied_copy;
    offset_ += t.local.numel;
    out_.tensors.push_back(std::move(t));
    return out_.tensors.back().local.offset;
  }
  size_t offset() const { return offset_; }

 private:
  const ParamTensor* Find(const std::string& name) const {
    for (const ParamTensor& t : logical_.tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;  // names come from the same scheme as GptLayout; never reached
  }

  const ShardSpec& spec_;
  GptShardLayout& out_;
  GptLayout logical_;
  size_t offset_ = 0;
};

}  // namespace

GptShardLayout GptShardLayout::Build(const ShardSpec& spec) {
  GptShardLayout lay;
  lay.spec = spec;
  const GptConfig& cfg = spec.config;
  const int64_t C = cfg.n_embd, Vp = cfg.padded_vocab_size();
  const int64_t t = spec.tensor_size, r = spec.tensor_rank;
  const int64_t Cl = C / t, Vl = Vp / t;
  lay.vocab_begin = r * Vl;
  lay.vocab_end = (r + 1) * Vl;
  const std::vector<RowRange> all;
  const std::vector<RowRange> vocab = {{lay.vocab_begin, lay.vocab_end}};
  const std::vector<RowRange> qkv = {{r * Cl, (r + 1) * Cl},
                                     {C + r * Cl, C + (r + 1) * Cl},
                                     {2 * C + r * Cl, 2 * C + (r + 1) * Cl}};
  const std::vector<RowRange> mlp = {{r * 4 * Cl, (r + 1) * 4 * Cl}};
  Builder b(spec, lay);
  for (const ShardChunkSpec& chunk : spec.chunks) {
    ShardChunkOffsets co;
    co.begin = b.offset();
    if (chunk.embedding) {
      co.wte = b.Add("wte", vocab, 0, -1, false);
      co.wpe = b.Add("wpe", all, 0, -1, true);
    }
    for (int l = chunk.begin_layer; l < chunk.end_layer; ++l) {
      const std::string p = "h." + std::to_string(l) + ".";
      ShardBlockOffsets w;
      w.begin = b.offset();
      w.ln1_w = b.Add(p + "ln1.w", all, 0, -1, true);
      w.ln1_b = b.Add(p + "ln1.b", all, 0, -1, true);
      w.qkv_w = b.Add(p + "qkv.w", qkv, 0, -1, false);
      w.qkv_b = b.Add(p + "qkv.b", qkv, 0, -1, false);
      w.attn_proj_w = b.Add(p + "attn_proj.w", all, r * Cl, (r + 1) * Cl, false);
      w.attn_proj_b = b.Add(p + "attn_proj.b", all, 0, -1, true);
      w.ln2_w = b.Add(p + "ln2.w", all, 0, -1, true);
      w.ln2_b = b.Add(p + "ln2.b", all, 0, -1, true);
      w.fc_w = b.Add(p + "fc.w", mlp, 0, -1, false);
      w.fc_b = b.Add(p + "fc.b", mlp, 0, -1, false);
      w.fc_proj_w = b.Add(p + "fc_proj.w", all, r * 4 * Cl, (r + 1) * 4 * Cl, false);
      w.fc_proj_b = b.Add(p + "fc_proj.b", all, 0, -1, true);
      w.end = b.offset();
      co.blocks.push_back(w);
    }
    if (chunk.head) {
      co.ln_f_w = b.Add("ln_f.w", all, 0, -1, true);
      co.ln_f_b = b.Add("ln_f.b", all, 0, -1, true);
      co.head_wte = chunk.embedding ? co.wte : b.Add("wte", vocab, 0, -1, false, true);
    }
    co.end = b.offset();
    lay.chunks.push_back(std::move(co));
  }
  lay.total = b.offset();
  return lay;
}

namespace {

// Calls copy(local_ptr, logical_ptr, count) for every contiguous run of a tensor's slice.
template <typename Fn>
void ForEachRun(const ShardTensor& t, Fn&& copy) {
  size_t local = t.local.offset;
  const size_t width = static_cast<size_t>(t.col_end - t.col_begin);
  for (const RowRange& r : t.rows) {
    for (int64_t row = r.begin; row < r.end; ++row) {
      const size_t logical =
          t.logical_offset + static_cast<size_t>(row * t.logical_cols + t.col_begin);
      copy(local, logical, width);
      local += width;
    }
  }
}

}  // namespace

void ExtractShard(const GptShardLayout& layout, std::span<const float> logical,
                  std::span<float> local) {
  for (const ShardTensor& t : layout.tensors) {
    ForEachRun(t, [&](size_t lo, size_t gl, size_t n) {
      std::memcpy(local.data() + lo, logical.data() + gl, n * sizeof(float));
    });
  }
}

void ExtractTensor(const GptShardLayout& layout, const ParamTensor& logical,
                   std::span<const float> values, std::span<float> local) {
  for (const ShardTensor& t : layout.tensors) {
    if (t.logical_offset != logical.offset) continue;
    ForEachRun(t, [&](size_t lo, size_t gl, size_t n) {
      std::memcpy(local.data() + lo, values.data() + (gl - logical.offset), n * sizeof(float));
    });
  }
}

std::vector<ParamRun> LogicalRunsOf(const GptShardLayout& layout, size_t lo, size_t hi,
                                    float* out) {
  std::vector<ParamRun> runs;
  for (const ShardTensor& t : layout.tensors) {
    if (t.local.offset >= hi || t.local.offset + t.local.numel <= lo) continue;
    ForEachRun(t, [&](size_t local, size_t logical, size_t n) {
      const size_t a = std::max(lo, local), b = std::min(hi, local + n);
      if (b > a) runs.push_back({logical + (a - local), b - a, out + (a - lo)});
    });
  }
  return runs;
}

std::vector<ShardRun> CheckpointRuns(const GptShardLayout& layout) {
  std::vector<ShardRun> out;
  for (const ShardTensor& t : layout.tensors) {
    if (!t.counts_in_norm || t.tied_head_copy) continue;
    size_t local = t.local.offset;
    const size_t cols = static_cast<size_t>(t.logical_cols);
    const size_t width = static_cast<size_t>(t.col_end - t.col_begin);
    for (const RowRange& r : t.rows) {
      const size_t rows = static_cast<size_t>(r.end - r.begin);
      if (rows == 0 || width == 0) continue;
      const size_t logical = t.logical_offset + static_cast<size_t>(r.begin) * cols +
                             static_cast<size_t>(t.col_begin);
      if (width == cols) {
        out.push_back({local, logical, rows * cols, rows * cols, 1});
      } else {
        out.push_back({local, logical, width, cols, rows});
      }
      local += rows * width;
    }
  }
  return out;
}

std::vector<ShardRun> CutRuns(std::span<const ShardRun> runs, size_t lo, size_t hi) {
  std::vector<ShardRun> out;
  for (const ShardRun& r : runs) {
    const size_t first = std::max(lo, r.local), last = std::min(hi, r.local + r.width * r.runs);
    if (first >= last) continue;
    size_t k0 = (first - r.local) / r.width;
    const size_t off0 = (first - r.local) % r.width;
    const size_t k1 = (last - r.local) / r.width, off1 = (last - r.local) % r.width;
    if (k0 == k1) {
      out.push_back({first, r.logical + k0 * r.stride + off0, last - first, last - first, 1});
      continue;
    }
    if (off0 > 0) {
      out.push_back({first, r.logical + k0 * r.stride + off0, r.width - off0, r.width - off0, 1});
      ++k0;
    }
    if (k1 > k0) {
      out.push_back({r.local + k0 * r.width, r.logical + k0 * r.stride, r.width,
                     k1 - k0 > 1 ? r.stride : r.width, k1 - k0});
    }
    if (off1 > 0) out.push_back({r.local + k1 * r.width, r.logical + k1 * r.stride, off1, off1, 1});
  }
  return out;
}

void PlaceShard(const GptShardLayout& layout, std::span<const float> local,
                std::span<float> logical) {
  for (const ShardTensor& t : layout.tensors) {
    if (t.tied_head_copy) continue;
    ForEachRun(t, [&](size_t lo, size_t gl, size_t n) {
      std::memcpy(logical.data() + gl, local.data() + lo, n * sizeof(float));
    });
  }
}

std::vector<ShardGradPiece> ShardGradPieces(const GptShardLayout& layout, int chunk) {
  const ShardChunkOffsets& co = layout.chunks[static_cast<size_t>(chunk)];
  const ShardChunkSpec& spec = layout.spec.chunks[static_cast<size_t>(chunk)];
  const size_t blocks_begin =
      co.blocks.empty() ? (spec.head ? co.ln_f_w : co.end) : co.blocks.front().begin;
  const size_t blocks_end = co.blocks.empty() ? blocks_begin : co.blocks.back().end;
  std::vector<ShardGradPiece> pieces;
  if (spec.head && co.end > blocks_end) pieces.push_back({blocks_end, co.end - blocks_end});
  for (auto b = co.blocks.rbegin(); b != co.blocks.rend(); ++b) {
    pieces.push_back({b->begin, b->end - b->begin});
  }
  if (spec.embedding && blocks_begin > co.begin) {
    pieces.push_back({co.begin, blocks_begin - co.begin});
  }
  return pieces;
}

}  // namespace cohort::engine
