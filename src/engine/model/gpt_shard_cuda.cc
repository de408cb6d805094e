// GptShardCudaModel: GptCudaModel's layer loop (gpt_cuda.cc) over one rank's chunks and its
// slice of each block, with the tensor group's collectives where GptShardModel (gpt_shard.cc)
// puts them.
#include "engine/model/gpt_shard_cuda.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/cuda_status.h"
#include "engine/kernels/cuda/attention.cuh"
#include "engine/kernels/cuda/cross_entropy.cuh"
#include "engine/kernels/cuda/encoder.cuh"
#include "engine/kernels/cuda/layernorm.cuh"
#include "engine/kernels/cuda/matmul.h"
#include "engine/kernels/cuda/residual.cuh"
#include "engine/model/cuda_arena.h"

namespace cohort::engine {

namespace k = ::cohort::engine::cuda;
using k::bf16;

namespace {

// One chunk's activations for one micro-batch, in one device allocation (per-block tensors
// layer-major, as gpt_shard.cc).
struct Stash {
  int B = 0, T = 0;
  char* arena = nullptr;
  size_t bytes = 0;
  int32_t* tokens = nullptr;   // (N)
  int32_t* targets = nullptr;  // (N)
  bf16* input = nullptr;       // (N, C): the chunk's input (or the embedding)
  bf16* ln1 = nullptr;         // (L, N, C)
  float* ln1_mean = nullptr;   // (L, N)
  float* ln1_rstd = nullptr;   // (L, N)
  bf16* qkv = nullptr;         // (L, N, 3Cl)
  bf16* atty = nullptr;        // (L, N, Cl)
  float* att_lse = nullptr;    // (L, N·NHl)
  bf16* residual2 = nullptr;   // (L, N, C)
  bf16* ln2 = nullptr;         // (L, N, C)
  float* ln2_mean = nullptr;   // (L, N)
  float* ln2_rstd = nullptr;   // (L, N)
  bf16* fch = nullptr;         // (L, N, 4Cl)
  bf16* fch_gelu = nullptr;    // (L, N, 4Cl)
  bf16* residual3 = nullptr;   // (L, N, C)
  bf16* lnf = nullptr;         // head: (N, C)
  float* lnf_mean = nullptr;   // head: (N)
  float* lnf_rstd = nullptr;   // head: (N)
  bf16* logits = nullptr;      // head: (N, Vl); dlogits after Backward
  float* lse = nullptr;        // head: (N), the group's log-sum-exp
  int num_targets = 0;
  bool loss_ready = false;

  ~Stash() {
    if (arena != nullptr) (void)cudaFree(arena);
  }
};

// Carves a stash for (B, T) out of `base` (null: counts only). Returns the bytes.
size_t CarveStash(Stash& s, char* base, int B, int T, int L, int C, int Cl, int NHl, int Vl,
                  bool head) {
  const size_t N = static_cast<size_t>(B) * T;
  Carver cv(base);
  s.tokens = cv.Take<int32_t>(N, nullptr);
  s.targets = cv.Take<int32_t>(N, nullptr);
  s.input = cv.Take<bf16>(N * C, nullptr);
  s.ln1 = cv.Take<bf16>(L * N * C, nullptr);
  s.ln1_mean = cv.Take<float>(L * N, nullptr);
  s.ln1_rstd = cv.Take<float>(L * N, nullptr);
  s.qkv = cv.Take<bf16>(L * N * 3 * Cl, nullptr);
  s.atty = cv.Take<bf16>(L * N * Cl, nullptr);
  s.att_lse = cv.Take<float>(L * N * NHl, nullptr);
  s.residual2 = cv.Take<bf16>(L * N * C, nullptr);
  s.ln2 = cv.Take<bf16>(L * N * C, nullptr);
  s.ln2_mean = cv.Take<float>(L * N, nullptr);
  s.ln2_rstd = cv.Take<float>(L * N, nullptr);
  s.fch = cv.Take<bf16>(L * N * 4 * Cl, nullptr);
  s.fch_gelu = cv.Take<bf16>(L * N * 4 * Cl, nullptr);
  s.residual3 = cv.Take<bf16>(L * N * C, nullptr);
  if (head) {
    s.lnf = cv.Take<bf16>(N * C, nullptr);
    s.lnf_mean = cv.Take<float>(N, nullptr);
    s.lnf_rstd = cv.Take<float>(N, nullptr);
    s.logits = cv.Take<bf16>(N * Vl, nullptr);
    s.lse = cv.Take<float>(N, nullptr);
  }
  return std::max<size_t>(cv.total(), kArenaAlign);
}

// A device buffer that grows (never shrinks) to the largest size asked for.
class Growable {
 public:
  ~Growable() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  // At least `bytes`; the old contents are not kept. The caller has synchronised the stream.
  Result<char*> Reserve(size_t bytes, const char* what, int device) {
    if (bytes <= size_) return ptr_;
    if (ptr_ != nullptr) COHORT_CUDA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    size_ = 0;
    ptr_ = static_cast<char*>(COHORT_TRY(DeviceAlloc(bytes, what, device)));
    size_ = bytes;
    return ptr_;
  }
  char* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  char* ptr_ = nullptr;
  size_t size_ = 0;
};

// A piece of the gradient (ShardGradPieces) and the event recorded behind its last writer.
struct PieceEvent {
  ShardGradPiece piece;
  cudaEvent_t event = nullptr;
};

}  // namespace

struct GptShardCudaModel::Impl {
  GptShardLayout layout;
  TensorParallelGroup* tp = nullptr;
  int C = 0, Cl = 0, NHl = 0, Vl = 0, V = 0;
  int64_t v0 = 0;
  int device = 0;
  cudaStream_t stream = nullptr;
  std::optional<k::Matmul> matmul;
  char* arena = nullptr;  // params (f32), params_bf16 (unless ZeRO-3), grads (f32)
  float* params = nullptr;
  bf16* params_bf16 = nullptr;
  // ZeRO-3: where the pieces come from, and the one held (its device buffer starts at
  // element held_lo of the shard buffer).
  CudaParamSource* source = nullptr;
  const bf16* held = nullptr;
  size_t held_lo = 0;
  float* grads = nullptr;
  std::vector<std::map<int, std::unique_ptr<Stash>>> stashes;
  std::vector<std::vector<std::unique_ptr<Stash>>> spare;
  size_t bytes_now = 0, bytes_peak = 0;
  // The temporaries of one micro-batch at a time, grown to the largest B·T seen:
  // dresidual (N, C) bf16, dsmall (N, C) bf16, dbig (N, 4Cl) bf16, fsum float (N·C, at
  // least 3N: the row statistics), the kernels' scratch, the gathered logits row.
  Growable dresidual, dsmall, dbig, fsum, scratch, gathered;
  int temp_n = 0;          // the B·T the temporaries hold
  std::vector<float> host_stats;  // row max, Σ e^{x − max}, target logit (3N)
  std::vector<float> host_lse;
  // Per chunk, its gradient's pieces in Backward's order (fixed at Create, so that
  // WaitGradsReady may read them from another thread).
  std::vector<std::vector<PieceEvent>> pieces;
  cudaEvent_t message_read = nullptr;  // behind the conversion of a Backward's doutput

  ~Impl() {
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    for (auto& chunk : pieces) {
      for (PieceEvent& p : chunk) {
        if (p.event != nullptr) (void)cudaEventDestroy(p.event);
      }
    }
    if (message_read != nullptr) (void)cudaEventDestroy(message_read);
    stashes.clear();
    spare.clear();
    matmul.reset();
    if (arena != nullptr) (void)cudaFree(arena);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  Result<void> UseDevice() {
    COHORT_CUDA_CHECK(cudaSetDevice(device));
    return {};
  }
  Result<void> Sync() {
    COHORT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return {};
  }
  // Records piece `index` of `chunk`'s gradient as queued so far and reports it.
  Result<void> Notify(int chunk, size_t index, const GradReadyFn& ready) {
    if (!ready) return {};
    const PieceEvent& p = pieces[static_cast<size_t>(chunk)][index];
    COHORT_CUDA_CHECK(cudaEventRecord(p.event, stream));
    ready(p.piece.offset, p.piece.count);
    return {};
  }
  const bf16* Pb(size_t off) const {
    return source != nullptr ? held + (off - held_lo) : params_bf16 + off;
  }
  // ZeRO-3: starts pass `pass` (ParamPasses) of the source; Hold asks for piece `p` (the
  // kernels Pb feeds read it until Drop), Drop says the kernels queued so far were its last
  // readers. Nothing when the model holds its parameters.
  Result<void> BeginPass(size_t pass) {
    if (params_bf16 != nullptr) return {};
    if (source == nullptr) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "the shard model holds no parameters and has no parameter source");
    }
    return source->BeginPass(pass);
  }
  Result<void> Hold(const ParamPiece& p) {
    if (source == nullptr) return {};
    held = COHORT_TRY(source->Gather(p.offset, p.count));
    held_lo = p.offset;
    return {};
  }
  Result<void> Drop(const ParamPiece& p) {
    if (source == nullptr) return {};
    held = nullptr;
    return source->Release(p.offset, p.count);
  }
  Result<void> NeedParams() const {
    if (params != nullptr) return {};
    return MakeError(ErrorCode::kFailedPrecondition,
                     "the shard model holds no parameters (ZeRO-3: its parameter source does)");
  }
  float* G(size_t off) const { return grads + off; }
  bf16* Dres() const { return reinterpret_cast<bf16*>(dresidual.get()); }
  bf16* Dsmall() const { return reinterpret_cast<bf16*>(dsmall.get()); }
  bf16* Dbig() const { return reinterpret_cast<bf16*>(dbig.get()); }
  float* Fsum() const { return reinterpret_cast<float*>(fsum.get()); }

  Result<void> ReserveTemporaries(int B, int T);
  Result<Stash*> NewStash(int chunk, int slot, int B, int T);
  // `targets`: the micro-batch's host copy of what s.targets holds.
  Result<float> HeadLoss(Stash& s, int N, const int32_t* targets);

  // Sums a bf16 (N, C) partial over the tensor group in float32 (Megatron's f in the
  // backward); a group of one only counts the call.
  Result<void> SumBf16(bf16* data, size_t n) {
    if (tp->size() == 1) return tp->SumPartials(Fsum(), 0);
    k::ConvertToFloat(Fsum(), data, n, stream);
    COHORT_CUDA_CHECK(cudaGetLastError());  // ConvertToFloat (partial)
    COHORT_TRY_VOID(Sync());
    COHORT_TRY_VOID(tp->SumPartials(Fsum(), n));
    k::ConvertToBf16(data, Fsum(), n, stream);
    return {};
  }
  // out (N, C) = residual + (inp (N, Kl) · wᵀ summed over the group + bias): a row-parallel
  // layer and its skip connection (out may be written before residual is read only when
  // they differ; they always do here).
  Result<void> RowParallel(bf16* out, const bf16* inp, const bf16* w, const bf16* bias,
                           const bf16* residual, int N, int Kl) {
    k::Matmul& mm = *matmul;
    const size_t NC = static_cast<size_t>(N) * C;
    if (tp->size() == 1) {
      COHORT_TRY_VOID(mm.Forward(out, inp, w, bias, N, Kl, C));
      k::ResidualForward(out, out, residual, NC, stream);
      return tp->SumPartials(Fsum(), 0);  // counted: one all-reduce per block half
    }
    COHORT_TRY_VOID(mm.Forward(out, inp, w, nullptr, N, Kl, C));
    k::ConvertToFloat(Fsum(), out, NC, stream);
    COHORT_CUDA_CHECK(cudaGetLastError());  // row-parallel partial
    COHORT_TRY_VOID(Sync());
    COHORT_TRY_VOID(tp->SumPartials(Fsum(), NC));
    k::BiasResidualFromSum(out, Fsum(), bias, residual, N, C, stream);
    return {};
  }
};

Result<void> GptShardCudaModel::Impl::ReserveTemporaries(int B, int T) {
  const int N = B * T;
  if (N <= temp_n) return {};
  COHORT_TRY_VOID(Sync());
  const size_t n = static_cast<size_t>(N);
  COHORT_TRY(dresidual.Reserve(n * C * sizeof(bf16), "the shard's backward temporaries", device));
  COHORT_TRY(dsmall.Reserve(n * C * sizeof(bf16), "the shard's backward temporaries", device));
  COHORT_TRY(dbig.Reserve(n * 4 * Cl * sizeof(bf16), "the shard's backward temporaries", device));
  COHORT_TRY(fsum.Reserve(std::max(n * C, 3 * n) * sizeof(float), "the shard's partial sums",
                          device));
  const size_t scratch_bytes =
      std::max({k::EncoderBackwardScratchBytes(B, T), k::LayerNormBackwardScratchBytes(N, C),
                k::AttentionBackwardScratchBytes(B, T, Cl, NHl), size_t{1}});
  COHORT_TRY(scratch.Reserve(scratch_bytes, "the kernels' scratch", device));
  COHORT_CUDA_CHECK(cudaGetLastError());  // the encoder's sort size query
  temp_n = N;
  return {};
}

Result<Stash*> GptShardCudaModel::Impl::NewStash(int chunk, int slot, int B, int T) {
  std::unique_ptr<Stash> s;
  auto& pool = spare[chunk];
  const ShardChunkSpec& spec = layout.spec.chunks[chunk];
  const int L = spec.end_layer - spec.begin_layer;
  Stash sizing;
  const size_t need = CarveStash(sizing, nullptr, B, T, L, C, Cl, NHl, Vl, spec.head);
  // The smallest spare that holds this shape, carved anew: sampling grows T by a token at
  // each call, and a device allocation for each token would cost more than the token.
  auto best = pool.end();
  for (auto it = pool.begin(); it != pool.end(); ++it) {
    if ((*it)->bytes >= need && (best == pool.end() || (*it)->bytes < (*best)->bytes)) best = it;
  }
  if (best != pool.end()) {
    s = std::move(*best);
    pool.erase(best);
  } else {
    if (!pool.empty()) {
      COHORT_TRY_VOID(Sync());  // none large enough: let one go once nothing uses it
      pool.pop_back();
    }
    s = std::make_unique<Stash>();
    s->arena = static_cast<char*>(COHORT_TRY(DeviceAlloc(
        need, fmt::format("the activations of chunk {} for a {} x {} micro-batch", chunk, B, T),
        device)));
    s->bytes = need;  // the allocation's size, whatever shape it holds later
  }
  if (s->B != B || s->T != T) CarveStash(*s, s->arena, B, T, L, C, Cl, NHl, Vl, spec.head);
  s->B = B;
  s->T = T;
  s->loss_ready = false;
  s->num_targets = 0;
  bytes_now += s->bytes;
  bytes_peak = std::max(bytes_peak, bytes_now);
  Stash* ref = s.get();
  stashes[chunk][slot] = std::move(s);
  return ref;
}

GptShardCudaModel::GptShardCudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptShardCudaModel::~GptShardCudaModel() = default;

Result<std::unique_ptr<GptShardCudaModel>> GptShardCudaModel::Create(const ShardSpec& spec,
                                                                     TensorParallelGroup& tp,
                                                                     bool hold_params) {
  COHORT_TRY_VOID(ValidateShardSpec(spec, tp));
  const GptConfig& c = spec.config;
  COHORT_TRY_VOID(CheckCudaChannels(c, c.n_embd / spec.tensor_size));
  COHORT_TRY(CudaDeviceCount());
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.layout = GptShardLayout::Build(spec);
  m.tp = &tp;
  m.C = c.n_embd;
  m.Cl = c.n_embd / spec.tensor_size;
  m.NHl = c.n_head / spec.tensor_size;
  m.Vl = c.padded_vocab_size() / spec.tensor_size;
  m.V = c.vocab_size;
  m.v0 = m.layout.vocab_begin;
  m.stashes.resize(spec.chunks.size());
  m.spare.resize(spec.chunks.size());
  COHORT_CUDA_CHECK(cudaGetDevice(&m.device));
  COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  const size_t n = m.layout.total;
  auto carve = [&](Carver& cv) {
    if (hold_params) {
      m.params = cv.Take<float>(n, nullptr);
      m.params_bf16 = cv.Take<bf16>(n, nullptr);
    }
    m.grads = cv.Take<float>(n, nullptr);
  };
  Carver sizing(nullptr);
  carve(sizing);
  m.arena = static_cast<char*>(COHORT_TRY(DeviceAlloc(
      sizing.total(),
      hold_params ? fmt::format("the model shard ({:.1f}M parameters: float32 master copy, bf16 "
                                "copy, float32 gradients)",
                                n / 1e6)
                  : fmt::format("the model shard's float32 gradients ({:.1f}M)", n / 1e6),
      m.device)));
  Carver cv(m.arena);
  carve(cv);
  m.matmul.emplace(COHORT_TRY(k::Matmul::Create(m.stream)));
  m.pieces.resize(spec.chunks.size());
  for (size_t c = 0; c < spec.chunks.size(); ++c) {
    for (const ShardGradPiece& piece : ShardGradPieces(m.layout, static_cast<int>(c))) {
      PieceEvent p{piece, nullptr};
      COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&p.event, cudaEventDisableTiming));
      m.pieces[c].push_back(p);
    }
  }
  COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&m.message_read, cudaEventDisableTiming));
  COHORT_CUDA_CHECK(cudaMemsetAsync(m.arena, 0, sizing.total(), m.stream));
  COHORT_TRY_VOID(m.Sync());
  return std::unique_ptr<GptShardCudaModel>(new GptShardCudaModel(std::move(impl)));
}

std::vector<std::vector<ParamPiece>> GptShardCudaModel::ParamPasses(
    const GptShardLayout& layout) {
  auto piece = [](const ShardPiece& p) { return ParamPiece{p.begin, p.size()}; };
  std::vector<std::vector<ParamPiece>> passes;
  for (size_t c = 0; c < layout.chunks.size(); ++c) {
    const ShardChunkSpec& spec = layout.spec.chunks[c];
    const ShardChunkPieces p = ShardParamPieces(layout, static_cast<int>(c));
    const std::vector<ShardBlockOffsets>& blocks = layout.chunks[c].blocks;
    std::vector<ParamPiece> forward, backward;
    if (spec.embedding) forward = {piece(p.wte), piece(p.wpe)};
    for (const ShardBlockOffsets& w : blocks) forward.push_back({w.begin, w.end - w.begin});
    if (spec.head) {
      forward.push_back(piece(p.ln_f));
      forward.push_back(piece(p.head_wte));
      backward = {piece(p.head_wte), piece(p.ln_f)};
    }
    for (auto w = blocks.rbegin(); w != blocks.rend(); ++w) {
      backward.push_back({w->begin, w->end - w->begin});
    }
    passes.push_back(std::move(forward));
    passes.push_back(std::move(backward));
  }
  return passes;
}

void GptShardCudaModel::SetParamSource(CudaParamSource* source) {
  // A model with its parameters reads them (the source would serve nothing).
  if (impl_->params == nullptr) impl_->source = source;
}
bool GptShardCudaModel::holds_params() const { return impl_->params != nullptr; }

const GptShardLayout& GptShardCudaModel::layout() const { return impl_->layout; }
int GptShardCudaModel::num_chunks() const {
  return static_cast<int>(impl_->layout.chunks.size());
}
int GptShardCudaModel::device() const { return impl_->device; }
cudaStream_t GptShardCudaModel::stream() { return impl_->stream; }
std::span<float> GptShardCudaModel::params_device() {
  if (impl_->params == nullptr) return {};
  return {impl_->params, impl_->layout.total};
}
std::span<float> GptShardCudaModel::grads_device() { return {impl_->grads, impl_->layout.total}; }
bf16* GptShardCudaModel::params_bf16_device() { return impl_->params_bf16; }
size_t GptShardCudaModel::activation_bytes() const { return impl_->bytes_now; }
size_t GptShardCudaModel::peak_activation_bytes() const { return impl_->bytes_peak; }
void GptShardCudaModel::ResetPeak() { impl_->bytes_peak = impl_->bytes_now; }

Result<void> GptShardCudaModel::CopyParamsFromHost(std::span<const float> params) {
  Impl& m = *impl_;
  COHORT_TRY_VOID(m.NeedParams());
  if (params.size() != m.layout.total) {
    return FieldError("params", "has {} values, the shard {}", params.size(), m.layout.total);
  }
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_CUDA_CHECK(cudaMemcpyAsync(m.params, params.data(), params.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, m.stream));
  return ParamsWritten();
}

Result<void> GptShardCudaModel::ParamsWritten() {
  Impl& m = *impl_;
  COHORT_TRY_VOID(m.NeedParams());
  COHORT_TRY_VOID(m.UseDevice());
  k::ConvertToBf16(m.params_bf16, m.params, m.layout.total, m.stream);
  COHORT_CUDA_CHECK(cudaGetLastError());  // ConvertToBf16(params)
  return m.Sync();
}

Result<void> GptShardCudaModel::CopyParamsToHost(std::span<float> params) {
  Impl& m = *impl_;
  COHORT_TRY_VOID(m.NeedParams());
  if (params.size() != m.layout.total) {
    return FieldError("params", "has {} values, the shard {}", params.size(), m.layout.total);
  }
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_CUDA_CHECK(cudaMemcpyAsync(params.data(), m.params, params.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, m.stream));
  return m.Sync();
}

Result<void> GptShardCudaModel::CopyGradsToHost(std::span<float> grads) {
  Impl& m = *impl_;
  if (grads.size() != m.layout.total) {
    return FieldError("grads", "has {} values, the shard {}", grads.size(), m.layout.total);
  }
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_CUDA_CHECK(cudaMemcpyAsync(grads.data(), m.grads, grads.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, m.stream));
  return m.Sync();
}

Result<void> GptShardCudaModel::ZeroGrad() {
  Impl& m = *impl_;
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_CUDA_CHECK(cudaMemsetAsync(m.grads, 0, m.layout.total * sizeof(float), m.stream));
  return {};
}

Result<void> GptShardCudaModel::Synchronize() {
  COHORT_TRY_VOID(impl_->UseDevice());
  return impl_->Sync();
}

void GptShardCudaModel::Release(int chunk, int slot) {
  Impl& m = *impl_;
  if (chunk < 0 || chunk >= num_chunks()) return;
  auto it = m.stashes[chunk].find(slot);
  if (it == m.stashes[chunk].end()) return;
  m.bytes_now -= it->second->bytes;
  m.spare[chunk].push_back(std::move(it->second));
  m.stashes[chunk].erase(it);
}

Result<float> GptShardCudaModel::Impl::HeadLoss(Stash& s, int N, const int32_t* targets) {
  // The group's row max, then Σ e^{x − max} and the target's logit summed in one
  // all-reduce; the log-sum-exp and the loss on the host in GptShardModel's arithmetic.
  float* mx = Fsum();
  float* sums = Fsum() + N;  // [sum_exp (N) | target_logit (N)]
  k::CrossEntropyShardMax(mx, s.logits, N, Vl, static_cast<int>(v0), V, stream);
  COHORT_CUDA_CHECK(cudaGetLastError());  // CrossEntropyShardMax
  COHORT_TRY_VOID(Sync());
  COHORT_TRY_VOID(tp->Max(mx, N));
  k::CrossEntropyShardSums(sums, sums + N, s.logits, s.targets, mx, N, Vl, static_cast<int>(v0),
                           V, stream);
  COHORT_CUDA_CHECK(cudaGetLastError());  // CrossEntropyShardSums
  COHORT_TRY_VOID(Sync());
  COHORT_TRY_VOID(tp->SumPartials(sums, 2 * static_cast<size_t>(N)));
  const size_t stats = 3 * static_cast<size_t>(N);
  host_stats.resize(stats);
  COHORT_CUDA_CHECK(cudaMemcpyAsync(host_stats.data(), mx, stats * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream));
  COHORT_TRY_VOID(Sync());
  host_lse.resize(N);
  const float* h = host_stats.data();
  const float loss = ShardCrossEntropyLoss(h, h + N, h + 2 * N, targets, N, host_lse.data(),
                                           &s.num_targets);
  COHORT_CUDA_CHECK(cudaMemcpyAsync(s.lse, host_lse.data(), N * sizeof(float),
                                    cudaMemcpyHostToDevice, stream));
  COHORT_TRY_VOID(Sync());
  s.loss_ready = true;
  return loss;
}

Result<float> GptShardCudaModel::Forward(int chunk, int slot, const MicrobatchTokens& batch,
                                         const float* input, float* output) {
  Impl& m = *impl_;
  COHORT_TRY_VOID(ValidateShardForward(
      m.layout, chunk, slot, chunk >= 0 && chunk < num_chunks() && m.stashes[chunk].contains(slot),
      batch));
  const ShardChunkSpec& spec = m.layout.spec.chunks[chunk];
  const ShardChunkOffsets& co = m.layout.chunks[chunk];
  const int B = batch.B, T = batch.T, C = m.C, Cl = m.Cl, NHl = m.NHl;
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_TRY_VOID(m.ReserveTemporaries(B, T));
  const int N = B * T;
  const size_t NC = static_cast<size_t>(N) * C, NCl = static_cast<size_t>(N) * Cl;
  Stash& s = *COHORT_TRY(m.NewStash(chunk, slot, B, T));
  cudaStream_t st = m.stream;
  k::Matmul& mm = *m.matmul;
  // ZeRO-3: each piece held just around its kernels (ParamPasses' forward of the chunk).
  auto piece = [](const ShardPiece& p) { return ParamPiece{p.begin, p.size()}; };
  const ShardChunkPieces pieces = ShardParamPieces(m.layout, chunk);
  COHORT_TRY_VOID(m.BeginPass(2 * static_cast<size_t>(chunk)));
  if (spec.embedding) {
    COHORT_CUDA_CHECK(cudaMemcpyAsync(s.tokens, batch.tokens.data(), N * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, st));
    COHORT_TRY_VOID(m.Hold(piece(pieces.wte)));
    k::EncoderShardForward(m.Fsum(), s.tokens, m.Pb(co.wte), m.v0, m.Vl, B, T, C, st);
    COHORT_CUDA_CHECK(cudaGetLastError());  // EncoderShardForward
    COHORT_TRY_VOID(m.Drop(piece(pieces.wte)));
    if (m.tp->size() > 1) COHORT_TRY_VOID(m.Sync());
    COHORT_TRY_VOID(m.tp->SumPartials(m.Fsum(), m.tp->size() > 1 ? NC : 0));
    COHORT_TRY_VOID(m.Hold(piece(pieces.wpe)));
    k::EncoderAddPosition(s.input, m.Fsum(), m.Pb(co.wpe), B, T, C, st);
    COHORT_TRY_VOID(m.Drop(piece(pieces.wpe)));
  } else {
    k::ConvertToBf16(s.input, input, NC, st);
  }
  COHORT_CUDA_CHECK(cudaGetLastError());  // the chunk's input
  const int L = static_cast<int>(co.blocks.size());
  for (int l = 0; l < L; ++l) {
    const ShardBlockOffsets& w = co.blocks[l];
    const size_t lc = l * NC, lcl = l * NCl, ls = static_cast<size_t>(l) * N;
    const bf16* residual = l == 0 ? s.input : s.residual3 + (l - 1) * NC;
    bf16* ln1 = s.ln1 + lc;
    bf16* qkv = s.qkv + 3 * lcl;
    bf16* atty = s.atty + lcl;
    float* lse = s.att_lse + ls * NHl;
    bf16* residual2 = s.residual2 + lc;
    bf16* ln2 = s.ln2 + lc;
    bf16* fch = s.fch + 4 * lcl;
    bf16* fch_gelu = s.fch_gelu + 4 * lcl;
    bf16* residual3 = s.residual3 + lc;
    const ParamPiece block{w.begin, w.end - w.begin};

    COHORT_TRY_VOID(m.Hold(block));
    k::LayerNormForward(ln1, s.ln1_mean + ls, s.ln1_rstd + ls, residual, m.Pb(w.ln1_w),
                        m.Pb(w.ln1_b), N, C, st);
    COHORT_TRY_VOID(mm.Forward(qkv, ln1, m.Pb(w.qkv_w), m.Pb(w.qkv_b), N, C, 3 * Cl));
    COHORT_CUDA_CHECK(k::AttentionForward(atty, lse, qkv, B, T, Cl, NHl, st));
    COHORT_TRY_VOID(m.RowParallel(residual2, atty, m.Pb(w.attn_proj_w), m.Pb(w.attn_proj_b),
                                  residual, N, Cl));
    k::LayerNormForward(ln2, s.ln2_mean + ls, s.ln2_rstd + ls, residual2, m.Pb(w.ln2_w),
                        m.Pb(w.ln2_b), N, C, st);
    COHORT_TRY_VOID(
        mm.ForwardGelu(fch_gelu, fch, ln2, m.Pb(w.fc_w), m.Pb(w.fc_b), N, C, 4 * Cl));
    COHORT_TRY_VOID(m.RowParallel(residual3, fch_gelu, m.Pb(w.fc_proj_w), m.Pb(w.fc_proj_b),
                                  residual2, N, 4 * Cl));
    COHORT_CUDA_CHECK(cudaGetLastError());  // GptShardCudaModel::Forward (transformer block)
    COHORT_TRY_VOID(m.Drop(block));
  }
  const bf16* last = L > 0 ? s.residual3 + (L - 1) * NC : s.input;
  if (!spec.head) {
    k::ConvertToFloat(output, last, NC, st);
    COHORT_CUDA_CHECK(cudaGetLastError());  // the chunk's output
    COHORT_TRY_VOID(m.Sync());  // written (and the input read) before the caller sends it
    return 0.0f;
  }
  COHORT_TRY_VOID(m.Hold(piece(pieces.ln_f)));
  k::LayerNormForward(s.lnf, s.lnf_mean, s.lnf_rstd, last, m.Pb(co.ln_f_w), m.Pb(co.ln_f_b), N,
                      C, st);
  COHORT_TRY_VOID(m.Drop(piece(pieces.ln_f)));
  COHORT_TRY_VOID(m.Hold(piece(pieces.head_wte)));
  COHORT_TRY_VOID(mm.Forward(s.logits, s.lnf, m.Pb(co.head_wte), nullptr, N, C, m.Vl));
  COHORT_CUDA_CHECK(cudaGetLastError());  // GptShardCudaModel::Forward (head)
  COHORT_TRY_VOID(m.Drop(piece(pieces.head_wte)));
  if (batch.targets.empty()) {
    COHORT_TRY_VOID(m.Sync());
    return 0.0f;
  }
  COHORT_CUDA_CHECK(cudaMemcpyAsync(s.targets, batch.targets.data(), N * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, st));
  return m.HeadLoss(s, N, batch.targets.data());
}

Result<void> GptShardCudaModel::Backward(int chunk, int slot, float loss_scale,
                                         const float* doutput, float* dinput,
                                         const GradReadyFn& ready) {
  Impl& m = *impl_;
  const bool stashed = chunk >= 0 && chunk < num_chunks() && m.stashes[chunk].contains(slot);
  COHORT_TRY_VOID(ValidateShardBackward(m.layout, chunk, slot, stashed,
                                        stashed && m.stashes[chunk][slot]->loss_ready));
  Stash& s = *m.stashes[chunk][slot];
  const ShardChunkSpec& spec = m.layout.spec.chunks[chunk];
  const ShardChunkOffsets& co = m.layout.chunks[chunk];
  COHORT_TRY_VOID(m.UseDevice());
  const int B = s.B, T = s.T, C = m.C, Cl = m.Cl, NHl = m.NHl, N = B * T;
  const size_t NC = static_cast<size_t>(N) * C, NCl = static_cast<size_t>(N) * Cl;
  cudaStream_t st = m.stream;
  k::Matmul& mm = *m.matmul;
  bf16* dres = m.Dres();
  bf16* dsmall = m.Dsmall();
  bf16* dbig = m.Dbig();
  void* scratch = m.scratch.get();
  const int L = static_cast<int>(co.blocks.size());
  const bf16* last = L > 0 ? s.residual3 + (L - 1) * NC : s.input;
  size_t piece = 0;  // the next of ShardGradPieces(chunk) to report
  // ZeRO-3: each piece held just around its kernels (ParamPasses' backward of the chunk).
  auto param = [](const ShardPiece& p) { return ParamPiece{p.begin, p.size()}; };
  const ShardChunkPieces pieces = ShardParamPieces(m.layout, chunk);
  COHORT_TRY_VOID(m.BeginPass(2 * static_cast<size_t>(chunk) + 1));

  if (spec.head) {
    const float scale = s.num_targets > 0 ? loss_scale / static_cast<float>(s.num_targets) : 0.0f;
    k::CrossEntropyShardBackward(s.logits, s.lse, s.targets, N, m.Vl, static_cast<int>(m.v0),
                                 m.V, scale, st);
    COHORT_TRY_VOID(m.Hold(param(pieces.head_wte)));
    COHORT_TRY_VOID(mm.Backward(dsmall, m.G(co.head_wte), nullptr, s.logits, s.lnf,
                                m.Pb(co.head_wte), N, C, m.Vl));
    COHORT_TRY_VOID(m.Drop(param(pieces.head_wte)));
    COHORT_TRY_VOID(m.SumBf16(dsmall, NC));
    COHORT_CUDA_CHECK(cudaMemsetAsync(dres, 0, NC * sizeof(bf16), st));
    COHORT_TRY_VOID(m.Hold(param(pieces.ln_f)));
    k::LayerNormBackward(dres, m.G(co.ln_f_w), m.G(co.ln_f_b), dsmall, last, m.Pb(co.ln_f_w),
                         s.lnf_mean, s.lnf_rstd, N, C, scratch, st);
    COHORT_CUDA_CHECK(cudaGetLastError());  // GptShardCudaModel::Backward (head)
    COHORT_TRY_VOID(m.Drop(param(pieces.ln_f)));
    s.loss_ready = false;
    COHORT_TRY_VOID(m.Notify(chunk, piece++, ready));  // ln_f and the head's copy of wte
  } else {
    k::ConvertToBf16(dres, doutput, NC, st);
    COHORT_CUDA_CHECK(cudaGetLastError());  // the output's gradient
    COHORT_CUDA_CHECK(cudaEventRecord(m.message_read, st));
  }

  for (int l = L - 1; l >= 0; --l) {
    const ShardBlockOffsets& w = co.blocks[l];
    const size_t lc = l * NC, lcl = l * NCl, ls = static_cast<size_t>(l) * N;
    const bf16* residual = l == 0 ? s.input : s.residual3 + (l - 1) * NC;
    const bf16* ln1 = s.ln1 + lc;
    const bf16* qkv = s.qkv + 3 * lcl;
    const bf16* atty = s.atty + lcl;
    const float* lse = s.att_lse + ls * NHl;
    const bf16* residual2 = s.residual2 + lc;
    const bf16* ln2 = s.ln2 + lc;
    const bf16* fch = s.fch + 4 * lcl;
    const bf16* fch_gelu = s.fch_gelu + 4 * lcl;
    const ParamPiece block{w.begin, w.end - w.begin};
    COHORT_TRY_VOID(m.Hold(block));

    // MLP: fc_proj row-parallel (its input gradient is local), fc column-parallel (its
    // input gradient a partial sum: summed before the replicated LayerNorm).
    COHORT_TRY_VOID(mm.BackwardGelu(dbig, fch, m.G(w.fc_proj_w), m.G(w.fc_proj_b), dres,
                                    fch_gelu, m.Pb(w.fc_proj_w), N, 4 * Cl, C));
    COHORT_TRY_VOID(
        mm.Backward(dsmall, m.G(w.fc_w), m.G(w.fc_b), dbig, ln2, m.Pb(w.fc_w), N, C, 4 * Cl));
    COHORT_TRY_VOID(m.SumBf16(dsmall, NC));
    k::LayerNormBackward(dres, m.G(w.ln2_w), m.G(w.ln2_b), dsmall, residual2, m.Pb(w.ln2_w),
                         s.ln2_mean + ls, s.ln2_rstd + ls, N, C, scratch, st);
    // Attention: the same pattern over this rank's heads (dsmall = datty, dbig = dqkv).
    COHORT_TRY_VOID(mm.Backward(dsmall, m.G(w.attn_proj_w), m.G(w.attn_proj_b), dres, atty,
                                m.Pb(w.attn_proj_w), N, Cl, C));
    COHORT_CUDA_CHECK(
        k::AttentionBackward(dbig, dsmall, qkv, atty, lse, B, T, Cl, NHl, scratch, st));
    COHORT_TRY_VOID(mm.Backward(dsmall, m.G(w.qkv_w), m.G(w.qkv_b), dbig, ln1, m.Pb(w.qkv_w), N,
                                C, 3 * Cl));
    COHORT_TRY_VOID(m.SumBf16(dsmall, NC));
    k::LayerNormBackward(dres, m.G(w.ln1_w), m.G(w.ln1_b), dsmall, residual, m.Pb(w.ln1_w),
                         s.ln1_mean + ls, s.ln1_rstd + ls, N, C, scratch, st);
    COHORT_CUDA_CHECK(cudaGetLastError());  // GptShardCudaModel::Backward (transformer block)
    COHORT_TRY_VOID(m.Drop(block));
    COHORT_TRY_VOID(m.Notify(chunk, piece++, ready));  // block l
  }

  if (spec.embedding) {
    k::EncoderShardBackward(m.G(co.wte), m.G(co.wpe), dres, s.tokens, m.v0, m.Vl, B, T, C,
                            scratch, st);
    COHORT_CUDA_CHECK(cudaGetLastError());  // EncoderShardBackward
    COHORT_TRY_VOID(m.Notify(chunk, piece++, ready));  // wte and wpe
    // The caller may receive the next message into doutput once this returns.
    if (!spec.head) COHORT_CUDA_CHECK(cudaEventSynchronize(m.message_read));
  } else {
    k::ConvertToFloat(dinput, dres, NC, st);
    COHORT_CUDA_CHECK(cudaGetLastError());  // the input's gradient
    COHORT_TRY_VOID(m.Sync());  // written (and doutput read) before the caller sends it
  }
  Release(chunk, slot);
  return {};
}

Result<void> GptShardCudaModel::WaitGradsReady(size_t offset, size_t count) {
  // Called from the communication thread too: make the model's device current there.
  COHORT_TRY_VOID(impl_->UseDevice());
  const size_t end = offset + count;
  for (const auto& chunk : impl_->pieces) {
    for (const PieceEvent& p : chunk) {
      if (p.piece.offset >= end || p.piece.offset + p.piece.count <= offset) continue;
      COHORT_CUDA_CHECK(cudaEventSynchronize(p.event));
    }
  }
  return {};
}

Result<std::vector<float>> GptShardCudaModel::Logits(int chunk, int slot, int position) {
  Impl& m = *impl_;
  const bool stashed = chunk >= 0 && chunk < num_chunks() && m.stashes[chunk].contains(slot);
  COHORT_TRY_VOID(ValidateShardLogits(m.layout, chunk, slot, stashed, position,
                                      stashed ? m.stashes[chunk][slot]->T : 0));
  Stash& s = *m.stashes[chunk][slot];
  COHORT_TRY_VOID(m.UseDevice());
  const size_t all = static_cast<size_t>(m.Vl) * m.tp->size();
  k::ConvertToFloat(m.Fsum(), s.logits + static_cast<size_t>(position) * m.Vl, m.Vl, m.stream);
  COHORT_CUDA_CHECK(cudaGetLastError());  // the logits row
  // One rank has the whole row already. TensorParallelGroup::Gather of a group of one is a
  // host memmove, which must never see device memory (it did, and crashed on a real GPU;
  // the emulator's device memory is host memory, so it passed there).
  const float* gathered = m.Fsum();
  if (m.tp->size() > 1) {
    float* into = reinterpret_cast<float*>(
        COHORT_TRY(m.gathered.Reserve(all * sizeof(float), "the gathered logits", m.device)));
    COHORT_TRY_VOID(m.Sync());
    COHORT_TRY_VOID(m.tp->Gather(m.Fsum(), m.Vl, into));
    gathered = into;
  }
  std::vector<float> out(all);
  COHORT_CUDA_CHECK(cudaMemcpyAsync(out.data(), gathered, all * sizeof(float),
                                    cudaMemcpyDeviceToHost, m.stream));
  COHORT_TRY_VOID(m.Sync());
  out.resize(m.V);
  return out;
}

}  // namespace cohort::engine
