// CpuInferenceModel: the GPT forward pass of model/gpt.cc for new tokens only, with
// attention over the block cache (kernels/cpu/kv_attention.h) and the output head applied
// only to the rows whose logits are wanted. Its products are batch-invariant
// (kernels/cpu/invariant_matmul.h): a sequence's logits have the same bits whatever else
// is in the step, so continuous batching and a failover's prefill never change a token.
#include <algorithm>
#include <cstring>
#include <utility>

#include "engine/kernels/cpu/gelu.h"
#include "engine/kernels/cpu/invariant_matmul.h"
#include "engine/kernels/cpu/kv_attention.h"
#include "engine/kernels/cpu/layernorm.h"
#include "engine/kernels/cpu/residual.h"
#include "engine/model/gpt_layout.h"
#include "serve/inference_model.h"

namespace cohort::serve {

namespace cpu_k = ::cohort::engine::cpu;

Result<int> ValidateStep(const engine::GptConfig& config, const KvCachePlan& cache,
                         int max_step_tokens, std::span<const StepSequence> seqs) {
  int total = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const StepSequence& q = seqs[s];
    if (q.tokens.empty()) return FieldError("tokens", "sequence {} brings no tokens", s);
    if (q.start < 0 || q.start + static_cast<int64_t>(q.tokens.size()) > config.max_seq_len) {
      return FieldError("start", "sequence {}: positions {}..{} are past max_seq_len {}", s, q.start,
                        q.start + q.tokens.size() - 1, config.max_seq_len);
    }
    const int need = BlocksFor(q.start + static_cast<int>(q.tokens.size()), cache.block_size);
    if (static_cast<int>(q.blocks.size()) < need) {
      return FieldError("blocks", "sequence {} needs {} blocks, has {}", s, need, q.blocks.size());
    }
    for (int b : q.blocks) {
      if (b < 0 || b >= cache.num_blocks) {
        return FieldError("blocks", "sequence {}: block {} outside [0, {})", s, b, cache.num_blocks);
      }
    }
    for (int32_t t : q.tokens) {
      if (t < 0 || t >= config.vocab_size) {
        return FieldError("tokens", "sequence {}: id {} outside [0, vocab_size={})", s, t,
                          config.vocab_size);
      }
    }
    total += static_cast<int>(q.tokens.size());
  }
  if (total > max_step_tokens) {
    return FieldError("tokens", "a step of {} tokens is more than max_step_tokens {}", total,
                      max_step_tokens);
  }
  return total;
}

namespace {

class CpuInferenceModel final : public InferenceModel {
 public:
  CpuInferenceModel(const engine::GptConfig& config, std::vector<float> params,
                    const KvCachePlan& cache, int max_step_tokens)
      : config_(config),
        layout_(engine::GptLayout::Build(config)),
        params_(std::move(params)),
        cache_(cache),
        max_step_tokens_(max_step_tokens) {
    // The matrices packed for the batch-invariant product (invariant_matmul.h).
    const int C = config.n_embd;
    for (const engine::LayerOffsets& w : layout_.layers) {
      wt_.push_back({cpu_k::PackRowInvariantWeights(P(w.qkv_w), 3 * C, C),
                     cpu_k::PackRowInvariantWeights(P(w.attn_proj_w), C, C),
                     cpu_k::PackRowInvariantWeights(P(w.fc_w), 4 * C, C),
                     cpu_k::PackRowInvariantWeights(P(w.fc_proj_w), C, 4 * C)});
    }
    head_wt_ = cpu_k::PackRowInvariantWeights(P(layout_.wte), config.padded_vocab_size(), C);
    const size_t per_layer = static_cast<size_t>(cache.num_blocks) * cache.block_size * config.n_embd;
    k_.assign(per_layer * config.n_layer, 0.0f);
    v_.assign(per_layer * config.n_layer, 0.0f);
    layer_stride_ = per_layer;
  }

  const engine::GptConfig& config() const override { return config_; }
  std::string_view device() const override { return "cpu"; }
  const KvCachePlan& cache() const override { return cache_; }
  int max_step_tokens() const override { return max_step_tokens_; }

  Result<void> Step(std::span<const StepSequence> seqs, std::vector<float>& logits) override {
    const int N = COHORT_TRY(ValidateStep(config_, cache_, max_step_tokens_, seqs));
    const int C = config_.n_embd, NH = config_.n_head, L = config_.n_layer;
    const int Vp = config_.padded_vocab_size(), V = config_.vocab_size;
    const size_t NC = static_cast<size_t>(N) * C;
    Resize(N);

    // Embeddings, and the chunk table the attention kernel reads.
    std::vector<cpu_k::KvChunk> chunks;
    std::vector<int> want_rows;
    int row = 0;
    for (const StepSequence& q : seqs) {
      const int n = static_cast<int>(q.tokens.size());
      chunks.push_back({row, n, q.start, q.blocks.data()});
      for (int i = 0; i < n; ++i) {
        const float* te = P(layout_.wte) + static_cast<size_t>(q.tokens[i]) * C;
        const float* pe = P(layout_.wpe) + static_cast<size_t>(q.start + i) * C;
        float* x = x_.data() + static_cast<size_t>(row + i) * C;
        for (int c = 0; c < C; ++c) x[c] = te[c] + pe[c];
      }
      row += n;
      if (q.all_logits) {
        for (int i = row - n; i < row; ++i) want_rows.push_back(i);
      } else if (q.want_logits) {
        want_rows.push_back(row - 1);
      }
    }

    for (int l = 0; l < L; ++l) {
      const engine::LayerOffsets& w = layout_.layers[l];
      float* kc = k_.data() + l * layer_stride_;
      float* vc = v_.data() + l * layer_stride_;
      cpu_k::LayerNormForward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), P(w.ln1_w),
                              P(w.ln1_b), N, C);
      cpu_k::MatmulForwardRowInvariant(qkv_.data(), ln_.data(), wt_[l].qkv, P(w.qkv_b), N);
      cpu_k::KvCacheWrite(kc, vc, qkv_.data(), chunks.data(), static_cast<int>(chunks.size()),
                          cache_.block_size, C);
      cpu_k::KvAttentionForward(atty_.data(), qkv_.data(), kc, vc, chunks.data(),
                                static_cast<int>(chunks.size()), cache_.block_size, C, NH);
      cpu_k::MatmulForwardRowInvariant(tmp_.data(), atty_.data(), wt_[l].proj, P(w.attn_proj_b), N);
      cpu_k::ResidualForward(x_.data(), x_.data(), tmp_.data(), NC);
      cpu_k::LayerNormForward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), P(w.ln2_w),
                              P(w.ln2_b), N, C);
      cpu_k::MatmulForwardRowInvariant(fch_.data(), ln_.data(), wt_[l].fc, P(w.fc_b), N);
      cpu_k::GeluForward(fch_gelu_.data(), fch_.data(), NC * 4);
      cpu_k::MatmulForwardRowInvariant(tmp_.data(), fch_gelu_.data(), wt_[l].fc_proj, P(w.fc_proj_b), N);
      cpu_k::ResidualForward(x_.data(), x_.data(), tmp_.data(), NC);
    }

    // The head, for the wanted rows only.
    const int M = static_cast<int>(want_rows.size());
    logits.resize(static_cast<size_t>(M) * V);
    if (M == 0) return {};
    for (int i = 0; i < M; ++i) {
      std::memcpy(tmp_.data() + static_cast<size_t>(i) * C,
                  x_.data() + static_cast<size_t>(want_rows[i]) * C, sizeof(float) * C);
    }
    cpu_k::LayerNormForward(ln_.data(), mean_.data(), rstd_.data(), tmp_.data(), P(layout_.ln_f_w),
                            P(layout_.ln_f_b), M, C);
    head_.resize(static_cast<size_t>(M) * Vp);
    cpu_k::MatmulForwardRowInvariant(head_.data(), ln_.data(), head_wt_, nullptr, M);
    for (int i = 0; i < M; ++i) {
      std::memcpy(logits.data() + static_cast<size_t>(i) * V,
                  head_.data() + static_cast<size_t>(i) * Vp, sizeof(float) * V);
    }
    return {};
  }

 private:
  const float* P(size_t offset) const { return params_.data() + offset; }

  void Resize(int N) {
    const size_t C = config_.n_embd, n = static_cast<size_t>(N);
    if (x_.size() >= n * C) return;
    x_.resize(n * C);
    ln_.resize(n * C);
    tmp_.resize(n * C);
    atty_.resize(n * C);
    qkv_.resize(n * 3 * C);
    fch_.resize(n * 4 * C);
    fch_gelu_.resize(n * 4 * C);
    mean_.resize(n);
    rstd_.resize(n);
  }

  engine::GptConfig config_;
  engine::GptLayout layout_;
  std::vector<float> params_;
  KvCachePlan cache_;
  int max_step_tokens_;
  size_t layer_stride_ = 0;
  std::vector<float> k_, v_;  // (L, num_blocks, block_size, C) each
  // Each layer's matrices packed in panels (invariant_matmul.h), and the head's (wte): the
  // matrices are held twice, the row-major copy in params_ for the embedding and the checks.
  struct LayerWt {
    cpu_k::RowInvariantWeights qkv, proj, fc, fc_proj;
  };
  std::vector<LayerWt> wt_;
  cpu_k::RowInvariantWeights head_wt_;
  // Activations for up to the largest step seen (rows of the step).
  std::vector<float> x_, ln_, tmp_, atty_, qkv_, fch_, fch_gelu_, mean_, rstd_, head_;
};

}  // namespace

Result<std::unique_ptr<InferenceModel>> CreateCpuInferenceModel(const engine::GptConfig& config,
                                                                std::vector<float> params,
                                                                const KvCachePlan& cache,
                                                                int max_step_tokens) {
  COHORT_TRY_VOID(config.Validate());
  if (params.size() != config.num_parameters()) {
    return FieldError("params", "expected {} floats for this config, got {}",
                      config.num_parameters(), params.size());
  }
  if (max_step_tokens < 0) {
    return FieldError("--max-step-tokens", "must be >= 0 (0: auto), got {}", max_step_tokens);
  }
  if (max_step_tokens == kAutoStepTokens) max_step_tokens = kCpuAutoStepTokens;
  if (cache.num_blocks < 1) return FieldError("--kv-cache-mb", "the cache holds no block");
  return std::unique_ptr<InferenceModel>(
      new CpuInferenceModel(config, std::move(params), cache, max_step_tokens));
}

}  // namespace cohort::serve
