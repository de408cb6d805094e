// GptShardModel: GptModel's layer loop (gpt.cc) over one rank's chunks and its slice of each
// block, with the tensor group's collectives where Megatron-LM puts them.
#include "engine/model/gpt_shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "engine/kernels/cpu/attention.h"
#include "engine/kernels/cpu/cross_entropy.h"
#include "engine/kernels/cpu/encoder.h"
#include "engine/kernels/cpu/gelu.h"
#include "engine/kernels/cpu/layernorm.h"
#include "engine/kernels/cpu/matmul.h"
#include "engine/kernels/cpu/residual.h"

namespace cohort::engine {

namespace cpu_k = ::cohort::engine::cpu;

namespace {

void Zero(std::vector<float>& v) { std::memset(v.data(), 0, v.size() * sizeof(float)); }

// out[n, :] += bias for n in [0, N).
void AddBias(float* out, const float* bias, int N, int C) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C >= (size_t{1} << 14))
  for (int n = 0; n < N; ++n) {
    float* o = out + static_cast<size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] += bias[c];
  }
}

// One chunk's activations for one micro-batch (per-block tensors layer-major, as gpt.cc).
struct Stash {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets;
  std::vector<float> input;                    // (N, C): the chunk's input (or embedding)
  std::vector<float> ln1, ln1_mean, ln1_rstd;  // (L, N, C), (L, N) x2
  std::vector<float> qkv;                      // (L, N, 3Cl)
  std::vector<float> atty;                     // (L, N, Cl)
  std::vector<float> att;                      // (L, B, NHl, T, T)
  std::vector<float> residual2;                // (L, N, C)
  std::vector<float> ln2, ln2_mean, ln2_rstd;  // (L, N, C), (L, N) x2
  std::vector<float> fch, fch_gelu;            // (L, N, 4Cl) x2
  std::vector<float> residual3;                // (L, N, C)
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // head: (N, C), (N) x2
  std::vector<float> logits;                   // head: (N, Vl); dlogits after Backward
  std::vector<float> lse;                      // head: (N)
  int num_targets = 0;
  bool loss_ready = false;

  size_t bytes() const {
    size_t f = input.size() + ln1.size() + ln1_mean.size() + ln1_rstd.size() + qkv.size() +
               atty.size() + att.size() + residual2.size() + ln2.size() + ln2_mean.size() +
               ln2_rstd.size() + fch.size() + fch_gelu.size() + residual3.size() + lnf.size() +
               lnf_mean.size() + lnf_rstd.size() + logits.size() + lse.size();
    return f * sizeof(float) + (tokens.size() + targets.size()) * sizeof(int32_t);
  }
};

}  // namespace

struct GptShardModel::Impl {
  GptShardLayout layout;
  TensorParallelGroup* tp = nullptr;
  int C = 0, Cl = 0, NHl = 0, Vl = 0, V = 0, v0 = 0;
  std::vector<float> params, grads;
  ParamSource* source = nullptr;  // ZeRO-3: where the pieces come from
  GradSink* sink = nullptr;       // ZeRO-2 and 3: where the gradient pieces go
  float* grad_base = nullptr;     // with a sink: the piece being written, from grad_origin
  size_t grad_origin = 0;
  const float* held = nullptr;    // the piece the source handed out, starting at held_lo
  size_t held_lo = 0;
  // Stashes in use per chunk (by slot) and released ones kept for reuse.
  std::vector<std::map<int, std::unique_ptr<Stash>>> stashes;
  std::vector<std::vector<std::unique_ptr<Stash>>> spare;
  size_t bytes_now = 0, bytes_peak = 0;
  // The backward's temporaries (one micro-batch at a time).
  std::vector<float> dresidual, dln, datty, dqkv, dfch, dfch_gelu, stats;

  const float* P(size_t off) const {
    return source ? held + (off - held_lo) : params.data() + off;
  }
  // With a source: asks for `p` (held until Drop); without: nothing (params() holds it).
  void Hold(const ShardPiece& p) {
    if (!source) return;
    held = source->Gather(p.begin, p.size());
    held_lo = p.begin;
  }
  void Drop(const ShardPiece& p) {
    if (!source) return;
    source->Release(p.begin, p.size());
    held = nullptr;
  }
  float* G(size_t off) { return sink ? grad_base + (off - grad_origin) : grads.data() + off; }
  // A piece of this Backward's gradient starts (with a sink: its buffer becomes G's) and ends
  // (handed back to the sink, or reported through `ready`).
  void Open(const ShardPiece& p) {
    if (!sink || p.size() == 0) return;
    grad_base = sink->Acquire(p.begin, p.size());
    grad_origin = p.begin;
  }
  void Close(const ShardPiece& p, const GradReadyFn& ready) {
    if (p.size() == 0) return;
    if (sink) {
      sink->Done(p.begin, p.size());
    } else if (ready) {
      ready(p.begin, p.size());
    }
  }
  Stash& NewStash(int chunk, int slot, int B, int T);
  void Grow(std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  }
  Result<float> HeadLoss(Stash& s, const ShardChunkOffsets& co, int N);
  // out (N, C) = inp (N, Kl) · wᵀ summed over the tensor group, + bias: a row-parallel
  // layer. A group of one adds the bias in the product, exactly as GptModel does.
  Result<void> RowParallel(float* out, const float* inp, const float* w, const float* bias,
                           int N, int Kl) {
    if (tp->size() == 1) {
      cpu_k::MatmulForward(out, inp, w, bias, N, Kl, C);
      return tp->SumPartials(out, 0);  // counted: one all-reduce per block half
    }
    cpu_k::MatmulForward(out, inp, w, nullptr, N, Kl, C);
    COHORT_TRY_VOID(tp->SumPartials(out, static_cast<size_t>(N) * C));
    AddBias(out, bias, N, C);
    return {};
  }
};

namespace {
// Holds a piece from the model's ParamSource for a scope (nothing without a source).
template <typename Model>
class Holding {
 public:
  Holding(Model& m, const ShardPiece& p) : m_(m), p_(p) { m_.Hold(p_); }
  ~Holding() { m_.Drop(p_); }
  Holding(const Holding&) = delete;
  Holding& operator=(const Holding&) = delete;

 private:
  Model& m_;
  const ShardPiece p_;
};
}  // namespace

Stash& GptShardModel::Impl::NewStash(int chunk, int slot, int B, int T) {
  std::unique_ptr<Stash> s;
  auto& pool = spare[chunk];
  for (auto it = pool.begin(); it != pool.end(); ++it) {
    if ((*it)->B == B && (*it)->T == T) {
      s = std::move(*it);
      pool.erase(it);
      break;
    }
  }
  if (!s) {
    if (!pool.empty()) pool.pop_back();  // a different shape: let one go
    s = std::make_unique<Stash>();
    const ShardChunkSpec& spec = layout.spec.chunks[chunk];
    const size_t L = spec.end_layer - spec.begin_layer, N = static_cast<size_t>(B) * T;
    s->B = B;
    s->T = T;
    s->input.resize(N * C);
    s->ln1.resize(L * N * C);
    s->ln1_mean.resize(L * N);
    s->ln1_rstd.resize(L * N);
    s->qkv.resize(L * N * 3 * Cl);
    s->atty.resize(L * N * Cl);
    s->att.resize(L * B * NHl * static_cast<size_t>(T) * T);
    s->residual2.resize(L * N * C);
    s->ln2.resize(L * N * C);
    s->ln2_mean.resize(L * N);
    s->ln2_rstd.resize(L * N);
    s->fch.resize(L * N * 4 * Cl);
    s->fch_gelu.resize(L * N * 4 * Cl);
    s->residual3.resize(L * N * C);
    if (spec.head) {
      s->lnf.resize(N * C);
      s->lnf_mean.resize(N);
      s->lnf_rstd.resize(N);
      s->logits.resize(N * Vl);
      s->lse.resize(N);
    }
  }
  s->loss_ready = false;
  s->num_targets = 0;
  bytes_now += s->bytes();
  bytes_peak = std::max(bytes_peak, bytes_now);
  Stash& ref = *s;
  stashes[chunk][slot] = std::move(s);
  return ref;
}

Result<void> ValidateShardSpec(const ShardSpec& spec, const TensorParallelGroup& tp) {
  COHORT_TRY_VOID(spec.config.Validate());
  const GptConfig& c = spec.config;
  if (spec.tensor_size < 1 || c.n_head % spec.tensor_size != 0 ||
      c.padded_vocab_size() % spec.tensor_size != 0 || tp.size() != spec.tensor_size ||
      tp.rank() != spec.tensor_rank) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "shard: tensor rank {} of {} (group {} of {}) does not split n_head {} and the "
                  "padded vocabulary {}",
                  spec.tensor_rank, spec.tensor_size, tp.rank(), tp.size(), c.n_head,
                  c.padded_vocab_size());
  }
  for (const ShardChunkSpec& ch : spec.chunks) {
    if (ch.begin_layer < 0 || ch.end_layer > c.n_layer || ch.begin_layer > ch.end_layer) {
      return Errorf(ErrorCode::kInvalidArgument, "shard: layers [{}, {}) outside [0, {})",
                    ch.begin_layer, ch.end_layer, c.n_layer);
    }
  }
  return {};
}

float ShardCrossEntropyLoss(const float* max, const float* sum_exp, const float* target_logit,
                            const int32_t* targets, int N, float* lse, int* count) {
  double total = 0;
  *count = 0;
  for (int n = 0; n < N; ++n) {
    lse[n] = max[n] + std::log(sum_exp[n]);
    if (targets[n] >= 0) {
      total += static_cast<double>(lse[n]) - static_cast<double>(target_logit[n]);
      ++*count;
    }
  }
  return *count > 0 ? static_cast<float>(total / *count) : 0.0f;
}

Result<void> ValidateShardBackward(const GptShardLayout& layout, int chunk, int slot,
                                   bool stashed, bool loss_ready) {
  if (!stashed) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "shard: backward of chunk {} micro-batch {} without its forward", chunk, slot);
  }
  if (layout.spec.chunks[chunk].head && !loss_ready) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "shard: backward of micro-batch {} needs a forward with targets", slot);
  }
  return {};
}

Result<void> ValidateShardLogits(const GptShardLayout& layout, int chunk, int slot, bool stashed,
                                 int position, int T) {
  if (!stashed || !layout.spec.chunks[chunk].head) {
    return Errorf(ErrorCode::kFailedPrecondition,
                  "shard: no head forward of micro-batch {} on chunk {}", slot, chunk);
  }
  if (position < 0 || position >= T) {
    return Errorf(ErrorCode::kInvalidArgument, "shard: position {} outside [0, {})", position, T);
  }
  return {};
}

Result<void> ValidateShardForward(const GptShardLayout& layout, int chunk, int slot,
                                  bool slot_taken, const MicrobatchTokens& batch) {
  if (chunk < 0 || chunk >= static_cast<int>(layout.chunks.size())) {
    return Errorf(ErrorCode::kInvalidArgument, "shard: no chunk {}", chunk);
  }
  if (slot_taken) {
    return Errorf(ErrorCode::kInvalidArgument, "shard: chunk {} already holds micro-batch {}",
                  chunk, slot);
  }
  const ShardChunkSpec& spec = layout.spec.chunks[chunk];
  const int B = batch.B, T = batch.T, V = layout.spec.config.vocab_size;
  if (B < 1 || T < 1 || T > layout.spec.config.max_seq_len) {
    return Errorf(ErrorCode::kInvalidArgument, "shard: bad micro-batch shape {} x {}", B, T);
  }
  const size_t N = static_cast<size_t>(B) * T;
  if (spec.embedding) {
    if (batch.tokens.size() != N) {
      return Errorf(ErrorCode::kInvalidArgument, "shard: expected {} token ids, got {}", N,
                    batch.tokens.size());
    }
    for (size_t i = 0; i < N; ++i) {
      if (batch.tokens[i] < 0 || batch.tokens[i] >= V) {
        return Errorf(ErrorCode::kInvalidArgument,
                      "shard: token id {} at position {} outside [0, vocab_size={})",
                      batch.tokens[i], i, V);
      }
    }
  }
  if (spec.head && !batch.targets.empty()) {
    if (batch.targets.size() != N) {
      return Errorf(ErrorCode::kInvalidArgument, "shard: expected {} targets, got {}", N,
                    batch.targets.size());
    }
    for (size_t i = 0; i < N; ++i) {
      if (batch.targets[i] < -1 || batch.targets[i] >= V) {
        return Errorf(ErrorCode::kInvalidArgument,
                      "shard: target {} at position {} outside [-1, vocab_size={})",
                      batch.targets[i], i, V);
      }
    }
  }
  return {};
}

ShardChunkPieces ShardParamPieces(const GptShardLayout& layout, int chunk) {
  const ShardChunkSpec& spec = layout.spec.chunks[chunk];
  const ShardChunkOffsets& co = layout.chunks[chunk];
  const size_t C = static_cast<size_t>(layout.spec.config.n_embd);
  ShardChunkPieces p;
  if (spec.embedding) {
    p.wte = {co.wte, co.wpe};
    p.wpe = {co.wpe, !co.blocks.empty() ? co.blocks[0].begin
                     : spec.head        ? co.ln_f_w
                                        : co.end};
  }
  if (spec.head) {
    p.ln_f = {co.ln_f_w, co.ln_f_w + 2 * C};
    p.head_wte = spec.embedding ? p.wte : ShardPiece{co.head_wte, co.end};
  }
  return p;
}

std::vector<size_t> ShardParamPieceSizes(const GptShardLayout& layout) {
  std::vector<size_t> sizes;
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    const ShardChunkPieces p = ShardParamPieces(layout, static_cast<int>(c));
    for (const ShardPiece& piece : {p.wte, p.wpe, p.ln_f, p.head_wte}) {
      if (piece.size() > 0) sizes.push_back(piece.size());
    }
    for (const ShardBlockOffsets& w : layout.chunks[c].blocks) sizes.push_back(w.end - w.begin);
  }
  return sizes;
}

size_t MaxShardGradPiece(const GptShardLayout& layout) {
  size_t most = static_cast<size_t>(layout.spec.config.n_embd);  // a row of wte
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    const ShardChunkPieces p = ShardParamPieces(layout, static_cast<int>(c));
    most = std::max({most, p.wpe.size(), p.ln_f.size()});
    for (const ShardBlockOffsets& w : layout.chunks[c].blocks) most = std::max(most, w.end - w.begin);
  }
  return most;
}

size_t MaxShardPiece(const GptShardLayout& layout) {
  size_t most = 1;
  for (size_t s : ShardParamPieceSizes(layout)) most = std::max(most, s);
  return most;
}

GptShardModel::GptShardModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptShardModel::~GptShardModel() = default;

Result<std::unique_ptr<GptShardModel>> GptShardModel::Create(const ShardSpec& spec,
                                                             TensorParallelGroup& tp) {
  COHORT_TRY_VOID(ValidateShardSpec(spec, tp));
  const GptConfig& c = spec.config;
  auto impl = std::make_unique<Impl>();
  impl->layout = GptShardLayout::Build(spec);
  impl->tp = &tp;
  impl->C = c.n_embd;
  impl->Cl = c.n_embd / spec.tensor_size;
  impl->NHl = c.n_head / spec.tensor_size;
  impl->Vl = c.padded_vocab_size() / spec.tensor_size;
  impl->V = c.vocab_size;
  impl->v0 = static_cast<int>(impl->layout.vocab_begin);
  impl->params.assign(impl->layout.total, 0.0f);
  impl->grads.assign(impl->layout.total, 0.0f);
  impl->stashes.resize(spec.chunks.size());
  impl->spare.resize(spec.chunks.size());
  return std::unique_ptr<GptShardModel>(new GptShardModel(std::move(impl)));
}

const GptShardLayout& GptShardModel::layout() const { return impl_->layout; }
int GptShardModel::num_chunks() const { return static_cast<int>(impl_->layout.chunks.size()); }
std::span<float> GptShardModel::params() { return impl_->params; }
std::span<float> GptShardModel::grads() { return impl_->grads; }
void GptShardModel::ZeroGrad() { Zero(impl_->grads); }
void GptShardModel::SetParamSource(ParamSource* source) { impl_->source = source; }
void GptShardModel::ReleaseParams() { std::vector<float>().swap(impl_->params); }
void GptShardModel::SetGradSink(GradSink* sink) { impl_->sink = sink; }
void GptShardModel::ReleaseGradients() { std::vector<float>().swap(impl_->grads); }
size_t GptShardModel::activation_bytes() const { return impl_->bytes_now; }
size_t GptShardModel::peak_activation_bytes() const { return impl_->bytes_peak; }
void GptShardModel::ResetPeak() { impl_->bytes_peak = impl_->bytes_now; }

void GptShardModel::Release(int chunk, int slot) {
  Impl& m = *impl_;
  auto it = m.stashes[chunk].find(slot);
  if (it == m.stashes[chunk].end()) return;
  m.bytes_now -= it->second->bytes();
  m.spare[chunk].push_back(std::move(it->second));
  m.stashes[chunk].erase(it);
}

Result<float> GptShardModel::Impl::HeadLoss(Stash& s, const ShardChunkOffsets& co, int N) {
  (void)co;
  // Vocabulary-parallel cross-entropy: the global row max, then Σ e^{x − max} and the
  // target's logit summed over the tensor group in one all-reduce.
  Grow(stats, 3 * static_cast<size_t>(N));
  float* mx = stats.data();
  float* sums = stats.data() + N;  // [sum_exp (N) | target_logit (N)]
  cpu_k::CrossEntropyShardMax(mx, s.logits.data(), N, Vl, v0, V);
  COHORT_TRY_VOID(tp->Max(mx, N));
  cpu_k::CrossEntropyShardSums(sums, sums + N, s.logits.data(), s.targets.data(), mx, N, Vl, v0,
                               V);
  COHORT_TRY_VOID(tp->SumPartials(sums, 2 * static_cast<size_t>(N)));
  const float loss = ShardCrossEntropyLoss(mx, sums, sums + N, s.targets.data(), N,
                                           s.lse.data(), &s.num_targets);
  s.loss_ready = true;
  return loss;
}

Result<float> GptShardModel::Forward(int chunk, int slot, const MicrobatchTokens& batch,
                                     const float* input, float* output) {
  Impl& m = *impl_;
  COHORT_TRY_VOID(ValidateShardForward(
      m.layout, chunk, slot, chunk >= 0 && chunk < num_chunks() && m.stashes[chunk].contains(slot),
      batch));
  const ShardChunkSpec& spec = m.layout.spec.chunks[chunk];
  const ShardChunkOffsets& co = m.layout.chunks[chunk];
  const int B = batch.B, T = batch.T, C = m.C, Cl = m.Cl, NHl = m.NHl;
  const int N = B * T;
  const size_t BTC = static_cast<size_t>(N) * C, att_size = static_cast<size_t>(B) * NHl * T * T;
  const ShardChunkPieces pieces = ShardParamPieces(m.layout, chunk);
  Stash& s = m.NewStash(chunk, slot, B, T);
  if (spec.embedding) {
    s.tokens.assign(batch.tokens.begin(), batch.tokens.end());
    {
      const Holding wte(m, pieces.wte);
      cpu_k::EmbeddingShardForward(s.input.data(), s.tokens.data(), m.P(co.wte), m.v0, m.Vl, N,
                                   C);
    }
    COHORT_TRY_VOID(m.tp->SumPartials(s.input.data(), BTC));
    const Holding wpe(m, pieces.wpe);
    cpu_k::PositionForward(s.input.data(), m.P(co.wpe), B, T, C);
  } else {
    std::memcpy(s.input.data(), input, BTC * sizeof(float));
  }
  const int L = static_cast<int>(co.blocks.size());
  for (int l = 0; l < L; ++l) {
    const ShardBlockOffsets& w = co.blocks[l];
    const float* residual = l == 0 ? s.input.data() : s.residual3.data() + (l - 1) * BTC;
    float* ln1 = s.ln1.data() + l * BTC;
    float* qkv = s.qkv.data() + l * static_cast<size_t>(N) * 3 * Cl;
    float* atty = s.atty.data() + l * static_cast<size_t>(N) * Cl;
    float* att = s.att.data() + l * att_size;
    float* residual2 = s.residual2.data() + l * BTC;
    float* ln2 = s.ln2.data() + l * BTC;
    float* fch = s.fch.data() + l * static_cast<size_t>(N) * 4 * Cl;
    float* fch_gelu = s.fch_gelu.data() + l * static_cast<size_t>(N) * 4 * Cl;
    float* residual3 = s.residual3.data() + l * BTC;

    const Holding block(m, {w.begin, w.end});
    cpu_k::LayerNormForward(ln1, s.ln1_mean.data() + l * N, s.ln1_rstd.data() + l * N, residual,
                            m.P(w.ln1_w), m.P(w.ln1_b), N, C);
    cpu_k::MatmulForward(qkv, ln1, m.P(w.qkv_w), m.P(w.qkv_b), N, C, 3 * Cl);
    cpu_k::AttentionForward(atty, att, qkv, B, T, Cl, NHl);
    // Row-parallel projection: partial sums over the heads of each rank, then the bias.
    COHORT_TRY_VOID(m.RowParallel(residual2, atty, m.P(w.attn_proj_w), m.P(w.attn_proj_b), N, Cl));
    cpu_k::ResidualForward(residual2, residual2, residual, BTC);
    cpu_k::LayerNormForward(ln2, s.ln2_mean.data() + l * N, s.ln2_rstd.data() + l * N, residual2,
                            m.P(w.ln2_w), m.P(w.ln2_b), N, C);
    cpu_k::MatmulForward(fch, ln2, m.P(w.fc_w), m.P(w.fc_b), N, C, 4 * Cl);
    cpu_k::GeluForward(fch_gelu, fch, static_cast<size_t>(N) * 4 * Cl);
    COHORT_TRY_VOID(
        m.RowParallel(residual3, fch_gelu, m.P(w.fc_proj_w), m.P(w.fc_proj_b), N, 4 * Cl));
    cpu_k::ResidualForward(residual3, residual3, residual2, BTC);
  }
  const float* last = L > 0 ? s.residual3.data() + (L - 1) * BTC : s.input.data();
  if (!spec.head) {
    std::memcpy(output, last, BTC * sizeof(float));
    return 0.0f;
  }
  {
    const Holding ln_f(m, pieces.ln_f);
    cpu_k::LayerNormForward(s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), last,
                            m.P(co.ln_f_w), m.P(co.ln_f_b), N, C);
  }
  {
    const Holding head(m, pieces.head_wte);
    cpu_k::MatmulForward(s.logits.data(), s.lnf.data(), m.P(co.head_wte), nullptr, N, C, m.Vl);
  }
  if (batch.targets.empty()) {
    s.targets.clear();
    return 0.0f;
  }
  s.targets.assign(batch.targets.begin(), batch.targets.end());
  return m.HeadLoss(s, co, N);
}

Result<void> GptShardModel::Backward(int chunk, int slot, float loss_scale, const float* doutput,
                                     float* dinput, const GradReadyFn& ready) {
  Impl& m = *impl_;
  const bool stashed = chunk >= 0 && chunk < num_chunks() && m.stashes[chunk].contains(slot);
  COHORT_TRY_VOID(ValidateShardBackward(m.layout, chunk, slot, stashed,
                                        stashed && m.stashes[chunk][slot]->loss_ready));
  Stash& s = *m.stashes[chunk][slot];
  const ShardChunkSpec& spec = m.layout.spec.chunks[chunk];
  const ShardChunkOffsets& co = m.layout.chunks[chunk];
  const int B = s.B, T = s.T, C = m.C, Cl = m.Cl, NHl = m.NHl, N = B * T;
  const size_t BTC = static_cast<size_t>(N) * C, att_size = static_cast<size_t>(B) * NHl * T * T;
  const size_t BTCl = static_cast<size_t>(N) * Cl;
  m.Grow(m.dresidual, BTC);
  m.Grow(m.dln, BTC);
  m.Grow(m.datty, BTCl);
  m.Grow(m.dqkv, 3 * BTCl);
  m.Grow(m.dfch, 4 * BTCl);
  m.Grow(m.dfch_gelu, 4 * BTCl);
  float* dres = m.dresidual.data();
  float* dln = m.dln.data();
  const int L = static_cast<int>(co.blocks.size());
  const float* last = L > 0 ? s.residual3.data() + (L - 1) * BTC : s.input.data();
  const ShardChunkPieces pieces = ShardParamPieces(m.layout, chunk);
  const ShardPiece ln_f_piece = pieces.ln_f;
  // With a sink, a chunk that holds both the embedding and the head (no other stage holds a
  // copy of wte) computes the head's wte gradient at the end, row chunk by row chunk from the
  // dlogits kept in the stash, together with the token embedding's rows: no piece is larger
  // than MaxShardGradPiece.
  const bool wte_in_rows = m.sink && spec.embedding && spec.head;

  if (spec.head) {
    const float scale = s.num_targets > 0 ? loss_scale / static_cast<float>(s.num_targets) : 0.0f;
    cpu_k::CrossEntropyShardBackwardInPlace(s.logits.data(), s.lse.data(), s.targets.data(), N,
                                            m.Vl, m.v0, m.V, scale);
    std::memset(dln, 0, BTC * sizeof(float));
    {
      const Holding head(m, pieces.head_wte);
      if (!wte_in_rows) m.Open(pieces.head_wte);
      cpu_k::MatmulBackward(dln, wte_in_rows ? nullptr : m.G(co.head_wte), nullptr,
                            s.logits.data(), s.lnf.data(), m.P(co.head_wte), N, C, m.Vl);
      // Without a sink, the head's wte is reported after ln_f (and on a chunk that also
      // holds the embedding, with it at the end).
      if (m.sink && !wte_in_rows) m.Close(pieces.head_wte, ready);
    }
    COHORT_TRY_VOID(m.tp->SumPartials(dln, BTC));
    std::memset(dres, 0, BTC * sizeof(float));
    {
      const Holding ln_f(m, pieces.ln_f);
      m.Open(ln_f_piece);
      cpu_k::LayerNormBackward(dres, m.G(co.ln_f_w), m.G(co.ln_f_b), dln, last, m.P(co.ln_f_w),
                               s.lnf_mean.data(), s.lnf_rstd.data(), N, C);
      m.Close(ln_f_piece, ready);
    }
    s.loss_ready = false;
    if (!m.sink && !spec.embedding) m.Close(pieces.head_wte, ready);
  } else {
    std::memcpy(dres, doutput, BTC * sizeof(float));
  }

  for (int l = L - 1; l >= 0; --l) {
    const ShardBlockOffsets& w = co.blocks[l];
    const float* residual = l == 0 ? s.input.data() : s.residual3.data() + (l - 1) * BTC;
    const float* ln1 = s.ln1.data() + l * BTC;
    const float* qkv = s.qkv.data() + l * 3 * BTCl;
    const float* atty = s.atty.data() + l * BTCl;
    const float* att = s.att.data() + l * att_size;
    const float* residual2 = s.residual2.data() + l * BTC;
    const float* ln2 = s.ln2.data() + l * BTC;
    const float* fch = s.fch.data() + l * 4 * BTCl;
    const float* fch_gelu = s.fch_gelu.data() + l * 4 * BTCl;
    const Holding block(m, {w.begin, w.end});
    m.Open({w.begin, w.end});

    // MLP: fc_proj row-parallel (its input gradient is local), fc column-parallel (its
    // input gradient is a partial sum: all-reduced before the replicated LayerNorm).
    std::memset(m.dfch_gelu.data(), 0, 4 * BTCl * sizeof(float));
    cpu_k::MatmulBackward(m.dfch_gelu.data(), m.G(w.fc_proj_w), m.G(w.fc_proj_b), dres, fch_gelu,
                          m.P(w.fc_proj_w), N, 4 * Cl, C);
    std::memset(m.dfch.data(), 0, 4 * BTCl * sizeof(float));
    cpu_k::GeluBackward(m.dfch.data(), fch, m.dfch_gelu.data(), 4 * BTCl);
    std::memset(dln, 0, BTC * sizeof(float));
    cpu_k::MatmulBackward(dln, m.G(w.fc_w), m.G(w.fc_b), m.dfch.data(), ln2, m.P(w.fc_w), N, C,
                          4 * Cl);
    COHORT_TRY_VOID(m.tp->SumPartials(dln, BTC));
    cpu_k::LayerNormBackward(dres, m.G(w.ln2_w), m.G(w.ln2_b), dln, residual2, m.P(w.ln2_w),
                             s.ln2_mean.data() + l * N, s.ln2_rstd.data() + l * N, N, C);
    // Attention: the same pattern over this rank's heads.
    std::memset(m.datty.data(), 0, BTCl * sizeof(float));
    cpu_k::MatmulBackward(m.datty.data(), m.G(w.attn_proj_w), m.G(w.attn_proj_b), dres, atty,
                          m.P(w.attn_proj_w), N, Cl, C);
    std::memset(m.dqkv.data(), 0, 3 * BTCl * sizeof(float));
    cpu_k::AttentionBackward(m.dqkv.data(), m.datty.data(), qkv, att, B, T, Cl, NHl);
    std::memset(dln, 0, BTC * sizeof(float));
    cpu_k::MatmulBackward(dln, m.G(w.qkv_w), m.G(w.qkv_b), m.dqkv.data(), ln1, m.P(w.qkv_w), N,
                          C, 3 * Cl);
    COHORT_TRY_VOID(m.tp->SumPartials(dln, BTC));
    cpu_k::LayerNormBackward(dres, m.G(w.ln1_w), m.G(w.ln1_b), dln, residual, m.P(w.ln1_w),
                             s.ln1_mean.data() + l * N, s.ln1_rstd.data() + l * N, N, C);
    m.Close({w.begin, w.end}, ready);
  }

  if (spec.embedding) {
    m.Open(pieces.wpe);
    cpu_k::PositionBackward(m.G(co.wpe), dres, B, T, C);
    m.Close(pieces.wpe, ready);
    if (!wte_in_rows) {
      m.Open(pieces.wte);
      cpu_k::EmbeddingShardBackward(m.G(co.wte), dres, s.tokens.data(), m.v0, m.Vl, N, C);
      m.Close(pieces.wte, ready);
    } else {
      const int rows = static_cast<int>(std::max<size_t>(1, MaxShardGradPiece(m.layout) / C));
      for (int hi = m.Vl; hi > 0;) {
        const int lo = std::max(0, hi - rows);
        const ShardPiece p{co.wte + static_cast<size_t>(lo) * C, co.wte + static_cast<size_t>(hi) * C};
        m.Open(p);
        cpu_k::MatmulBackwardWeightRows(m.G(p.begin), s.logits.data(), s.lnf.data(), N, C, m.Vl, lo,
                                        hi - lo);
        cpu_k::EmbeddingShardBackward(m.G(p.begin), dres, s.tokens.data(), m.v0 + lo, hi - lo, N,
                                      C);
        m.Close(p, ready);
        hi = lo;
      }
    }
  } else {
    std::memcpy(dinput, dres, BTC * sizeof(float));
  }
  Release(chunk, slot);
  return {};
}

Result<std::vector<float>> GptShardModel::Logits(int chunk, int slot, int position) {
  Impl& m = *impl_;
  const bool stashed = chunk >= 0 && chunk < num_chunks() && m.stashes[chunk].contains(slot);
  COHORT_TRY_VOID(ValidateShardLogits(m.layout, chunk, slot, stashed, position,
                                      stashed ? m.stashes[chunk][slot]->T : 0));
  Stash& s = *m.stashes[chunk][slot];
  std::vector<float> all(static_cast<size_t>(m.Vl) * m.tp->size());
  COHORT_TRY_VOID(m.tp->Gather(s.logits.data() + static_cast<size_t>(position) * m.Vl, m.Vl,
                               all.data()));
  all.resize(m.V);
  return all;
}

}  // namespace cohort::engine
