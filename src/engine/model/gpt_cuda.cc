// GptCudaModel and GptCudaAdamW: host C++23 that allocates the device memory once and
// launches the kernels of src/engine/kernels/cuda layer by layer, in the order of the CPU
// reference (gpt.cc), on one compute stream.
#include "engine/model/gpt_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "common/cuda_status.h"
#include "engine/kernels/cuda/attention.cuh"
#include "engine/kernels/cuda/cross_entropy.cuh"
#include "engine/kernels/cuda/encoder.cuh"
#include "engine/kernels/cuda/grad_norm.cuh"
#include "engine/kernels/cuda/layernorm.cuh"
#include "engine/kernels/cuda/matmul.h"
#include "engine/kernels/cuda/residual.cuh"
#include "engine/model/cuda_adamw.h"
#include "engine/model/cuda_arena.h"
#include "engine/model/gpt_layout.h"

namespace cohort::engine {

namespace k = ::cohort::engine::cuda;
using k::bf16;

namespace {

// The shape checks Create and PlanMemory share.
Result<void> CheckShape(const GptConfig& config, int max_batch, int max_seq) {
  COHORT_TRY_VOID(config.Validate());
  if (max_batch < 1) return FieldError("max_batch", "must be >= 1, got {}", max_batch);
  if (max_seq < 1 || max_seq > config.max_seq_len) {
    return FieldError("max_seq", "must be in [1, max_seq_len={}], got {}", config.max_seq_len,
                      max_seq);
  }
  const size_t BT = static_cast<size_t>(max_batch) * max_seq;
  if (BT > static_cast<size_t>(std::numeric_limits<int>::max() / 4)) {
    return FieldError("max_batch", "max_batch x max_seq = {} tokens is too many for one Forward",
                      BT);
  }
  // Logits are indexed as int64 inside the kernels, but cuBLASLt's leading dimensions and
  // the classifier's row count are ints: B·T·Vp must fit comfortably.
  if (static_cast<long double>(BT) * config.padded_vocab_size() >
      static_cast<long double>(std::numeric_limits<int64_t>::max() / 4)) {
    return FieldError("max_batch", "B x T x padded vocab is too large");
  }
  return CheckCudaChannels(config, config.n_embd);
}

// The kernels' scratch: the largest of the users, which run one after another on the
// compute stream. The sizes grow with B and T, so the maximum shape bounds every smaller one
// (Backward checks it anyway).
size_t ScratchBytes(const GptConfig& c, int max_batch, int max_seq) {
  const int N = max_batch * max_seq;
  return std::max({k::EncoderBackwardScratchBytes(max_batch, max_seq),
                   k::LayerNormBackwardScratchBytes(N, c.n_embd),
                   k::AttentionBackwardScratchBytes(max_batch, max_seq, c.n_embd, c.n_head),
                   size_t{1}});
}

// Device buffers. Per-layer activations are stored layer-major with a fixed stride of the
// maximum shape: layer l's slice of `ln1` starts at ln1 + l·maxN·C (maxN = max_batch·
// max_seq), whatever B and T the current Forward uses (it uses the first B·T rows).
struct Buffers {
  float* params = nullptr;
  bf16* params_bf16 = nullptr;
  float* grads = nullptr;
  int32_t* tokens = nullptr;   // (maxN)
  int32_t* targets = nullptr;  // (maxN)
  bf16* encoded = nullptr;     // (maxN, C)
  bf16* ln1 = nullptr;         // (L, maxN, C)
  float* ln1_mean = nullptr;   // (L, maxN)
  float* ln1_rstd = nullptr;   // (L, maxN)
  bf16* qkv = nullptr;         // (L, maxN, 3C)
  bf16* atty = nullptr;        // (L, maxN, C)
  float* att_lse = nullptr;    // (L, maxN·NH): (B, NH, T) per layer
  bf16* residual2 = nullptr;   // (L, maxN, C)
  bf16* ln2 = nullptr;         // (L, maxN, C)
  float* ln2_mean = nullptr;   // (L, maxN)
  float* ln2_rstd = nullptr;   // (L, maxN)
  bf16* fch = nullptr;         // (L, maxN, 4C) pre-GELU
  bf16* fch_gelu = nullptr;    // (L, maxN, 4C)
  bf16* residual3 = nullptr;   // (L, maxN, C)
  bf16* lnf = nullptr;         // (maxN, C)
  float* lnf_mean = nullptr;   // (maxN)
  float* lnf_rstd = nullptr;   // (maxN)
  bf16* logits = nullptr;      // (maxN, Vp); dlogits after Backward (or the single-pass
                               // classifier's Forward with targets)
  bf16* last_logits = nullptr; // (max_batch, Vp) each sequence's last row, set aside by the
                               // single-pass classifier before it overwrites the logits
  float* losses = nullptr;     // (maxN)
  float* loss_sum = nullptr;   // (1)
  bf16* dresidual = nullptr;   // (maxN, C) the residual stream's gradient
  bf16* dsmall = nullptr;      // (maxN, C) dln / datty
  bf16* dbig = nullptr;        // (maxN, 4C) dfch (GELU backward in place) / dqkv
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
};

// Lays the buffers out over `base` (null: sizes only) and fills `mem`.
Buffers Carve(char* base, const GptConfig& c, int max_batch, int max_seq,
              const GptCudaStorage& storage, GptCudaMemory* mem) {
  *mem = GptCudaMemory{};
  const size_t P = c.num_parameters();
  const size_t L = c.n_layer, C = c.n_embd, NH = c.n_head, Vp = c.padded_vocab_size();
  const size_t N = static_cast<size_t>(max_batch) * max_seq;
  Carver cv(base);
  Buffers b;
  if (storage.params) {
    b.params = cv.Take<float>(P, &mem->params);
    b.params_bf16 = cv.Take<bf16>(P, &mem->params_bf16);
  }
  if (storage.grads) b.grads = cv.Take<float>(P, &mem->grads);
  size_t* act = &mem->activations;
  b.tokens = cv.Take<int32_t>(N, act);
  b.targets = cv.Take<int32_t>(N, act);
  b.encoded = cv.Take<bf16>(N * C, act);
  b.ln1 = cv.Take<bf16>(L * N * C, act);
  b.ln1_mean = cv.Take<float>(L * N, act);
  b.ln1_rstd = cv.Take<float>(L * N, act);
  b.qkv = cv.Take<bf16>(L * N * 3 * C, act);
  b.atty = cv.Take<bf16>(L * N * C, act);
  b.att_lse = cv.Take<float>(L * N * NH, act);
  b.residual2 = cv.Take<bf16>(L * N * C, act);
  b.ln2 = cv.Take<bf16>(L * N * C, act);
  b.ln2_mean = cv.Take<float>(L * N, act);
  b.ln2_rstd = cv.Take<float>(L * N, act);
  b.fch = cv.Take<bf16>(L * N * 4 * C, act);
  b.fch_gelu = cv.Take<bf16>(L * N * 4 * C, act);
  b.residual3 = cv.Take<bf16>(L * N * C, act);
  b.lnf = cv.Take<bf16>(N * C, act);
  b.lnf_mean = cv.Take<float>(N, act);
  b.lnf_rstd = cv.Take<float>(N, act);
  size_t logits_bytes = 0;
  b.logits = cv.Take<bf16>(N * Vp, &logits_bytes);
  mem->logits = logits_bytes;
  mem->activations += logits_bytes;
  b.last_logits = cv.Take<bf16>(static_cast<size_t>(max_batch) * Vp, act);
  b.losses = cv.Take<float>(N, act);
  b.loss_sum = cv.Take<float>(1, act);
  b.dresidual = cv.Take<bf16>(N * C, &mem->backward);
  b.dsmall = cv.Take<bf16>(N * C, &mem->backward);
  b.dbig = cv.Take<bf16>(N * 4 * C, &mem->backward);
  b.scratch_bytes = ScratchBytes(c, max_batch, max_seq);
  b.scratch = cv.Take<char>(b.scratch_bytes, &mem->scratch);
  mem->total = cv.total();
  return b;
}

// One finished slice of the gradient buffer and the event recorded behind its last writer.
struct Slice {
  size_t offset = 0, count = 0;
  cudaEvent_t event = nullptr;
};

}  // namespace

namespace {

// A piece a ParamSource handed out (the model holds at most two).
struct HeldPiece {
  size_t offset = 0, count = 0;
  const bf16* data = nullptr;
};

// A broken internal invariant (a parameter or gradient read outside the pieces held): a bug
// in this file, not an input error; the kernels would read or write wild memory.
[[noreturn]] void PieceBug(const char* what, size_t offset) {
  std::fprintf(stderr, "GptCudaModel: %s at offset %zu outside the pieces held\n", what, offset);
  std::abort();
}

}  // namespace

struct GptCudaModel::Impl {
  GptConfig config;
  GptCudaOptions options;
  GptCudaStorage storage;
  CudaGradSink* sink = nullptr;      // without a gradient buffer
  CudaParamSource* source = nullptr; // without parameters
  HeldPiece held[2];                 // the source's pieces held now
  float* gpiece = nullptr;           // the sink's piece being written
  size_t gpiece_offset = 0, gpiece_count = 0;
  GptLayout layout;
  int Vp = 0;
  int max_batch = 0, max_seq = 0;
  int device = 0;
  GptCudaMemory memory;
  char* arena = nullptr;
  Buffers buf;
  cudaStream_t stream = nullptr;
  std::optional<k::Matmul> matmul;
  float* loss_host = nullptr;  // pinned: where Forward reads the loss sum
  std::vector<Slice> slices;   // Backward's ready() slices, in its order

  // The last Forward.
  int B = 0, T = 0;
  int num_targets = 0;
  bool backward_ready = false;  // a Forward with targets ran and was not back-propagated
  bool logits_valid = false;    // the last Forward's logits can be read (LastLogits)
  bool logits_aside = false;    // ... from `buf.last_logits` (the single-pass classifier
                                // overwrote `buf.logits` with d(mean loss)/d(logits))

  ~Impl() {
    // Wait for queued work before freeing what it uses; errors cannot be reported here.
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    for (Slice& s : slices) {
      if (s.event != nullptr) (void)cudaEventDestroy(s.event);
    }
    matmul.reset();
    if (loss_host != nullptr) (void)cudaFreeHost(loss_host);
    if (arena != nullptr) (void)cudaFree(arena);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  Result<void> UseDevice() {
    COHORT_CUDA_CHECK(cudaSetDevice(device));
    return {};
  }

  // Per-layer slices (fixed stride of the maximum shape, see Buffers).
  size_t MaxN() const { return static_cast<size_t>(max_batch) * max_seq; }
  float* G(size_t offset) const {
    if (sink == nullptr) return buf.grads + offset;
    if (offset < gpiece_offset || offset >= gpiece_offset + gpiece_count) {
      PieceBug("a gradient", offset);
    }
    return gpiece + (offset - gpiece_offset);
  }
  const bf16* Pb(size_t offset) const {
    if (source == nullptr) return buf.params_bf16 + offset;
    for (const HeldPiece& h : held) {
      if (h.data != nullptr && offset >= h.offset && offset < h.offset + h.count) {
        return h.data + (offset - h.offset);
      }
    }
    PieceBug("a parameter", offset);
  }

  // The source's piece, gathered for the kernels queued from now on (no source: nothing).
  Result<void> Hold(const ParamPiece& p) {
    if (source == nullptr) return {};
    for (HeldPiece& h : held) {
      if (h.data == nullptr) {
        const bf16* data = COHORT_TRY(source->Gather(p.offset, p.count));
        h = {p.offset, p.count, data};
        return {};
      }
    }
    return MakeError(ErrorCode::kInternal, "GptCudaModel: a third parameter piece held");
  }
  // The kernels queued so far are the piece's last readers.
  Result<void> Unhold(const ParamPiece& p) {
    if (source == nullptr) return {};
    for (HeldPiece& h : held) {
      if (h.data != nullptr && h.offset == p.offset && h.count == p.count) {
        h = {};
        return source->Release(p.offset, p.count);
      }
    }
    return Errorf(ErrorCode::kInternal, "GptCudaModel: released a piece at {} not held", p.offset);
  }
  // The sink's buffer for a gradient piece, zeroed on the stream (no sink: nothing, the
  // whole buffer accumulates).
  Result<void> OpenGrads(const ParamPiece& p) {
    if (sink == nullptr) return {};
    gpiece = COHORT_TRY(sink->Acquire(p.offset, p.count));
    gpiece_offset = p.offset;
    gpiece_count = p.count;
    COHORT_CUDA_CHECK(cudaMemsetAsync(gpiece, 0, p.count * sizeof(float), stream));
    return {};
  }
  Result<void> CloseGrads(const ParamPiece& p) {
    if (sink == nullptr) return {};
    gpiece = nullptr;
    gpiece_count = 0;
    return sink->Done(p.offset, p.count);
  }
  // Without parameters or gradients a pass needs its source or sink.
  Result<void> CheckPieces() const {
    if (!storage.params && source == nullptr) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "GptCudaModel holds no parameters and has no parameter source");
    }
    if (!storage.grads && sink == nullptr) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "GptCudaModel holds no gradient buffer and has no gradient sink");
    }
    return {};
  }

  Result<void> Notify(size_t slice, const GradReadyFn& ready) {
    const Slice& s = slices[slice];
    COHORT_CUDA_CHECK(cudaEventRecord(s.event, stream));
    if (ready) ready(s.offset, s.count);
    return {};
  }
};

std::vector<ParamPiece> GptCudaModel::ParamPieces(const GptConfig& config, bool backward) {
  const GptLayout lay = GptLayout::Build(config);
  const size_t C = config.n_embd;
  const ParamPiece wte{lay.wte, static_cast<size_t>(config.padded_vocab_size()) * C};
  const ParamPiece ln_f{lay.ln_f_w, 2 * C};
  auto layer = [&](int l) {
    return ParamPiece{lay.layers[l].begin, lay.layers[l].end - lay.layers[l].begin};
  };
  std::vector<ParamPiece> out;
  if (backward) {
    out = {wte, ln_f};
    for (int l = config.n_layer - 1; l >= 0; --l) out.push_back(layer(l));
    return out;
  }
  out.push_back({lay.wte, lay.wpe + static_cast<size_t>(config.max_seq_len) * C - lay.wte});
  for (int l = 0; l < config.n_layer; ++l) out.push_back(layer(l));
  out.push_back(ln_f);
  out.push_back(wte);
  return out;
}

std::vector<ParamPiece> GptCudaModel::GradPieces(const GptConfig& config) {
  std::vector<ParamPiece> out = ParamPieces(config, /*backward=*/true);
  out.erase(out.begin());  // the head's wte: its gradient is taken at the end
  const GptLayout lay = GptLayout::Build(config);
  const size_t C = config.n_embd;
  out.push_back({lay.wpe, static_cast<size_t>(config.max_seq_len) * C});
  // wte's rows in chunks that fit MaxGradPiece, a multiple of 8 rows (BackwardWeightRows'
  // alignment; a layer's block holds 12C + 13 rows' worth, so at least 8), from the last.
  const size_t rows = std::max<size_t>(8, MaxGradPiece(config) / C / 8 * 8);
  for (size_t hi = static_cast<size_t>(config.padded_vocab_size()); hi > 0;) {
    const size_t lo = hi > rows ? hi - rows : 0;
    out.push_back({lay.wte + lo * C, (hi - lo) * C});
    hi = lo;
  }
  return out;
}

size_t GptCudaModel::MaxParamPiece(const GptConfig& config) {
  // The embeddings (wte and wpe, one piece here) or a layer's block.
  const size_t C = static_cast<size_t>(config.n_embd);
  const size_t embeddings =
      (static_cast<size_t>(config.padded_vocab_size()) + config.max_seq_len) * C;
  return std::max({embeddings, 12 * C * C + 13 * C, 2 * C});
}

size_t GptCudaModel::MaxGradPiece(const GptConfig& config) {
  return GptModel::MaxGradPiece(config);
}

Result<GptCudaMemory> GptCudaModel::PlanMemory(const GptConfig& config, int max_batch,
                                               int max_seq, const GptCudaStorage& storage) {
  COHORT_TRY_VOID(CheckShape(config, max_batch, max_seq));
  GptCudaMemory mem;
  (void)Carve(nullptr, config, max_batch, max_seq, storage, &mem);
  // Without a device the encoder's sort cannot size its temporary storage (a few KB to MB,
  // counted as 0 then) and leaves its failure in the runtime's last-error slot: clear it.
  if (!CudaDeviceCount()) (void)cudaGetLastError();
  return mem;
}

Result<std::unique_ptr<GptCudaModel>> GptCudaModel::Create(const GptConfig& config,
                                                           int max_batch, int max_seq,
                                                           const GptCudaOptions& options,
                                                           const GptCudaStorage& storage) {
  COHORT_TRY_VOID(CheckShape(config, max_batch, max_seq));
  COHORT_TRY(CudaDeviceCount());
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.config = config;
  m.options = options;
  m.storage = storage;
  m.layout = GptLayout::Build(config);
  m.Vp = config.padded_vocab_size();
  m.max_batch = max_batch;
  m.max_seq = max_seq;
  COHORT_CUDA_CHECK(cudaGetDevice(&m.device));
  COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));

  (void)Carve(nullptr, config, max_batch, max_seq, storage, &m.memory);
  const std::string what = fmt::format(
      "the GPT model ({:.1f}M parameters, batch {} x {} tokens: parameters and gradients {}, "
      "activations {})",
      config.num_parameters() / 1e6, max_batch, max_seq,
      GiB(m.memory.params + m.memory.params_bf16 + m.memory.grads),
      GiB(m.memory.activations + m.memory.backward + m.memory.scratch));
  m.arena = static_cast<char*>(COHORT_TRY(DeviceAlloc(m.memory.total, what, m.device)));
  GptCudaMemory check;
  m.buf = Carve(m.arena, config, max_batch, max_seq, storage, &check);

  void* pinned = nullptr;
  COHORT_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(float)));
  m.loss_host = static_cast<float*>(pinned);
  k::MatmulOptions mo;
  mo.gelu_epilogue = options.gelu_epilogue;
  mo.bias_grad_epilogue = options.bias_grad_epilogue;
  m.matmul.emplace(COHORT_TRY(k::Matmul::Create(m.stream, mo)));

  // Backward's slices, in its order: ln_f, layer L-1 .. 0, wpe, wte.
  const GptLayout& lay = m.layout;
  const size_t C = config.n_embd;
  m.slices.push_back({lay.ln_f_w, 2 * C});
  for (int l = config.n_layer - 1; l >= 0; --l) {
    m.slices.push_back({lay.layers[l].begin, lay.layers[l].end - lay.layers[l].begin});
  }
  m.slices.push_back({lay.wpe, static_cast<size_t>(config.max_seq_len) * C});
  m.slices.push_back({lay.wte, static_cast<size_t>(m.Vp) * C});
  for (Slice& s : m.slices) {
    COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&s.event, cudaEventDisableTiming));
  }

  // Zeroed parameters and gradients, as GptModel::Create.
  const size_t P = m.config.num_parameters();
  if (storage.params) {
    COHORT_CUDA_CHECK(cudaMemsetAsync(m.buf.params, 0, P * sizeof(float), m.stream));
    COHORT_CUDA_CHECK(cudaMemsetAsync(m.buf.params_bf16, 0, P * sizeof(bf16), m.stream));
  }
  if (storage.grads) COHORT_CUDA_CHECK(cudaMemsetAsync(m.buf.grads, 0, P * sizeof(float), m.stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return std::unique_ptr<GptCudaModel>(new GptCudaModel(std::move(impl)));
}

GptCudaModel::GptCudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptCudaModel::~GptCudaModel() = default;

const GptConfig& GptCudaModel::config() const { return impl_->config; }
const GptCudaOptions& GptCudaModel::options() const { return impl_->options; }
cuda::MatmulFallbacks GptCudaModel::matmul_fallbacks() const {
  return impl_->matmul->fallbacks();
}
const std::vector<ParamTensor>& GptCudaModel::tensors() const { return impl_->layout.tensors; }
size_t GptCudaModel::num_parameters() const { return impl_->config.num_parameters(); }
int GptCudaModel::max_batch() const { return impl_->max_batch; }
int GptCudaModel::max_seq() const { return impl_->max_seq; }
int GptCudaModel::device() const { return impl_->device; }
size_t GptCudaModel::device_bytes() const { return impl_->memory.total; }
std::span<float> GptCudaModel::params_device() {
  if (!impl_->storage.params) return {};
  return {impl_->buf.params, num_parameters()};
}
std::span<float> GptCudaModel::grads_device() {
  if (!impl_->storage.grads) return {};
  return {impl_->buf.grads, num_parameters()};
}
const GptCudaStorage& GptCudaModel::storage() const { return impl_->storage; }
void GptCudaModel::SetGradSink(CudaGradSink* sink) { impl_->sink = sink; }
void GptCudaModel::SetParamSource(CudaParamSource* source) { impl_->source = source; }
bf16* GptCudaModel::params_bf16_device() { return impl_->buf.params_bf16; }
cudaStream_t GptCudaModel::stream() { return impl_->stream; }

namespace {
Result<void> Held(bool held, const char* what) {
  if (held) return {};
  return Errorf(ErrorCode::kFailedPrecondition, "GptCudaModel was created without its {} (ZeRO)",
                what);
}
}  // namespace

Result<void> GptCudaModel::CopyParamsFromHost(std::span<const float> params) {
  Impl& m = *impl_;
  COHORT_TRY_VOID(Held(m.storage.params, "parameters"));
  if (params.size() != num_parameters()) {
    return FieldError("params", "has {} values, the model {}", params.size(), num_parameters());
  }
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_CUDA_CHECK(cudaMemcpyAsync(m.buf.params, params.data(), params.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, m.stream));
  k::ConvertToBf16(m.buf.params_bf16, m.buf.params, params.size(), m.stream);
  COHORT_CUDA_CHECK(cudaGetLastError());  // ConvertToBf16(params)
  COHORT_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return {};
}

Result<void> GptCudaModel::ParamsWritten() {
  Impl& m = *impl_;
  COHORT_TRY_VOID(Held(m.storage.params, "parameters"));
  COHORT_TRY_VOID(m.UseDevice());
  k::ConvertToBf16(m.buf.params_bf16, m.buf.params, num_parameters(), m.stream);
  COHORT_CUDA_CHECK(cudaGetLastError());  // ConvertToBf16(params)
  COHORT_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return {};
}

Result<void> GptCudaModel::CopyParamsToHost(std::span<float> params) {
  Impl& m = *impl_;
  COHORT_TRY_VOID(Held(m.storage.params, "parameters"));
  if (params.size() != num_parameters()) {
    return FieldError("params", "has {} values, the model {}", params.size(), num_parameters());
  }
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_CUDA_CHECK(cudaMemcpyAsync(params.data(), m.buf.params, params.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, m.stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return {};
}

Result<void> GptCudaModel::CopyGradsToHost(std::span<float> grads) {
  Impl& m = *impl_;
  COHORT_TRY_VOID(Held(m.storage.grads, "gradient buffer"));
  if (grads.size() != num_parameters()) {
    return FieldError("grads", "has {} values, the model {}", grads.size(), num_parameters());
  }
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_CUDA_CHECK(cudaMemcpyAsync(grads.data(), m.buf.grads, grads.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, m.stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return {};
}

Result<void> GptCudaModel::ZeroGrad() {
  Impl& m = *impl_;
  COHORT_TRY_VOID(m.UseDevice());
  if (!m.storage.grads) return {};  // the sink's pieces are zeroed as they are handed out
  COHORT_CUDA_CHECK(cudaMemsetAsync(m.buf.grads, 0, num_parameters() * sizeof(float), m.stream));
  return {};
}

Result<void> GptCudaModel::Synchronize() {
  COHORT_TRY_VOID(impl_->UseDevice());
  COHORT_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return {};
}

Result<float> GptCudaModel::Forward(std::span<const int32_t> tokens,
                                    std::span<const int32_t> targets, int B, int T) {
  Impl& m = *impl_;
  const GptConfig& cfg = m.config;
  // The same checks and words as GptModel::Forward, then the limits of the allocation.
  const int count = COHORT_TRY(ValidateBatch(cfg, tokens, targets, B, T));
  if (B > m.max_batch) {
    return FieldError("B", "batch size {} is above the {} sequences the model was created for",
                      B, m.max_batch);
  }
  if (T > m.max_seq) {
    return FieldError("T", "sequence length {} is above the {} tokens the model was created for",
                      T, m.max_seq);
  }
  const size_t BT = static_cast<size_t>(B) * T;
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_TRY_VOID(m.CheckPieces());
  m.backward_ready = false;
  m.logits_valid = false;
  m.logits_aside = false;
  m.B = B;
  m.T = T;
  m.num_targets = count;

  const Buffers& b = m.buf;
  cudaStream_t st = m.stream;
  // Pageable sources: cudaMemcpyAsync stages them before returning, so the spans may
  // change as soon as it returns; the copies stay ordered on the stream.
  COHORT_CUDA_CHECK(
      cudaMemcpyAsync(b.tokens, tokens.data(), BT * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  if (!targets.empty()) {
    COHORT_CUDA_CHECK(cudaMemcpyAsync(b.targets, targets.data(), BT * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, st));
  }

  const int C = cfg.n_embd, NH = cfg.n_head, L = cfg.n_layer, N = static_cast<int>(BT);
  const size_t maxN = m.MaxN(), NC = BT * C;
  const GptLayout& lay = m.layout;
  k::Matmul& mm = *m.matmul;

  // sum += skip (the residual stream after a projection), then the LayerNorm the stream
  // meets next: one kernel with fused_residual_layernorm, else ResidualForward and
  // LayerNormForward (bitwise the same).
  auto residual_then_norm = [&](bf16* sum, const bf16* skip, bf16* ln, float* mean,
                                float* rstd, size_t ln_w, size_t ln_b) {
    if (m.options.fused_residual_layernorm) {
      k::FusedResidualLayerNormForward(sum, ln, mean, rstd, sum, skip, m.Pb(ln_w), m.Pb(ln_b),
                                       N, C, st);
    } else {
      k::ResidualForward(sum, sum, skip, NC, st);
      k::LayerNormForward(ln, mean, rstd, sum, m.Pb(ln_w), m.Pb(ln_b), N, C, st);
    }
  };

  // Without parameters the pieces come from the source: the embeddings, each layer (held
  // together with the next piece for the LayerNorm that ends it), ln_f, the head's wte.
  std::vector<ParamPiece> pieces;
  if (m.source != nullptr) {
    pieces = ParamPieces(cfg, /*backward=*/false);
    COHORT_TRY_VOID(m.source->BeginPass(/*pass=*/0));
    COHORT_TRY_VOID(m.Hold(pieces[0]));
  }
  auto piece = [&](size_t i) { return m.source != nullptr ? pieces[i] : ParamPiece{}; };
  k::EncoderForward(b.encoded, b.tokens, m.Pb(lay.wte), m.Pb(lay.wpe), B, T, C, st);
  // Layer 0's ln1 (every later ln1, and ln_f, ends the layer before).
  COHORT_TRY_VOID(m.Hold(piece(1)));
  k::LayerNormForward(b.ln1, b.ln1_mean, b.ln1_rstd, b.encoded, m.Pb(lay.layers[0].ln1_w),
                      m.Pb(lay.layers[0].ln1_b), N, C, st);
  COHORT_CUDA_CHECK(cudaGetLastError());  // EncoderForward, LayerNormForward
  COHORT_TRY_VOID(m.Unhold(piece(0)));
  for (int l = 0; l < L; ++l) {
    const LayerOffsets& w = lay.layers[l];
    const size_t lc = l * maxN * C, ls = l * maxN;  // this layer's slice: (maxN, C), (maxN)
    const bf16* residual = l == 0 ? b.encoded : b.residual3 + (l - 1) * maxN * C;
    bf16* ln1 = b.ln1 + lc;
    bf16* qkv = b.qkv + 3 * lc;
    bf16* atty = b.atty + lc;
    float* lse = b.att_lse + ls * NH;
    bf16* residual2 = b.residual2 + lc;
    bf16* ln2 = b.ln2 + lc;
    bf16* fch = b.fch + 4 * lc;
    bf16* fch_gelu = b.fch_gelu + 4 * lc;
    bf16* residual3 = b.residual3 + lc;

    COHORT_TRY_VOID(mm.Forward(qkv, ln1, m.Pb(w.qkv_w), m.Pb(w.qkv_b), N, C, 3 * C));
    COHORT_CUDA_CHECK(k::AttentionForward(atty, lse, qkv, B, T, C, NH, st));
    COHORT_TRY_VOID(mm.Forward(residual2, atty, m.Pb(w.attn_proj_w), m.Pb(w.attn_proj_b), N, C, C));
    residual_then_norm(residual2, residual, ln2, b.ln2_mean + ls, b.ln2_rstd + ls, w.ln2_w,
                       w.ln2_b);
    COHORT_TRY_VOID(mm.ForwardGelu(fch_gelu, fch, ln2, m.Pb(w.fc_w), m.Pb(w.fc_b), N, C, 4 * C));
    COHORT_TRY_VOID(
        mm.Forward(residual3, fch_gelu, m.Pb(w.fc_proj_w), m.Pb(w.fc_proj_b), N, 4 * C, C));
    COHORT_TRY_VOID(m.Hold(piece(static_cast<size_t>(l) + 2)));  // the next layer's, or ln_f
    if (l + 1 < L) {  // the next layer's ln1
      const size_t next = static_cast<size_t>(l + 1) * maxN;
      residual_then_norm(residual3, residual2, b.ln1 + next * C, b.ln1_mean + next,
                         b.ln1_rstd + next, lay.layers[l + 1].ln1_w, lay.layers[l + 1].ln1_b);
    } else {
      residual_then_norm(residual3, residual2, b.lnf, b.lnf_mean, b.lnf_rstd, lay.ln_f_w,
                         lay.ln_f_b);
    }
    COHORT_CUDA_CHECK(cudaGetLastError());  // GptCudaModel::Forward (transformer block)
    COHORT_TRY_VOID(m.Unhold(piece(static_cast<size_t>(l) + 1)));
  }
  COHORT_TRY_VOID(m.Unhold(piece(static_cast<size_t>(L) + 1)));  // ln_f
  COHORT_TRY_VOID(m.Hold(piece(static_cast<size_t>(L) + 2)));    // wte, the head
  COHORT_TRY_VOID(mm.Forward(b.logits, b.lnf, m.Pb(lay.wte), nullptr, N, C, m.Vp));
  COHORT_CUDA_CHECK(cudaGetLastError());  // GptCudaModel::Forward (head)
  COHORT_TRY_VOID(m.Unhold(piece(static_cast<size_t>(L) + 2)));
  m.logits_valid = true;
  if (targets.empty()) return 0.0f;

  // Per-row losses, their sum, and the one synchronisation of the step. Single pass: the
  // same pass over the logits writes d(mean loss)/d(logits) = (softmax − onehot) / count in
  // their place, each sequence's last row set aside first (LastLogits); Backward multiplies
  // by loss_scale in the classifier's products. Otherwise the logits stay and Backward,
  // which knows loss_scale, passes over them again to write the gradient.
  if (m.options.single_pass_classifier) {
    const float scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
    k::FusedClassifier(b.logits, b.losses, b.targets, N, cfg.vocab_size, m.Vp, scale,
                       /*write_grad=*/true, b.last_logits, T, st);
    m.logits_aside = true;
  } else {
    k::FusedClassifier(b.logits, b.losses, b.targets, N, cfg.vocab_size, m.Vp, 0.0f,
                       /*write_grad=*/false, /*last_rows=*/nullptr, T, st);
  }
  k::SumLosses(b.loss_sum, b.losses, N, st);
  COHORT_CUDA_CHECK(cudaGetLastError());  // GptCudaModel::Forward (loss)
  COHORT_CUDA_CHECK(
      cudaMemcpyAsync(m.loss_host, b.loss_sum, sizeof(float), cudaMemcpyDeviceToHost, st));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(st));
  m.backward_ready = true;
  return count > 0 ? *m.loss_host / static_cast<float>(count) : 0.0f;
}

Result<std::vector<float>> GptCudaModel::LastLogits() {
  Impl& m = *impl_;
  if (!m.logits_valid) {
    return MakeError(ErrorCode::kFailedPrecondition,
                     "no logits: run Forward first (Backward overwrites them with their gradient)");
  }
  COHORT_TRY_VOID(m.UseDevice());
  const size_t V = m.config.vocab_size, Vp = m.Vp, T = m.T, B = m.B;
  std::vector<uint16_t> bits(B * V);
  // Row (b·T + T − 1) of the (B·T, Vp) logits for each b: a 2-D copy with a source pitch
  // of T rows; or the rows set aside, one after another.
  const bf16* first = m.logits_aside ? m.buf.last_logits : m.buf.logits + (T - 1) * Vp;
  const size_t pitch = (m.logits_aside ? 1 : T) * Vp * sizeof(bf16);
  COHORT_CUDA_CHECK(cudaMemcpy2DAsync(bits.data(), V * sizeof(uint16_t), first, pitch,
                                      V * sizeof(bf16), B, cudaMemcpyDeviceToHost, m.stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16BitsToFloat(bits[i]);
  return out;
}

Result<void> GptCudaModel::Backward(float loss_scale, const GradReadyFn& ready) {
  Impl& m = *impl_;
  if (!m.backward_ready) {
    return MakeError(ErrorCode::kFailedPrecondition,
                     "Backward needs a Forward with targets first (each Forward can be "
                     "back-propagated once)");
  }
  m.backward_ready = false;
  m.logits_valid = false;
  COHORT_TRY_VOID(m.UseDevice());
  COHORT_TRY_VOID(m.CheckPieces());
  const GptConfig& cfg = m.config;
  const GptLayout& lay = m.layout;
  const int B = m.B, T = m.T, C = cfg.n_embd, NH = cfg.n_head, L = cfg.n_layer;
  const int N = B * T;
  const size_t maxN = m.MaxN(), NC = static_cast<size_t>(N) * C;
  const Buffers& b = m.buf;
  cudaStream_t st = m.stream;
  k::Matmul& mm = *m.matmul;
  if (k::EncoderBackwardScratchBytes(B, T) > b.scratch_bytes ||
      k::LayerNormBackwardScratchBytes(N, C) > b.scratch_bytes ||
      k::AttentionBackwardScratchBytes(B, T, C, NH) > b.scratch_bytes) {
    return Errorf(ErrorCode::kInternal,
                  "GptCudaModel: the kernels' scratch for B={} T={} exceeds the {} bytes "
                  "planned for the maximum shape",
                  B, T, b.scratch_bytes);
  }

  // Head: dlogits in place (scale = loss_scale / count: the gradient of loss_scale × the
  // mean loss), then dlnf (overwritten) and wte's first gradient contribution. The
  // single-pass classifier's Forward left d(mean loss)/d(logits) there: loss_scale goes in
  // as the products' alpha instead.
  float alpha = 1.0f;
  if (m.options.single_pass_classifier) {
    alpha = loss_scale;
  } else {
    const float scale =
        m.num_targets > 0 ? loss_scale / static_cast<float>(m.num_targets) : 0.0f;
    k::FusedClassifier(b.logits, b.losses, b.targets, N, cfg.vocab_size, m.Vp, scale,
                       /*write_grad=*/true, /*last_rows=*/nullptr, T, st);
  }
  // The pieces: the source's parameter pieces (wte, ln_f, layers L-1..0) and the sink's
  // gradient pieces (ln_f, layers L-1..0, the embeddings). A sink gets the head's wte
  // gradient with the embeddings' piece, at the end (dlogits stay in b.logits, ln_f(x) in
  // b.lnf): the head only takes dlnf here.
  std::vector<ParamPiece> pieces, gpieces;
  if (m.source != nullptr) {
    pieces = ParamPieces(cfg, /*backward=*/true);
    COHORT_TRY_VOID(m.source->BeginPass(/*pass=*/1));
  }
  if (m.sink != nullptr) gpieces = GradPieces(cfg);
  auto piece = [&](size_t i) { return m.source != nullptr ? pieces[i] : ParamPiece{}; };
  auto gpiece = [&](size_t i) { return m.sink != nullptr ? gpieces[i] : ParamPiece{}; };
  COHORT_TRY_VOID(m.Hold(piece(0)));
  COHORT_TRY_VOID(mm.Backward(b.dsmall, m.sink != nullptr ? nullptr : m.G(lay.wte), nullptr,
                              b.logits, b.lnf, m.Pb(lay.wte), N, C, m.Vp, alpha));
  COHORT_TRY_VOID(m.Unhold(piece(0)));
  // The residual stream's gradient starts at zero; every LayerNorm backward adds into it.
  COHORT_CUDA_CHECK(cudaMemsetAsync(b.dresidual, 0, NC * sizeof(bf16), st));
  COHORT_TRY_VOID(m.Hold(piece(1)));
  COHORT_TRY_VOID(m.OpenGrads(gpiece(0)));
  k::LayerNormBackward(b.dresidual, m.G(lay.ln_f_w), m.G(lay.ln_f_b), b.dsmall,
                       b.residual3 + (L - 1) * maxN * C, m.Pb(lay.ln_f_w), b.lnf_mean,
                       b.lnf_rstd, N, C, b.scratch, st);
  COHORT_CUDA_CHECK(cudaGetLastError());  // GptCudaModel::Backward (head)
  COHORT_TRY_VOID(m.CloseGrads(gpiece(0)));
  COHORT_TRY_VOID(m.Unhold(piece(1)));
  size_t slice = 0;
  COHORT_TRY_VOID(m.Notify(slice++, ready));  // ln_f

  for (int l = L - 1; l >= 0; --l) {
    const size_t at = static_cast<size_t>(L - l);  // this layer's piece in both lists, + 1
    COHORT_TRY_VOID(m.Hold(piece(at + 1)));
    COHORT_TRY_VOID(m.OpenGrads(gpiece(at)));
    const LayerOffsets& w = lay.layers[l];
    const size_t lc = l * maxN * C, ls = l * maxN;
    const bf16* residual = l == 0 ? b.encoded : b.residual3 + (l - 1) * maxN * C;
    const bf16* ln1 = b.ln1 + lc;
    const bf16* qkv = b.qkv + 3 * lc;
    const bf16* atty = b.atty + lc;
    const float* lse = b.att_lse + ls * NH;
    const bf16* residual2 = b.residual2 + lc;
    const bf16* ln2 = b.ln2 + lc;
    const bf16* fch = b.fch + 4 * lc;
    const bf16* fch_gelu = b.fch_gelu + 4 * lc;

    // MLP branch: residual3 = residual2 + fc_proj(gelu(fc(ln2(residual2)))).
    // dbig = gelu'(fch) ⊙ (dresidual · fc_proj.w) (N, 4C).
    COHORT_TRY_VOID(mm.BackwardGelu(b.dbig, fch, m.G(w.fc_proj_w), m.G(w.fc_proj_b),
                                    b.dresidual, fch_gelu, m.Pb(w.fc_proj_w), N, 4 * C, C));
    COHORT_TRY_VOID(mm.Backward(b.dsmall, m.G(w.fc_w), m.G(w.fc_b), b.dbig, ln2, m.Pb(w.fc_w),
                                N, C, 4 * C));
    k::LayerNormBackward(b.dresidual, m.G(w.ln2_w), m.G(w.ln2_b), b.dsmall, residual2,
                         m.Pb(w.ln2_w), b.ln2_mean + ls, b.ln2_rstd + ls, N, C, b.scratch, st);
    // Attention branch: residual2 = residual + attn_proj(attention(qkv(ln1(residual)))).
    // dsmall = datty; dbig = dqkv (N, 3C); dsmall = dln1.
    COHORT_TRY_VOID(mm.Backward(b.dsmall, m.G(w.attn_proj_w), m.G(w.attn_proj_b), b.dresidual,
                                atty, m.Pb(w.attn_proj_w), N, C, C));
    COHORT_CUDA_CHECK(
        k::AttentionBackward(b.dbig, b.dsmall, qkv, atty, lse, B, T, C, NH, b.scratch, st));
    COHORT_TRY_VOID(mm.Backward(b.dsmall, m.G(w.qkv_w), m.G(w.qkv_b), b.dbig, ln1,
                                m.Pb(w.qkv_w), N, C, 3 * C));
    k::LayerNormBackward(b.dresidual, m.G(w.ln1_w), m.G(w.ln1_b), b.dsmall, residual,
                         m.Pb(w.ln1_w), b.ln1_mean + ls, b.ln1_rstd + ls, N, C, b.scratch, st);
    COHORT_CUDA_CHECK(cudaGetLastError());  // GptCudaModel::Backward (transformer block)
    COHORT_TRY_VOID(m.CloseGrads(gpiece(at)));
    COHORT_TRY_VOID(m.Unhold(piece(at + 1)));
    COHORT_TRY_VOID(m.Notify(slice++, ready));  // layer l
  }

  if (m.sink == nullptr) {
    k::EncoderBackward(m.G(lay.wte), m.G(lay.wpe), b.dresidual, b.tokens, B, T, C, b.scratch,
                       st);
    COHORT_CUDA_CHECK(cudaGetLastError());  // EncoderBackward
  } else {
    // wpe's piece, then wte's chunks of rows: each the head's part (into the zeroed piece
    // first, as the whole buffer gets it first: the same sums) and the token embedding's.
    for (size_t i = static_cast<size_t>(L) + 1; i < gpieces.size(); ++i) {
      const ParamPiece& p = gpieces[i];
      COHORT_TRY_VOID(m.OpenGrads(p));
      if (p.offset == lay.wpe) {
        k::EncoderShardBackward(nullptr, m.G(lay.wpe), b.dresidual, b.tokens, 0, 0, B, T, C,
                                b.scratch, st);
      } else {
        const int row0 = static_cast<int>((p.offset - lay.wte) / C);
        const int rows = static_cast<int>(p.count / C);
        COHORT_TRY_VOID(mm.BackwardWeightRows(m.G(p.offset), b.logits, b.lnf, N, C, m.Vp, row0,
                                              rows, alpha));
        k::EncoderShardBackward(m.G(p.offset), nullptr, b.dresidual, b.tokens, row0, rows, B, T,
                                C, b.scratch, st);
      }
      COHORT_CUDA_CHECK(cudaGetLastError());  // EncoderShardBackward (ZeRO piece)
      COHORT_TRY_VOID(m.CloseGrads(p));
    }
  }
  COHORT_TRY_VOID(m.Notify(slice++, ready));  // wpe
  COHORT_TRY_VOID(m.Notify(slice++, ready));  // wte
  return {};
}

Result<void> GptCudaModel::WaitGradsReady(size_t offset, size_t count) {
  // Called from the communication thread too: make the model's device current there (the
  // nccl communicator makes its own current again on each call).
  COHORT_TRY_VOID(impl_->UseDevice());
  const size_t end = offset + count;
  for (const Slice& s : impl_->slices) {
    if (s.offset >= end || s.offset + s.count <= offset) continue;
    COHORT_CUDA_CHECK(cudaEventSynchronize(s.event));
  }
  return {};
}

// ---------------------------------------------------------------------------------------

struct GptCudaAdamW::Impl {
  GptCudaModel* model = nullptr;
  std::unique_ptr<CudaAdamW> adam;  // the update (cuda_adamw.h) over the model's buffers
  // The norm, the clip factor and the norm's scratch
  char* arena = nullptr;
  double* norm_sq = nullptr;
  float* clip_scale = nullptr;
  void* scratch = nullptr;
  size_t bytes = 0;
  double* norm_host = nullptr;  // pinned

  ~Impl() {
    if (model != nullptr) (void)cudaStreamSynchronize(model->stream());
    if (norm_host != nullptr) (void)cudaFreeHost(norm_host);
    if (arena != nullptr) (void)cudaFree(arena);
  }
};

Result<std::unique_ptr<GptCudaAdamW>> GptCudaAdamW::Create(GptCudaModel& model,
                                                           const AdamWConfig& config) {
  COHORT_TRY_VOID(config.Validate());
  auto impl = std::make_unique<Impl>();
  Impl& o = *impl;
  o.model = &model;
  // The decay ranges as the CPU trainer builds them (one per tensor).
  std::vector<DecayRange> ranges;
  for (const ParamTensor& t : model.tensors()) {
    ranges.push_back({t.offset, t.numel, t.weight_decay});
  }
  o.adam = COHORT_TRY(CudaAdamW::Create(std::move(ranges), config, model.options().fused_adamw,
                                        model.device(), model.stream()));
  if (o.adam->n() != model.num_parameters()) {
    return Errorf(ErrorCode::kInternal, "parameter layout covers {} of {} values", o.adam->n(),
                  model.num_parameters());
  }
  const size_t n = model.num_parameters();
  COHORT_CUDA_CHECK(cudaSetDevice(model.device()));
  auto carve = [&](Carver& cv) {
    o.norm_sq = cv.Take<double>(1, nullptr);
    o.clip_scale = cv.Take<float>(1, nullptr);
    o.scratch = cv.Take<char>(std::max<size_t>(1, k::GradNormScratchBytes(n)), nullptr);
  };
  Carver sizing(nullptr);
  carve(sizing);
  o.bytes = sizing.total();
  o.arena = static_cast<char*>(
      COHORT_TRY(DeviceAlloc(o.bytes, "the gradient norm's scratch", model.device())));
  Carver cv(o.arena);
  carve(cv);
  void* pinned = nullptr;
  COHORT_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(double)));
  o.norm_host = static_cast<double*>(pinned);
  return std::unique_ptr<GptCudaAdamW>(new GptCudaAdamW(std::move(impl)));
}

GptCudaAdamW::GptCudaAdamW(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptCudaAdamW::~GptCudaAdamW() = default;

int64_t GptCudaAdamW::t() const { return impl_->adam->t(); }
std::span<float> GptCudaAdamW::m_device() { return impl_->adam->m_device(); }
std::span<float> GptCudaAdamW::v_device() { return impl_->adam->v_device(); }
size_t GptCudaAdamW::device_bytes() const { return impl_->bytes + impl_->adam->device_bytes(); }

Result<double> GptCudaAdamW::Step(float lr, double max_norm) {
  Impl& o = *impl_;
  GptCudaModel& model = *o.model;
  COHORT_CUDA_CHECK(cudaSetDevice(model.device()));
  cudaStream_t st = model.stream();
  const float* grads = model.grads_device().data();
  k::GlobalNormAndClipScale(o.norm_sq, o.clip_scale, grads, o.adam->n(),
                            static_cast<float>(max_norm), o.scratch, st);
  COHORT_TRY_VOID(o.adam->Step(model.params_device().data(), model.params_bf16_device(), grads,
                               lr, o.clip_scale));
  COHORT_CUDA_CHECK(
      cudaMemcpyAsync(o.norm_host, o.norm_sq, sizeof(double), cudaMemcpyDeviceToHost, st));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(st));
  return std::sqrt(*o.norm_host);
}

Result<void> GptCudaAdamW::CopyStateToHost(std::span<float> m, std::span<float> v) {
  return impl_->adam->CopyStateToHost(m, v);
}

Result<void> GptCudaAdamW::Restore(std::span<const float> m, std::span<const float> v,
                                   int64_t t) {
  return impl_->adam->Restore(m, v, t);
}

Result<void> GptCudaAdamW::SetStep(int64_t t) { return impl_->adam->SetStep(t); }

}  // namespace cohort::engine
