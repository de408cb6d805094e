// CudaInferenceModel (cuda_model.h): the CPU backend's step (cpu_model.cc) on the GPU.
// Everything is allocated once at creation: the bf16 weights, the cache, activations for
// max_step_tokens rows, the logits of up to kLogitRows rows (a step wanting more computes
// them kLogitRows at a time), and the row descriptors. A step copies its descriptors in,
// runs the layers on one stream and synchronises once, to copy the wanted logits out.
//
// The auto step budget (kAutoStepTokens): every position the KV cache holds (a step never
// has more new tokens than the running sequences can keep), at most kMaxAutoStepTokens,
// and no more rows than an eighth of the device memory free before the weights holds
// activations for. 64 prompts of 128 tokens then prefill in one step, not four.
#include "serve/cuda_model.h"

#include <algorithm>
#include <cstdint>

namespace cohort::serve {

int AutoCudaStepTokens(const engine::GptConfig& config, const KvCachePlan& cache, size_t free_device_bytes) {
  constexpr size_t kMaxAutoStepTokens = 16384;
  // Device bytes one row of a step needs: 15 bf16 activation vectors of n_embd, two float
  // statistics, five descriptors and the row's block table.
  const size_t per_row = 15 * static_cast<size_t>(config.n_embd) * 2 + 2 * sizeof(float) +
                         (5 + static_cast<size_t>(BlocksFor(config.max_seq_len, cache.block_size))) * sizeof(int32_t);
  const size_t positions = static_cast<size_t>(cache.num_blocks) * cache.block_size;
  return static_cast<int>(std::max<size_t>(1, std::min({positions, free_device_bytes / 8 / per_row, kMaxAutoStepTokens})));
}

}  // namespace cohort::serve

#if defined(COHORT_HAVE_CUDA_ENGINE)

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/cuda_status.h"
#include "engine/kernels/cuda/gelu.cuh"
#include "engine/kernels/cuda/kv_attention.cuh"
#include "engine/kernels/cuda/layernorm.cuh"
#include "engine/kernels/cuda/matmul.h"
#include "engine/kernels/cuda/residual.cuh"
#include "engine/model/gpt_layout.h"

namespace cohort::serve {

namespace k = ::cohort::engine::cuda;
using k::bf16;

namespace {

constexpr int kLogitRows = 256;

// Device allocations, freed together.
class DeviceArena {
 public:
  ~DeviceArena() {
    for (void* p : ptrs_) cudaFree(p);
  }
  template <typename T>
  Result<T*> Alloc(size_t count, const char* what) {
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(1, count * sizeof(T));
    const cudaError_t st = cudaMalloc(&p, bytes);
    if (st == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return Errorf(ErrorCode::kResourceExhausted, "out of device memory: {} needs {} bytes", what, bytes);
    }
    if (st != cudaSuccess) return std::unexpected(CudaError(st, "cudaMalloc", __FILE__, __LINE__));
    ptrs_.push_back(p);
    bytes_ += bytes;
    return static_cast<T*>(p);
  }
  size_t bytes() const { return bytes_; }

 private:
  std::vector<void*> ptrs_;
  size_t bytes_ = 0;
};

class CudaInferenceModel final : public InferenceModel {
 public:
  CudaInferenceModel(const engine::GptConfig& config, const KvCachePlan& cache, int max_step_tokens)
      : config_(config), layout_(engine::GptLayout::Build(config)), cache_(cache), max_step_tokens_(max_step_tokens) {}
  ~CudaInferenceModel() override {
    if (stream_) {
      cudaStreamSynchronize(stream_);
      matmul_.reset();
      cudaStreamDestroy(stream_);
    }
  }

  Result<void> Init(std::span<const float> params) {
    COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    matmul_ = std::make_unique<k::Matmul>(COHORT_TRY(k::Matmul::Create(stream_)));
    const size_t P = config_.num_parameters(), C = config_.n_embd, N = max_step_tokens_;
    const size_t Vp = config_.padded_vocab_size();
    params_ = COHORT_TRY(arena_.Alloc<bf16>(P, "the bf16 weights"));
    {
      float* staging = COHORT_TRY(arena_.Alloc<float>(P, "the weights' upload"));
      COHORT_CUDA_CHECK(cudaMemcpyAsync(staging, params.data(), P * sizeof(float), cudaMemcpyHostToDevice, stream_));
      k::ConvertToBf16(params_, staging, P, stream_);
      COHORT_CUDA_CHECK(cudaGetLastError());
      COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    layer_stride_ = static_cast<size_t>(cache_.num_blocks) * cache_.block_size * C;
    k_cache_ = COHORT_TRY(arena_.Alloc<bf16>(layer_stride_ * config_.n_layer, "the key cache"));
    v_cache_ = COHORT_TRY(arena_.Alloc<bf16>(layer_stride_ * config_.n_layer, "the value cache"));
    x_ = COHORT_TRY(arena_.Alloc<bf16>(N * C, "activations"));
    ln_ = COHORT_TRY(arena_.Alloc<bf16>(N * C, "activations"));
    tmp_ = COHORT_TRY(arena_.Alloc<bf16>(N * C, "activations"));
    atty_ = COHORT_TRY(arena_.Alloc<bf16>(N * C, "activations"));
    qkv_ = COHORT_TRY(arena_.Alloc<bf16>(N * 3 * C, "activations"));
    fch_ = COHORT_TRY(arena_.Alloc<bf16>(N * 4 * C, "activations"));
    fch_gelu_ = COHORT_TRY(arena_.Alloc<bf16>(N * 4 * C, "activations"));
    mean_ = COHORT_TRY(arena_.Alloc<float>(N, "statistics"));
    rstd_ = COHORT_TRY(arena_.Alloc<float>(N, "statistics"));
    logit_rows_ = std::min<size_t>(N, kLogitRows);
    logits_ = COHORT_TRY(arena_.Alloc<bf16>(logit_rows_ * Vp, "logits"));
    logits_f_ = COHORT_TRY(arena_.Alloc<float>(logit_rows_ * Vp, "logits"));
    max_tables_ = N * static_cast<size_t>(BlocksFor(config_.max_seq_len, cache_.block_size));
    ints_ = COHORT_TRY(arena_.Alloc<int32_t>(5 * N + max_tables_, "row descriptors"));
    return {};
  }

  const engine::GptConfig& config() const override { return config_; }
  std::string_view device() const override { return "cuda"; }
  const KvCachePlan& cache() const override { return cache_; }
  int max_step_tokens() const override { return max_step_tokens_; }

  Result<void> Step(std::span<const StepSequence> seqs, std::vector<float>& logits) override {
    const int N = COHORT_TRY(ValidateStep(config_, cache_, max_step_tokens_, seqs));
    const int C = config_.n_embd, NH = config_.n_head, L = config_.n_layer;
    const int V = config_.vocab_size, Vp = config_.padded_vocab_size();
    const size_t NC = static_cast<size_t>(N) * C;
    // Host descriptors: tokens, positions, slots, context, table offsets, then the tables.
    const size_t n = static_cast<size_t>(max_step_tokens_);
    host_.assign(5 * n, 0);
    std::vector<int32_t> tables;
    std::vector<int> want_rows;
    int row = 0, max_context = 1;
    for (const StepSequence& q : seqs) {
      const int offset = static_cast<int>(tables.size());
      const int blocks = BlocksFor(q.start + static_cast<int>(q.tokens.size()), cache_.block_size);
      tables.insert(tables.end(), q.blocks.begin(), q.blocks.begin() + blocks);
      for (size_t i = 0; i < q.tokens.size(); ++i, ++row) {
        const int pos = q.start + static_cast<int>(i);
        host_[row] = q.tokens[i];
        host_[n + row] = pos;
        host_[2 * n + row] = q.blocks[pos / cache_.block_size] * cache_.block_size + pos % cache_.block_size;
        host_[3 * n + row] = pos + 1;
        host_[4 * n + row] = offset;
        max_context = std::max(max_context, pos + 1);
      }
      if (q.all_logits) {
        for (int i = row - static_cast<int>(q.tokens.size()); i < row; ++i) want_rows.push_back(i);
      } else if (q.want_logits) {
        want_rows.push_back(row - 1);
      }
    }
    if (tables.size() > max_tables_) return FieldError("blocks", "{} block-table entries exceed {}", tables.size(), max_tables_);
    if (max_context > k::KvAttentionMaxContext()) {
      return FieldError("start", "context {} exceeds the kernel's {}", max_context, k::KvAttentionMaxContext());
    }
    COHORT_CUDA_CHECK(cudaMemcpyAsync(ints_, host_.data(), 5 * n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    COHORT_CUDA_CHECK(cudaMemcpyAsync(ints_ + 5 * n, tables.data(), tables.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, stream_));
    const int32_t* d_tokens = ints_;
    const int32_t* d_pos = ints_ + n;
    const int32_t* d_slots = ints_ + 2 * n;
    const int32_t* d_ctx = ints_ + 3 * n;
    const int32_t* d_toff = ints_ + 4 * n;
    const int32_t* d_tables = ints_ + 5 * n;

    k::EmbedAtPositions(x_, d_tokens, d_pos, W(layout_.wte), W(layout_.wpe), N, C, stream_);
    for (int l = 0; l < L; ++l) {
      const engine::LayerOffsets& w = layout_.layers[l];
      bf16* kc = k_cache_ + l * layer_stride_;
      bf16* vc = v_cache_ + l * layer_stride_;
      k::LayerNormForward(ln_, mean_, rstd_, x_, W(w.ln1_w), W(w.ln1_b), N, C, stream_);
      COHORT_TRY_VOID(matmul_->Forward(qkv_, ln_, W(w.qkv_w), W(w.qkv_b), N, C, 3 * C));
      k::KvCacheWrite(kc, vc, qkv_, d_slots, N, C, stream_);
      COHORT_CUDA_CHECK(k::KvAttentionForward(atty_, qkv_, kc, vc, d_ctx, d_toff, d_tables, N, max_context,
                                              cache_.block_size, C, NH, stream_));
      COHORT_TRY_VOID(matmul_->Forward(tmp_, atty_, W(w.attn_proj_w), W(w.attn_proj_b), N, C, C));
      k::ResidualForward(x_, x_, tmp_, NC, stream_);
      k::LayerNormForward(ln_, mean_, rstd_, x_, W(w.ln2_w), W(w.ln2_b), N, C, stream_);
      COHORT_TRY_VOID(matmul_->Forward(fch_, ln_, W(w.fc_w), W(w.fc_b), N, C, 4 * C));
      k::GeluForward(fch_gelu_, fch_, NC * 4, stream_);
      COHORT_TRY_VOID(matmul_->Forward(tmp_, fch_gelu_, W(w.fc_proj_w), W(w.fc_proj_b), N, 4 * C, C));
      k::ResidualForward(x_, x_, tmp_, NC, stream_);
    }
    const int M = static_cast<int>(want_rows.size());
    logits.resize(static_cast<size_t>(M) * V);
    // The wanted rows' logits, logit_rows_ at a time (the buffers are reused: the stream
    // orders each slice's copy out before the next slice overwrites them).
    for (int m0 = 0; m0 < M; m0 += static_cast<int>(logit_rows_)) {
      const int m = std::min(M - m0, static_cast<int>(logit_rows_));
      for (int i = 0; i < m; ++i) {
        COHORT_CUDA_CHECK(cudaMemcpyAsync(tmp_ + static_cast<size_t>(i) * C,
                                          x_ + static_cast<size_t>(want_rows[m0 + i]) * C, C * sizeof(bf16),
                                          cudaMemcpyDeviceToDevice, stream_));
      }
      k::LayerNormForward(ln_, mean_, rstd_, tmp_, W(layout_.ln_f_w), W(layout_.ln_f_b), m, C, stream_);
      COHORT_TRY_VOID(matmul_->Forward(logits_, ln_, W(layout_.wte), nullptr, m, C, Vp));
      k::ConvertToFloat(logits_f_, logits_, static_cast<size_t>(m) * Vp, stream_);
      COHORT_CUDA_CHECK(cudaMemcpy2DAsync(logits.data() + static_cast<size_t>(m0) * V, V * sizeof(float), logits_f_,
                                          Vp * sizeof(float), V * sizeof(float), m, cudaMemcpyDeviceToHost, stream_));
    }
    COHORT_CUDA_CHECK(cudaGetLastError());
    COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
  }

 private:
  const bf16* W(size_t offset) const { return params_ + offset; }

  engine::GptConfig config_;
  engine::GptLayout layout_;
  KvCachePlan cache_;
  int max_step_tokens_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<k::Matmul> matmul_;
  DeviceArena arena_;
  bf16* params_ = nullptr;
  size_t layer_stride_ = 0;
  bf16 *k_cache_ = nullptr, *v_cache_ = nullptr;
  bf16 *x_ = nullptr, *ln_ = nullptr, *tmp_ = nullptr, *atty_ = nullptr, *qkv_ = nullptr;
  bf16 *fch_ = nullptr, *fch_gelu_ = nullptr, *logits_ = nullptr;
  float *mean_ = nullptr, *rstd_ = nullptr, *logits_f_ = nullptr;
  int32_t* ints_ = nullptr;
  size_t max_tables_ = 0;
  size_t logit_rows_ = 0;
  std::vector<int32_t> host_;
};

}  // namespace

Result<std::unique_ptr<InferenceModel>> CreateCudaInferenceModel(const engine::GptConfig& config,
                                                                 std::span<const float> params,
                                                                 const KvCachePlan& cache,
                                                                 int max_step_tokens) {
  COHORT_TRY_VOID(config.Validate());
  if (params.size() != config.num_parameters()) {
    return FieldError("params", "expected {} floats for this config, got {}", config.num_parameters(), params.size());
  }
  if (config.n_embd % 8 != 0) return FieldError("n_embd", "must be a multiple of 8 on cuda, got {}", config.n_embd);
  if (const int hs = config.n_embd / config.n_head; hs > k::KvAttentionMaxHeadSize() || hs % 2 != 0) {
    return FieldError("n_head", "the head size n_embd / n_head = {} / {} = {} must be even and at most {} on cuda",
                      config.n_embd, config.n_head, hs, k::KvAttentionMaxHeadSize());
  }
  if (config.max_seq_len > k::KvAttentionMaxContext()) {
    return FieldError("max_seq_len", "at most {} on cuda, got {}", k::KvAttentionMaxContext(), config.max_seq_len);
  }
  if (max_step_tokens < 0) {
    return FieldError("--max-step-tokens", "must be >= 0 (0: auto), got {}", max_step_tokens);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return MakeError(ErrorCode::kUnavailable, "--device cuda: no CUDA device is available");
  }
  if (max_step_tokens == kAutoStepTokens) {
    size_t free_bytes = 0, total_bytes = 0;
    COHORT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    max_step_tokens = AutoCudaStepTokens(config, cache, free_bytes);
  }
  auto m = std::make_unique<CudaInferenceModel>(config, cache, max_step_tokens);
  COHORT_TRY_VOID(m->Init(params));
  return std::unique_ptr<InferenceModel>(std::move(m));
}

}  // namespace cohort::serve

#else  // no CUDA in this build

namespace cohort::serve {

Result<std::unique_ptr<InferenceModel>> CreateCudaInferenceModel(const engine::GptConfig&,
                                                                 std::span<const float>,
                                                                 const KvCachePlan&, int) {
  return MakeError(ErrorCode::kUnavailable, "--device cuda: this build of cohort has no CUDA support");
}

}  // namespace cohort::serve

#endif
