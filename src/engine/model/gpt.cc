// GptModel: parameter layout, activations and the layer-by-layer forward and backward
// (llm.c's structure: one kernel call per layer pass, activations kept for the backward).
#include "engine/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/kernels/cpu/attention.h"
#include "engine/kernels/cpu/cross_entropy.h"
#include "engine/kernels/cpu/encoder.h"
#include "engine/kernels/cpu/gelu.h"
#include "engine/kernels/cpu/layernorm.h"
#include "engine/kernels/cpu/matmul.h"
#include "engine/kernels/cpu/residual.h"
#include "engine/model/gpt_layout.h"
#include "engine/model/normal_rng.h"

namespace cohort::engine {

namespace cpu_k = ::cohort::engine::cpu;

int GptConfig::padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }

Result<void> GptConfig::Validate() const {
  const std::pair<const char*, int> fields[] = {{"vocab_size", vocab_size},
                                                {"max_seq_len", max_seq_len},
                                                {"n_layer", n_layer},
                                                {"n_head", n_head},
                                                {"n_embd", n_embd}};
  for (const auto& [name, value] : fields) {
    if (value < 1) return FieldError(name, "must be >= 1, got {}", value);
  }
  if (vocab_size > std::numeric_limits<int>::max() - 127) {
    return FieldError("vocab_size", "must be at most {}, got {}",
                      std::numeric_limits<int>::max() - 127, vocab_size);
  }
  if (n_embd % n_head != 0) {
    return FieldError("n_embd", "must be divisible by n_head ({}), got {}", n_head, n_embd);
  }
  // Every matrix dimension is an int for BLAS: 4C must fit.
  if (n_embd > std::numeric_limits<int>::max() / 4) {
    return FieldError("n_embd", "must be at most {}, got {}",
                      std::numeric_limits<int>::max() / 4, n_embd);
  }
  const long double C = n_embd;
  const long double count = static_cast<long double>(padded_vocab_size()) * C +
                            static_cast<long double>(max_seq_len) * C +
                            static_cast<long double>(n_layer) * (12.0L * C * C + 13.0L * C) +
                            2.0L * C;
  if (count > static_cast<long double>(std::numeric_limits<int64_t>::max() / 4)) {
    return FieldError("n_layer", "the parameter count ({:.3g}) does not fit in int64",
                      static_cast<double>(count));
  }
  return {};
}

size_t GptConfig::num_parameters() const {
  const size_t C = static_cast<size_t>(n_embd);
  return static_cast<size_t>(padded_vocab_size()) * C + static_cast<size_t>(max_seq_len) * C +
         static_cast<size_t>(n_layer) * (12 * C * C + 13 * C) + 2 * C;
}

double TrainingFlopsPerToken(const GptConfig& config, int seq_len) {
  // Non-embedding parameters (the blocks and ln_f) plus the output head as the unpadded
  // V × C product it computes; attention: 12 · L · C · T (PaLM appendix B).
  const double C = config.n_embd, L = config.n_layer;
  const double non_embedding = L * (12.0 * C * C + 13.0 * C) + 2.0 * C;
  const double head = static_cast<double>(config.vocab_size) * C;
  return 6.0 * (non_embedding + head) + 12.0 * L * C * seq_len;
}

// ---------------------------------------------------------------------------------------

struct GptModel::Impl {
  GptConfig config;
  int Vp = 0;
  GptLayout layout;
  std::vector<float> params;
  std::vector<float> grads;

  // Activations of the last Forward, sized for (B, T). Per-layer tensors are stored
  // layer-major: layer l's slice starts at l · (its per-layer size).
  int B = 0, T = 0;
  std::vector<float> encoded;                 // (B, T, C)
  std::vector<float> ln1, ln1_mean, ln1_rstd;  // (L, B, T, C), (L, B, T) ×2
  std::vector<float> qkv;                     // (L, B, T, 3C)
  std::vector<float> atty;                    // (L, B, T, C)
  std::vector<float> att;                     // (L, B, NH, T, T)
  std::vector<float> residual2;               // (L, B, T, C)
  std::vector<float> ln2, ln2_mean, ln2_rstd;  // (L, B, T, C), (L, B, T) ×2
  std::vector<float> fch, fch_gelu;           // (L, B, T, 4C) ×2
  std::vector<float> residual3;               // (L, B, T, C)
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // (B, T, C), (B, T) ×2
  std::vector<float> logits;                  // (B, T, Vp); dlogits after Backward
  std::vector<float> lse;                     // (B, T)
  std::vector<int32_t> tokens, targets;       // (B, T)
  int num_targets = 0;
  bool backward_ready = false;  // a Forward with targets ran and was not back-propagated

  // Gradients of activations for one layer (reused across layers).
  std::vector<float> dresidual, dln, datty, dqkv, dfch, dfch_gelu;

  void Allocate(int b, int t);
  // Parameters of the piece being computed: params() itself (origin 0), or a ParamSource's
  // gathered buffer holding [param_origin, ...) between Fetch and Drop.
  ParamSource* source = nullptr;
  const float* param_base = nullptr;
  size_t param_origin = 0;
  const float* P(size_t offset) const { return param_base + (offset - param_origin); }
  void Fetch(size_t offset, size_t count) {
    if (!source) {
      param_base = params.data();
      param_origin = 0;
      return;
    }
    param_base = source->Gather(offset, count);
    param_origin = offset;
  }
  void Drop(size_t offset, size_t count) {
    if (source) source->Release(offset, count);
  }
  // Gradients of the piece being written: grads() itself (origin 0), or a GradSink's buffer
  // holding [grad_origin, ...) during BackwardToSink.
  float* grad_base = nullptr;
  size_t grad_origin = 0;
  float* G(size_t offset) { return grad_base + (offset - grad_origin); }
};

namespace {

void Resize(std::vector<float>& v, size_t n) {
  if (v.size() != n) {
    v.clear();
    v.shrink_to_fit();
    v.resize(n);
  }
}

void Zero(std::vector<float>& v) { std::memset(v.data(), 0, v.size() * sizeof(float)); }

}  // namespace

void GptModel::Impl::Allocate(int b, int t) {
  if (b == B && t == T) return;
  const size_t L = config.n_layer, C = config.n_embd, NH = config.n_head;
  const size_t BT = static_cast<size_t>(b) * t;
  Resize(encoded, BT * C);
  Resize(ln1, L * BT * C);
  Resize(ln1_mean, L * BT);
  Resize(ln1_rstd, L * BT);
  Resize(qkv, L * BT * 3 * C);
  Resize(atty, L * BT * C);
  Resize(att, L * b * NH * t * t);
  Resize(residual2, L * BT * C);
  Resize(ln2, L * BT * C);
  Resize(ln2_mean, L * BT);
  Resize(ln2_rstd, L * BT);
  Resize(fch, L * BT * 4 * C);
  Resize(fch_gelu, L * BT * 4 * C);
  Resize(residual3, L * BT * C);
  Resize(lnf, BT * C);
  Resize(lnf_mean, BT);
  Resize(lnf_rstd, BT);
  Resize(logits, BT * Vp);
  Resize(lse, BT);
  Resize(dresidual, BT * C);
  Resize(dln, BT * C);
  Resize(datty, BT * C);
  Resize(dqkv, BT * 3 * C);
  Resize(dfch, BT * 4 * C);
  Resize(dfch_gelu, BT * 4 * C);
  B = b;
  T = t;
}

Result<GptModel> GptModel::Create(const GptConfig& config) {
  COHORT_TRY_VOID(config.Validate());
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->Vp = config.padded_vocab_size();
  impl->layout = GptLayout::Build(config);
  impl->params.assign(config.num_parameters(), 0.0f);
  impl->grads.assign(config.num_parameters(), 0.0f);
  return GptModel(std::move(impl));
}

Result<GptModel> GptModel::CreateUnallocated(const GptConfig& config) {
  COHORT_TRY_VOID(config.Validate());
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->Vp = config.padded_vocab_size();
  impl->layout = GptLayout::Build(config);
  return GptModel(std::move(impl));
}

GptModel::GptModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptModel::GptModel(GptModel&&) noexcept = default;
GptModel& GptModel::operator=(GptModel&&) noexcept = default;
GptModel::~GptModel() = default;

const GptConfig& GptModel::config() const { return impl_->config; }
const std::vector<ParamTensor>& GptModel::tensors() const { return impl_->layout.tensors; }

const ParamTensor* GptModel::FindTensor(std::string_view name) const {
  for (const ParamTensor& t : impl_->layout.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<float> GptModel::params() { return impl_->params; }
std::span<const float> GptModel::params() const { return impl_->params; }
std::span<float> GptModel::grads() { return impl_->grads; }

std::span<const float> GptModel::logits() const {
  return {impl_->logits.data(), static_cast<size_t>(impl_->B) * impl_->T * impl_->Vp};
}

void GptModel::ZeroGrad() {
  float* g = impl_->grads.data();
  const size_t n = impl_->grads.size();
#pragma omp parallel for simd schedule(static) if (n >= (size_t{1} << 16))
  for (size_t i = 0; i < n; ++i) g[i] = 0.0f;
}

void GenerateInitialParams(
    const GptConfig& c, uint64_t seed,
    const std::function<void(const ParamTensor&, std::span<const float>)>& sink) {
  const float std_base = 0.02f;
  const float std_proj = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  NormalRng rng(seed);
  std::vector<float> values;
  for (const ParamTensor& t : GptLayout::Build(c).tensors) {
    values.resize(t.numel);
    float* p = values.data();
    const std::string& n = t.name;
    auto ends_with = [&n](std::string_view s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with(".b")) {
      std::fill(p, p + t.numel, 0.0f);
    } else if (ends_with("ln1.w") || ends_with("ln2.w") || n == "ln_f.w") {
      std::fill(p, p + t.numel, 1.0f);
    } else if (n == "wte") {
      const size_t real = static_cast<size_t>(c.vocab_size) * c.n_embd;
      for (size_t i = 0; i < real; ++i) p[i] = std_base * rng.Next();
      std::fill(p + real, p + t.numel, 0.0f);
    } else {
      const float sd = ends_with("attn_proj.w") || ends_with("fc_proj.w") ? std_proj : std_base;
      for (size_t i = 0; i < t.numel; ++i) p[i] = sd * rng.Next();
    }
    sink(t, values);
  }
}

namespace {

// GenerateInitialParams' values one element at a time, in increasing order of the element's
// place in the logical buffer, seeking the generator over what is not asked for.
class InitialValueStream {
 public:
  InitialValueStream(const GptConfig& c, uint64_t seed)
      : c_(c), tensors_(GptLayout::Build(c).tensors), rng_(seed),
        std_proj_(0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer))) {
    Enter(0);
  }
  // The initial value of element i (i >= the previous call's).
  float At(size_t i) {
    while (i >= tensors_[ti_].offset + tensors_[ti_].numel) {
      rng_.Skip(random_ - drawn_);  // the rest of this tensor's draws
      Enter(ti_ + 1);
    }
    const size_t p = i - tensors_[ti_].offset;
    if (kind_ != kRandom) return kind_ == kOne ? 1.0f : 0.0f;
    if (p >= random_) return 0.0f;  // wte's padded rows
    rng_.Skip(p - drawn_);
    drawn_ = p + 1;
    return sd_ * rng_.Next();
  }

 private:
  enum Kind { kZero, kOne, kRandom };
  void Enter(size_t t) {
    ti_ = t;
    drawn_ = 0;
    const ParamTensor& pt = tensors_[t];
    const std::string& n = pt.name;
    auto ends_with = [&n](std::string_view s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    random_ = 0;
    if (ends_with(".b")) {
      kind_ = kZero;
    } else if (ends_with("ln1.w") || ends_with("ln2.w") || n == "ln_f.w") {
      kind_ = kOne;
    } else {
      kind_ = kRandom;
      random_ = n == "wte" ? static_cast<size_t>(c_.vocab_size) * c_.n_embd : pt.numel;
      sd_ = ends_with("attn_proj.w") || ends_with("fc_proj.w") ? std_proj_ : 0.02f;
    }
  }

  const GptConfig c_;
  const std::vector<ParamTensor> tensors_;
  NormalRng rng_;
  const float std_proj_;
  size_t ti_ = 0, drawn_ = 0, random_ = 0;
  Kind kind_ = kZero;
  float sd_ = 0.02f;
};

}  // namespace

size_t GenerateInitialRuns(const GptConfig& config, uint64_t seed,
                           std::span<const ParamRun> runs) {
  std::vector<ParamRun> sorted(runs.begin(), runs.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const ParamRun& a, const ParamRun& b) { return a.offset < b.offset; });
  // Overlapping runs (a tied copy held twice) go to later sweeps: each sweep's runs are
  // disjoint and in order, so one pass of the generator serves them.
  std::vector<std::vector<ParamRun>> sweeps;
  std::vector<size_t> ends;
  for (const ParamRun& r : sorted) {
    size_t s = 0;
    while (s < sweeps.size() && ends[s] > r.offset) ++s;
    if (s == sweeps.size()) {
      sweeps.emplace_back();
      ends.push_back(0);
    }
    sweeps[s].push_back(r);
    ends[s] = r.offset + r.count;
  }
  size_t written = 0;
  for (const auto& sweep : sweeps) {
    InitialValueStream stream(config, seed);
    for (const ParamRun& r : sweep) {
      for (size_t i = 0; i < r.count; ++i) r.out[i] = stream.At(r.offset + i);
      written += r.count;
    }
  }
  return written;
}

void GptModel::InitRandom(uint64_t seed) {
  Impl& m = *impl_;
  GenerateInitialParams(m.config, seed, [&m](const ParamTensor& t, std::span<const float> v) {
    std::copy(v.begin(), v.end(), m.params.data() + t.offset);
  });
}

Result<int> ValidateBatch(const GptConfig& cfg, std::span<const int32_t> tokens,
                          std::span<const int32_t> targets, int B, int T) {
  if (B < 1) return FieldError("B", "batch size must be >= 1, got {}", B);
  if (T < 1 || T > cfg.max_seq_len) {
    return FieldError("T", "sequence length must be in [1, max_seq_len={}], got {}",
                      cfg.max_seq_len, T);
  }
  const size_t BT = static_cast<size_t>(B) * T;
  if (BT > static_cast<size_t>(std::numeric_limits<int>::max() / 4)) {
    return FieldError("B", "B*T = {} tokens is too many for one Forward", BT);
  }
  if (tokens.size() != BT) {
    return FieldError("tokens", "expected B*T = {} ids, got {}", BT, tokens.size());
  }
  if (!targets.empty() && targets.size() != BT) {
    return FieldError("targets", "expected B*T = {} ids or none, got {}", BT, targets.size());
  }
  for (size_t i = 0; i < BT; ++i) {
    if (tokens[i] < 0 || tokens[i] >= cfg.vocab_size) {
      return FieldError("tokens", "id {} at position {} is outside [0, vocab_size={})",
                        tokens[i], i, cfg.vocab_size);
    }
  }
  int count = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] < -1 || targets[i] >= cfg.vocab_size) {
      return FieldError("targets", "id {} at position {} is outside [-1, vocab_size={})",
                        targets[i], i, cfg.vocab_size);
    }
    if (targets[i] >= 0) ++count;
  }
  return count;
}

Result<float> GptModel::Forward(std::span<const int32_t> tokens,
                                std::span<const int32_t> targets, int B, int T) {
  Impl& m = *impl_;
  const GptConfig& cfg = m.config;
  COHORT_TRY_VOID(ValidateBatch(cfg, tokens, targets, B, T));
  const size_t BT = static_cast<size_t>(B) * T;

  m.Allocate(B, T);
  m.tokens.assign(tokens.begin(), tokens.end());
  m.targets.assign(targets.begin(), targets.end());
  m.backward_ready = false;

  const int C = cfg.n_embd, NH = cfg.n_head, L = cfg.n_layer, N = static_cast<int>(BT);
  const GptLayout& lay = m.layout;
  const size_t BTC = BT * C, att_size = BT * NH * T;

  const size_t wte_count = static_cast<size_t>(m.Vp) * C, ln_f_count = 2 * static_cast<size_t>(C);
  const size_t wpe_count = static_cast<size_t>(cfg.max_seq_len) * C;
  if (!m.source) {
    m.Fetch(lay.wte, wte_count + wpe_count);  // params() itself
    cpu_k::EncoderForward(m.encoded.data(), m.tokens.data(), m.P(lay.wte), m.P(lay.wpe), B, T, C);
  } else {
    // From a source the embeddings are two pieces, wte then wpe, so no gathered buffer holds
    // both: the same bits (wte's row, then wpe's added).
    m.Fetch(lay.wte, wte_count);
    cpu_k::EmbeddingShardForward(m.encoded.data(), m.tokens.data(), m.P(lay.wte), 0, m.Vp, N, C);
    m.Drop(lay.wte, wte_count);
    m.Fetch(lay.wpe, wpe_count);
    cpu_k::PositionForward(m.encoded.data(), m.P(lay.wpe), B, T, C);
    m.Drop(lay.wpe, wpe_count);
  }
  for (int l = 0; l < L; ++l) {
    const LayerOffsets& w = lay.layers[l];
    m.Fetch(w.begin, w.end - w.begin);
    const float* residual = l == 0 ? m.encoded.data() : m.residual3.data() + (l - 1) * BTC;
    float* ln1 = m.ln1.data() + l * BTC;
    float* qkv = m.qkv.data() + l * BTC * 3;
    float* atty = m.atty.data() + l * BTC;
    float* att = m.att.data() + l * att_size;
    float* residual2 = m.residual2.data() + l * BTC;
    float* ln2 = m.ln2.data() + l * BTC;
    float* fch = m.fch.data() + l * BTC * 4;
    float* fch_gelu = m.fch_gelu.data() + l * BTC * 4;
    float* residual3 = m.residual3.data() + l * BTC;

    cpu_k::LayerNormForward(ln1, m.ln1_mean.data() + l * BT, m.ln1_rstd.data() + l * BT,
                            residual, m.P(w.ln1_w), m.P(w.ln1_b), N, C);
    cpu_k::MatmulForward(qkv, ln1, m.P(w.qkv_w), m.P(w.qkv_b), N, C, 3 * C);
    cpu_k::AttentionForward(atty, att, qkv, B, T, C, NH);
    cpu_k::MatmulForward(residual2, atty, m.P(w.attn_proj_w), m.P(w.attn_proj_b), N, C, C);
    cpu_k::ResidualForward(residual2, residual2, residual, BTC);
    cpu_k::LayerNormForward(ln2, m.ln2_mean.data() + l * BT, m.ln2_rstd.data() + l * BT,
                            residual2, m.P(w.ln2_w), m.P(w.ln2_b), N, C);
    cpu_k::MatmulForward(fch, ln2, m.P(w.fc_w), m.P(w.fc_b), N, C, 4 * C);
    cpu_k::GeluForward(fch_gelu, fch, BTC * 4);
    cpu_k::MatmulForward(residual3, fch_gelu, m.P(w.fc_proj_w), m.P(w.fc_proj_b), N, 4 * C, C);
    cpu_k::ResidualForward(residual3, residual3, residual2, BTC);
    m.Drop(w.begin, w.end - w.begin);
  }
  const float* last = m.residual3.data() + (L - 1) * BTC;
  m.Fetch(lay.ln_f_w, ln_f_count);
  cpu_k::LayerNormForward(m.lnf.data(), m.lnf_mean.data(), m.lnf_rstd.data(), last,
                          m.P(lay.ln_f_w), m.P(lay.ln_f_b), N, C);
  m.Drop(lay.ln_f_w, ln_f_count);
  m.Fetch(lay.wte, wte_count);
  cpu_k::MatmulForward(m.logits.data(), m.lnf.data(), m.P(lay.wte), nullptr, N, C, m.Vp);
  m.Drop(lay.wte, wte_count);

  if (m.targets.empty()) return 0.0f;
  int count = 0;
  const double total = cpu_k::CrossEntropyForward(m.lse.data(), m.logits.data(),
                                                  m.targets.data(), N, cfg.vocab_size, m.Vp,
                                                  &count);
  m.num_targets = count;
  m.backward_ready = true;
  return count > 0 ? static_cast<float>(total / count) : 0.0f;
}

size_t GptModel::MaxGradPiece(const GptConfig& c) {
  const size_t C = static_cast<size_t>(c.n_embd);
  return std::max({12 * C * C + 13 * C, static_cast<size_t>(c.max_seq_len) * C, 2 * C});
}

void GptModel::SetParamSource(ParamSource* source) { impl_->source = source; }

std::vector<size_t> GptModel::ParamPieceSizes(const GptConfig& c) {
  const size_t C = static_cast<size_t>(c.n_embd);
  return {static_cast<size_t>(c.padded_vocab_size()) * C, static_cast<size_t>(c.max_seq_len) * C,
          12 * C * C + 13 * C, 2 * C};
}

size_t GptModel::MaxParamPiece(const GptConfig& c) {
  const std::vector<size_t> sizes = ParamPieceSizes(c);
  return *std::max_element(sizes.begin(), sizes.end());
}

void GptModel::ReleaseParams() {
  impl_->params.clear();
  impl_->params.shrink_to_fit();
}

void GptModel::ReleaseGradients() {
  impl_->grads.clear();
  impl_->grads.shrink_to_fit();
}

Result<void> GptModel::Backward(float loss_scale, const GradReadyFn& ready) {
  if (impl_->grads.empty()) {
    return MakeError(ErrorCode::kFailedPrecondition,
                     "Backward: the gradient buffer was released (gradients go to a GradSink)");
  }
  return BackwardPass(loss_scale, ready, nullptr);
}

Result<void> GptModel::BackwardToSink(float loss_scale, GradSink& sink) {
  return BackwardPass(loss_scale, {}, &sink);
}

Result<void> GptModel::BackwardPass(float loss_scale, const GradReadyFn& ready, GradSink* sink) {
  Impl& m = *impl_;
  if (!m.backward_ready) {
    return MakeError(ErrorCode::kFailedPrecondition,
                     "Backward needs a Forward with targets first (each Forward can be "
                     "back-propagated once)");
  }
  m.backward_ready = false;
  const GptConfig& cfg = m.config;
  const GptLayout& lay = m.layout;
  const int B = m.B, T = m.T, C = cfg.n_embd, NH = cfg.n_head, L = cfg.n_layer;
  const int N = B * T;
  const size_t BT = N, BTC = BT * C, att_size = BT * NH * T;
  m.grad_base = m.grads.data();
  m.grad_origin = 0;
  // A piece of the gradient starts (a sink's zeroed buffer becomes G) and ends (handed back,
  // or reported final).
  auto open = [&m, sink](size_t offset, size_t count) {
    if (!sink) return;
    m.grad_base = sink->Acquire(offset, count);
    m.grad_origin = offset;
    std::memset(m.grad_base, 0, count * sizeof(float));
  };
  auto close = [&ready, sink](size_t offset, size_t count) {
    if (sink) {
      sink->Done(offset, count);
    } else if (ready) {
      ready(offset, count);
    }
  };

  // Head: dlogits (in place), then dlnf and wte's first gradient contribution (with a sink,
  // wte's gradient is computed last, chunk by chunk, from the dlogits kept in place).
  const float scale = m.num_targets > 0 ? loss_scale / static_cast<float>(m.num_targets) : 0.0f;
  cpu_k::CrossEntropyBackwardInPlace(m.logits.data(), m.lse.data(), m.targets.data(), N,
                                     cfg.vocab_size, m.Vp, scale);
  Zero(m.dln);
  const size_t wte_count = static_cast<size_t>(m.Vp) * C, ln_f_count = 2 * static_cast<size_t>(C);
  m.Fetch(lay.wte, wte_count);
  cpu_k::MatmulBackward(m.dln.data(), sink ? nullptr : m.G(lay.wte), nullptr, m.logits.data(),
                        m.lnf.data(), m.P(lay.wte), N, C, m.Vp);
  m.Drop(lay.wte, wte_count);
  Zero(m.dresidual);
  m.Fetch(lay.ln_f_w, ln_f_count);
  open(lay.ln_f_w, ln_f_count);
  cpu_k::LayerNormBackward(m.dresidual.data(), m.G(lay.ln_f_w), m.G(lay.ln_f_b), m.dln.data(),
                           m.residual3.data() + (L - 1) * BTC, m.P(lay.ln_f_w), m.lnf_mean.data(),
                           m.lnf_rstd.data(), N, C);
  m.Drop(lay.ln_f_w, ln_f_count);
  close(lay.ln_f_w, ln_f_count);

  // dresidual holds d(loss)/d(residual stream) and flows down through the skips; each
  // block adds its branch's contribution into it.
  for (int l = L - 1; l >= 0; --l) {
    const LayerOffsets& w = lay.layers[l];
    const float* residual = l == 0 ? m.encoded.data() : m.residual3.data() + (l - 1) * BTC;
    const float* ln1 = m.ln1.data() + l * BTC;
    const float* qkv = m.qkv.data() + l * BTC * 3;
    const float* atty = m.atty.data() + l * BTC;
    const float* att = m.att.data() + l * att_size;
    const float* residual2 = m.residual2.data() + l * BTC;
    const float* ln2 = m.ln2.data() + l * BTC;
    const float* fch = m.fch.data() + l * BTC * 4;
    const float* fch_gelu = m.fch_gelu.data() + l * BTC * 4;
    m.Fetch(w.begin, w.end - w.begin);
    open(w.begin, w.end - w.begin);

    // MLP branch: residual3 = residual2 + fc_proj(gelu(fc(ln2(residual2)))).
    Zero(m.dfch_gelu);
    cpu_k::MatmulBackward(m.dfch_gelu.data(), m.G(w.fc_proj_w), m.G(w.fc_proj_b),
                          m.dresidual.data(), fch_gelu, m.P(w.fc_proj_w), N, 4 * C, C);
    Zero(m.dfch);
    cpu_k::GeluBackward(m.dfch.data(), fch, m.dfch_gelu.data(), BTC * 4);
    Zero(m.dln);
    cpu_k::MatmulBackward(m.dln.data(), m.G(w.fc_w), m.G(w.fc_b), m.dfch.data(), ln2,
                          m.P(w.fc_w), N, C, 4 * C);
    cpu_k::LayerNormBackward(m.dresidual.data(), m.G(w.ln2_w), m.G(w.ln2_b), m.dln.data(),
                             residual2, m.P(w.ln2_w), m.ln2_mean.data() + l * BT,
                             m.ln2_rstd.data() + l * BT, N, C);
    // Attention branch: residual2 = residual + attn_proj(attention(qkv(ln1(residual)))).
    Zero(m.datty);
    cpu_k::MatmulBackward(m.datty.data(), m.G(w.attn_proj_w), m.G(w.attn_proj_b),
                          m.dresidual.data(), atty, m.P(w.attn_proj_w), N, C, C);
    Zero(m.dqkv);
    cpu_k::AttentionBackward(m.dqkv.data(), m.datty.data(), qkv, att, B, T, C, NH);
    Zero(m.dln);
    cpu_k::MatmulBackward(m.dln.data(), m.G(w.qkv_w), m.G(w.qkv_b), m.dqkv.data(), ln1,
                          m.P(w.qkv_w), N, C, 3 * C);
    cpu_k::LayerNormBackward(m.dresidual.data(), m.G(w.ln1_w), m.G(w.ln1_b), m.dln.data(),
                             residual, m.P(w.ln1_w), m.ln1_mean.data() + l * BT,
                             m.ln1_rstd.data() + l * BT, N, C);
    m.Drop(w.begin, w.end - w.begin);
    close(w.begin, w.end - w.begin);
  }

  const size_t wpe_count = static_cast<size_t>(cfg.max_seq_len) * C;
  if (!sink) {
    cpu_k::EncoderBackward(m.G(lay.wte), m.G(lay.wpe), m.dresidual.data(), m.tokens.data(), B,
                           T, C);
    close(lay.wpe, wpe_count);
    close(lay.wte, static_cast<size_t>(m.Vp) * C);
    return {};
  }
  open(lay.wpe, wpe_count);
  cpu_k::PositionBackward(m.G(lay.wpe), m.dresidual.data(), B, T, C);
  close(lay.wpe, wpe_count);
  // wte in chunks of rows that fit a piece, from the last: the head's dlogitsᵀ · lnf, then
  // the token embedding's rows.
  const int rows = static_cast<int>(std::max<size_t>(1, MaxGradPiece(cfg) / C));
  for (int hi = m.Vp; hi > 0;) {
    const int lo = std::max(0, hi - rows);
    const size_t offset = lay.wte + static_cast<size_t>(lo) * C;
    const size_t count = static_cast<size_t>(hi - lo) * C;
    open(offset, count);
    cpu_k::MatmulBackwardWeightRows(m.G(offset), m.logits.data(), m.lnf.data(), N, C, m.Vp, lo,
                                    hi - lo);
    cpu_k::EmbeddingShardBackward(m.G(offset), m.dresidual.data(), m.tokens.data(), lo, hi - lo,
                                  N, C);
    close(offset, count);
    hi = lo;
  }
  return {};
}

}  // namespace cohort::engine
