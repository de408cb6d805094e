// Matmul (matmul.h): cuBLASLt products, bf16 operands, float32 accumulation and scale.
//
// Row-major ↔ column-major. cuBLASLt is column-major: a row-major R×S matrix X with leading
// dimension S is, byte for byte, the column-major S×R matrix Xᵀ with leading dimension S.
// So every row-major product P = X·Y is computed as the column-major Pᵀ = Yᵀ·Xᵀ, whose
// operands are the buffers exactly as stored. Below, "cm(M, r×c, ld)" is the column-major
// view cuBLASLt receives, op() the transpose flag it applies, and cuBLASLt computes
// D (m×n) = op(A) (m×k) · op(B) (k×n).
//
//   Forward   out (N×OC) = inp (N×C) · wᵀ, w stored (OC×C):
//             outᵀ (OC×N) = w (OC×C) · inpᵀ (C×N)
//             A = w   as cm(wᵀ, C×OC, ld C),     op = T  → OC×C      m = OC
//             B = inp as cm(inpᵀ, C×N, ld C),    op = N  → C×N       n = N,  k = C
//             D = out as cm(outᵀ, OC×N, ld OC).  Bias: the epilogue adds bias[row of D] =
//             bias[oc] to every column, i.e. to every row n of out: the bias per feature.
//   dinp      dinp (N×C) = dout (N×OC) · w (OC×C):
//             dinpᵀ (C×N) = wᵀ (C×OC) · doutᵀ (OC×N)
//             A = w    as cm(wᵀ, C×OC, ld C),    op = N  → C×OC      m = C
//             B = dout as cm(doutᵀ, OC×N, ld OC), op = N → OC×N      n = N,  k = OC
//             D = dinp as cm(dinpᵀ, C×N, ld C), beta = 0 (overwritten).
//   dw        dw (OC×C) += doutᵀ (OC×N) · inp (N×C):
//             dwᵀ (C×OC) += inpᵀ (C×N) · dout (N×OC)
//             A = inp  as cm(inpᵀ, C×N, ld C),   op = N  → C×N       m = C
//             B = dout as cm(doutᵀ, OC×N, ld OC), op = T → N×OC      n = OC, k = N
//             C = D = dw as cm(dwᵀ, C×OC, ld C), float32, beta = 1 (accumulate).
// The stored (pre-op) shape of A is m×k when op = N and k×m when op = T; B likewise k×n or
// n×k.
//
// Types: A, B bf16; C/D bf16 (forward, dinp) or float32 (dw); CUBLAS_COMPUTE_32F with a
// float32 scale type: all combinations cuBLASLt supports. Algorithms come from the
// heuristic, asked once per distinct problem (shapes, transposes, types, epilogue and the
// pointers' alignments, which the heuristic takes into account) and cached in the Impl,
// together with the problems it had no algorithm for.
//
// Epilogues, in the terms above (cublasLt.h's cublasLtEpilogue_t; D is m×n):
//   GELU_AUX_BIAS (ForwardGelu, the forward's mapping): D = gelu(op(A)·op(B) + bias), and
//             the pre-activation op(A)·op(B) + bias into the aux matrix, which has D's
//             shape, type (bf16) and here its ld (OC; cuBLASLt wants ld % 8 == 0 and
//             ld >= m). cuBLASLt's GELU is the tanh approximation (PyTorch's
//             _addmm_activation relies on it: gelu(approximate="tanh") on its other paths).
//   DGELU     (BackwardGelu, dinp's mapping): D = gelu'(aux) ⊙ op(A)·op(B), aux the
//             pre-activation (C×N, ld C), an input here.
//   BGRADB    (bias gradient, dw's mapping): op(B)'s sums over the k dimension, one per
//             column of D. op(B) is dout (N×OC as the top of the file shows: B = dout as
//             cm(doutᵀ, OC×N) with op T), k = N, so the vector is Σ_rows dout, length OC =
//             n. (BGRADA would reduce op(A), which is inpᵀ: the wrong operand.) cuBLASLt
//             STORES it (no accumulation) at the bias pointer in D's type (float32 here),
//             so it lands in a scratch vector that BiasGradAccumulate adds to dbias.
#include "engine/kernels/cuda/matmul.h"

#include <cublasLt.h>

#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "common/cuda_status.h"
#include "engine/kernels/cuda/gelu.cuh"
#include "engine/kernels/cuda/matmul.cuh"

namespace cohort::engine::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// kResourceExhausted when cuBLASLt could not allocate, else kInternal.
Result<void> CheckLt(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return {};
  const ErrorCode code = status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted
                                                              : ErrorCode::kInternal;
  return Errorf(code, "cuBLASLt {}: {}: {}", what, cublasLtGetStatusName(status),
                cublasLtGetStatusString(status));
}

// The largest power of two (at most 256) dividing the address: the alignment to promise
// the heuristic (256 for null, which cuBLASLt does not read).
uint32_t AlignmentOf(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  const uintptr_t lowest = a & (~a + 1);
  return static_cast<uint32_t>(lowest < 256 ? lowest : 256);
}

// Owners of the cuBLASLt descriptors of one call (destroyed at scope exit).
class MatmulDesc {
 public:
  ~MatmulDesc() {
    if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
  }
  Result<void> Init() {
    return CheckLt(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                   "cublasLtMatmulDescCreate");
  }
  template <typename T>
  Result<void> Set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    return CheckLt(cublasLtMatmulDescSetAttribute(desc_, attr, &value, sizeof(value)),
                   "cublasLtMatmulDescSetAttribute");
  }
  cublasLtMatmulDesc_t get() const { return desc_; }

 private:
  cublasLtMatmulDesc_t desc_ = nullptr;
};

class Layout {
 public:
  ~Layout() {
    if (layout_ != nullptr) cublasLtMatrixLayoutDestroy(layout_);
  }
  Result<void> Init(cudaDataType_t type, int rows, int cols, int ld) {
    return CheckLt(cublasLtMatrixLayoutCreate(&layout_, type, static_cast<uint64_t>(rows),
                                              static_cast<uint64_t>(cols), ld),
                   "cublasLtMatrixLayoutCreate");
  }
  cublasLtMatrixLayout_t get() const { return layout_; }

 private:
  cublasLtMatrixLayout_t layout_ = nullptr;
};

class Preference {
 public:
  ~Preference() {
    if (pref_ != nullptr) cublasLtMatmulPreferenceDestroy(pref_);
  }
  Result<void> Init() {
    return CheckLt(cublasLtMatmulPreferenceCreate(&pref_), "cublasLtMatmulPreferenceCreate");
  }
  template <typename T>
  Result<void> Set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    return CheckLt(cublasLtMatmulPreferenceSetAttribute(pref_, attr, &value, sizeof(value)),
                   "cublasLtMatmulPreferenceSetAttribute");
  }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

// One product D (m×n, column-major) = alpha·op(A)·op(B) [+ bias] [+ beta·D] in cuBLASLt's
// terms (see the top of the file for how each row-major product maps to it), with its
// epilogue.
struct Gemm {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* d = nullptr;  // also C
  cudaDataType_t d_type = CUDA_R_16BF;
  int ldd = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  // DEFAULT, BIAS, GELU_AUX[_BIAS], DGELU or BGRADB (see the top of the file).
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  // The bias (length m, bf16) for BIAS and GELU_AUX_BIAS; the bias gradient's output
  // (length n, d_type) for BGRADB; null otherwise.
  const void* bias = nullptr;
  void* aux = nullptr;  // GELU_AUX*: the pre-activation (out); DGELU: (in); D's shape, bf16
  int aux_ld = 0;

  // An epilogue that some other path can stand in for (the kernels): a missing algorithm
  // is a fallback, not an error.
  bool optional_epilogue() const {
    return epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_BIAS;
  }
};

// Everything the heuristic's choice can depend on.
struct AlgoKey {
  int transa, transb, m, n, k, lda, ldb, ldd, d_type;
  bool accumulate;
  uint32_t epilogue;
  int aux_ld;
  uint32_t align_a, align_b, align_d, align_bias, align_aux;
  auto operator<=>(const AlgoKey&) const = default;
};

AlgoKey KeyFor(const Gemm& g) {
  return AlgoKey{static_cast<int>(g.transa), static_cast<int>(g.transb), g.m, g.n, g.k, g.lda,
                 g.ldb, g.ldd, static_cast<int>(g.d_type), g.beta != 0.0f,
                 static_cast<uint32_t>(g.epilogue), g.aux_ld, AlignmentOf(g.a), AlignmentOf(g.b),
                 AlignmentOf(g.d), AlignmentOf(g.bias), AlignmentOf(g.aux)};
}

const char* EpilogueName(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "other";
  }
}

}  // namespace

struct Matmul::Impl {
  cudaStream_t stream = nullptr;
  MatmulOptions options;
  MatmulFallbacks fallbacks;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;        // kWorkspaceBytes, cuBLASLt's and BiasGradient's scratch
  void* bias_scratch = nullptr;     // only when BiasGradScratchBytes exceeds the workspace
  size_t bias_scratch_bytes = 0;
  float* bgrad = nullptr;           // BGRADB's output, added to dbias; bgrad_count floats
  size_t bgrad_count = 0;
  // The heuristic's algorithm per problem; nullopt: it had none (an epilogue's fallback).
  std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> algos;

  ~Impl() {
    if (handle != nullptr) cublasLtDestroy(handle);
    if (workspace != nullptr) cudaFree(workspace);
    if (bias_scratch != nullptr) cudaFree(bias_scratch);
    if (bgrad != nullptr) cudaFree(bgrad);
  }

  // Runs the product: true. False only for an optional epilogue (Gemm::optional_epilogue)
  // that cuBLASLt has no algorithm for (or refuses when called): nothing ran, the caller
  // takes the kernels' path, and later calls with the same problem go there directly.
  Result<bool> Run(const Gemm& g) {
    // cuBLASLt's rule for the GELU aux matrix; ask only for what it may accept.
    if (g.aux != nullptr && (g.aux_ld % 8 != 0 || g.aux_ld < g.m)) return false;
    MatmulDesc desc;
    COHORT_TRY_VOID(desc.Init());
    COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_TRANSA, g.transa));
    COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_TRANSB, g.transb));
    if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue));
    }
    if (g.bias != nullptr) {
      const void* bias = g.bias;
      COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
      const cudaDataType_t bias_type =
          g.epilogue == CUBLASLT_EPILOGUE_BGRADB ? g.d_type : CUDA_R_16BF;
      COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type));
    }
    if (g.aux != nullptr) {
      void* aux = g.aux;
      COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux));
      COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{g.aux_ld}));
      COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, CUDA_R_16BF));
    }
    // Stored shapes: A is m×k (op N) or k×m (op T); B is k×n (op N) or n×k (op T).
    const bool ta = g.transa == CUBLAS_OP_T, tb = g.transb == CUBLAS_OP_T;
    Layout a_layout, b_layout, d_layout;
    COHORT_TRY_VOID(a_layout.Init(CUDA_R_16BF, ta ? g.k : g.m, ta ? g.m : g.k, g.lda));
    COHORT_TRY_VOID(b_layout.Init(CUDA_R_16BF, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb));
    COHORT_TRY_VOID(d_layout.Init(g.d_type, g.m, g.n, g.ldd));

    const AlgoKey key = KeyFor(g);
    auto it = algos.find(key);
    if (it == algos.end()) {
      Preference pref;
      COHORT_TRY_VOID(pref.Init());
      COHORT_TRY_VOID(pref.Set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kWorkspaceBytes));
      COHORT_TRY_VOID(pref.Set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a));
      COHORT_TRY_VOID(pref.Set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b));
      COHORT_TRY_VOID(pref.Set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d));
      COHORT_TRY_VOID(pref.Set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t status =
          cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), a_layout.get(), b_layout.get(),
                                         d_layout.get(), d_layout.get(), pref.get(), 1, &result,
                                         &found);
      // An epilogue the library does not support on this problem answers NOT_SUPPORTED (or
      // INVALID_VALUE for a combination it rejects) or finds nothing: the kernels stand in.
      const bool declined = status == CUBLAS_STATUS_NOT_SUPPORTED ||
                            status == CUBLAS_STATUS_INVALID_VALUE || (status == 0 && found < 1);
      if (g.optional_epilogue() && declined) {
        algos.emplace(key, std::nullopt);
        return false;
      }
      COHORT_TRY_VOID(CheckLt(status, "cublasLtMatmulAlgoGetHeuristic"));
      if (found < 1) {
        return Errorf(ErrorCode::kInternal,
                      "cuBLASLt has no algorithm for m={} n={} k={} (transa={}, transb={}, "
                      "output {}, epilogue {})",
                      g.m, g.n, g.k, ta ? "T" : "N", tb ? "T" : "N",
                      g.d_type == CUDA_R_32F ? "float32" : "bf16", EpilogueName(g.epilogue));
      }
      it = algos.emplace(key, result.algo).first;
    }
    if (!it->second.has_value()) return false;
    const float alpha = g.alpha, beta = g.beta;
    const cublasStatus_t status = cublasLtMatmul(
        handle, desc.get(), &alpha, g.a, a_layout.get(), g.b, b_layout.get(), &beta, g.d,
        d_layout.get(), g.d, d_layout.get(), &*it->second, workspace, kWorkspaceBytes, stream);
    // cublasLtMatmul validates before it launches: an optional epilogue it refuses here
    // (NOT_SUPPORTED, INVALID_VALUE) left no work behind, and the kernels can stand in.
    if (g.optional_epilogue() &&
        (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
      it->second.reset();
      return false;
    }
    COHORT_TRY_VOID(CheckLt(status, "cublasLtMatmul"));
    return true;
  }

  // A product without an optional epilogue: running is the only success.
  Result<void> RunPlain(const Gemm& g) {
    const bool ran = COHORT_TRY(Run(g));
    if (!ran) return MakeError(ErrorCode::kInternal, "cuBLASLt declined a plain product");
    return {};
  }

  // Device memory for `count` floats of BGRADB output, kept for later calls (grown with a
  // cudaFree, which waits for the device, so earlier work on the old buffer is done).
  Result<float*> BiasGradOut(size_t count) {
    if (count > bgrad_count) {
      if (bgrad != nullptr) {
        COHORT_CUDA_CHECK(cudaFree(bgrad));
        bgrad = nullptr;
        bgrad_count = 0;
      }
      void* p = nullptr;
      COHORT_CUDA_CHECK(cudaMalloc(&p, count * sizeof(float)));
      bgrad = static_cast<float*>(p);
      bgrad_count = count;
    }
    return bgrad;
  }

  Result<void> Backward(bf16* dinp, const bf16* pre, float* dw, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* w, int N, int C, int OC, float alpha);

  // Device memory of at least `bytes` for BiasGradient: the workspace when it is large
  // enough (BiasGradient runs on the same stream as the products, so their uses are
  // ordered), else a buffer kept for later calls.
  Result<void*> BiasScratch(size_t bytes) {
    if (bytes <= kWorkspaceBytes) return workspace;
    if (bytes > bias_scratch_bytes) {
      if (bias_scratch != nullptr) {
        // cudaFree waits for the device, so earlier work on the old buffer is done.
        COHORT_CUDA_CHECK(cudaFree(bias_scratch));
        bias_scratch = nullptr;
        bias_scratch_bytes = 0;
      }
      COHORT_CUDA_CHECK(cudaMalloc(&bias_scratch, bytes));
      bias_scratch_bytes = bytes;
    }
    return bias_scratch;
  }
};

Result<Matmul> Matmul::Create(cudaStream_t stream, const MatmulOptions& options) {
  auto* impl = new Impl;
  Matmul matmul(impl);  // owns impl from here on, whatever happens below
  impl->stream = stream;
  impl->options = options;
  COHORT_TRY_VOID(CheckLt(cublasLtCreate(&impl->handle), "cublasLtCreate"));
  COHORT_CUDA_CHECK(cudaMalloc(&impl->workspace, kWorkspaceBytes));
  return matmul;
}

Matmul::Matmul(Impl* impl) : impl_(impl) {}
Matmul::Matmul(Matmul&& other) noexcept : impl_(std::exchange(other.impl_, nullptr)) {}
Matmul& Matmul::operator=(Matmul&& other) noexcept {
  if (this != &other) {
    delete impl_;
    impl_ = std::exchange(other.impl_, nullptr);
  }
  return *this;
}
Matmul::~Matmul() { delete impl_; }

namespace {

Result<void> CheckShape(int N, int C, int OC) {
  if (N <= 0 || C <= 0 || OC <= 0) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "matmul shape must be positive, got N={} C={} OC={}", N, C, OC);
  }
  return {};
}

// Whether [a, a + count) and [b, b + count) share a byte (bf16 elements).
bool Overlap(const bf16* a, const bf16* b, size_t count) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  const uintptr_t bytes = count * sizeof(bf16);
  return x < y + bytes && y < x + bytes;
}

// The forward product (see the top of the file): out = inp · wᵀ [+ bias].
Gemm ForwardGemm(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int N, int C,
                 int OC) {
  Gemm g;
  g.transa = CUBLAS_OP_T;
  g.transb = CUBLAS_OP_N;
  g.m = OC;
  g.n = N;
  g.k = C;
  g.a = w;
  g.lda = C;
  g.b = inp;
  g.ldb = C;
  g.d = out;
  g.d_type = CUDA_R_16BF;
  g.ldd = OC;
  g.beta = 0.0f;
  g.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  g.bias = bias;
  return g;
}

}  // namespace

Result<void> Matmul::Forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int N,
                             int C, int OC) {
  if (impl_ == nullptr) return MakeError(ErrorCode::kFailedPrecondition, "Matmul was moved from");
  COHORT_TRY_VOID(CheckShape(N, C, OC));
  if (out == nullptr || inp == nullptr || w == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument, "Matmul::Forward: null out, inp or w");
  }
  auto r = impl_->RunPlain(ForwardGemm(out, inp, w, bias, N, C, OC));
  if (!r) return std::unexpected(WithContext(r.error(), "matmul forward"));
  return {};
}

Result<void> Matmul::ForwardGelu(bf16* out, bf16* pre, const bf16* inp, const bf16* w,
                                 const bf16* bias, int N, int C, int OC) {
  if (impl_ == nullptr) return MakeError(ErrorCode::kFailedPrecondition, "Matmul was moved from");
  COHORT_TRY_VOID(CheckShape(N, C, OC));
  if (out == nullptr || pre == nullptr || inp == nullptr || w == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument, "Matmul::ForwardGelu: null out, pre, inp or w");
  }
  const size_t count = static_cast<size_t>(N) * OC;
  if (Overlap(out, pre, count)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "Matmul::ForwardGelu: out and pre overlap ({} x {} values each)", N, OC);
  }
  if (impl_->options.gelu_epilogue) {
    Gemm g = ForwardGemm(out, inp, w, bias, N, C, OC);
    g.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    g.aux = pre;
    g.aux_ld = OC;
    auto ran = impl_->Run(g);
    if (!ran) return std::unexpected(WithContext(ran.error(), "matmul forward (GELU epilogue)"));
    if (*ran) return {};
    ++impl_->fallbacks.gelu_forward;
  }
  COHORT_TRY_VOID(Forward(pre, inp, w, bias, N, C, OC));
  GeluForward(out, pre, count, impl_->stream);
  COHORT_CUDA_CHECK(cudaGetLastError());  // matmul forward: GELU
  return {};
}

Result<void> Matmul::Backward(bf16* dinp, float* dw, float* dbias, const bf16* dout,
                              const bf16* inp, const bf16* w, int N, int C, int OC,
                              float alpha) {
  if (impl_ == nullptr) return MakeError(ErrorCode::kFailedPrecondition, "Matmul was moved from");
  return impl_->Backward(dinp, nullptr, dw, dbias, dout, inp, w, N, C, OC, alpha);
}

Result<void> Matmul::BackwardGelu(bf16* dinp, const bf16* pre, float* dw, float* dbias,
                                  const bf16* dout, const bf16* inp, const bf16* w, int N, int C,
                                  int OC) {
  if (impl_ == nullptr) return MakeError(ErrorCode::kFailedPrecondition, "Matmul was moved from");
  if (dinp == nullptr || pre == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument, "Matmul::BackwardGelu: null dinp or pre");
  }
  if (N > 0 && C > 0 && Overlap(dinp, pre, static_cast<size_t>(N) * C)) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "Matmul::BackwardGelu: dinp and pre overlap ({} x {} values each)", N, C);
  }
  return impl_->Backward(dinp, pre, dw, dbias, dout, inp, w, N, C, OC, 1.0f);
}

Result<void> Matmul::BackwardWeightRows(float* dw, const bf16* dout, const bf16* inp, int N,
                                        int C, int OC, int row0, int rows, float alpha) {
  if (impl_ == nullptr) return MakeError(ErrorCode::kFailedPrecondition, "Matmul was moved from");
  COHORT_TRY_VOID(CheckShape(N, C, OC));
  if (dw == nullptr || dout == nullptr || inp == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument, "Matmul::BackwardWeightRows: null dw, dout or inp");
  }
  if (row0 < 0 || rows < 1 || row0 + rows > OC || row0 % 8 != 0) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "Matmul::BackwardWeightRows: rows [{}, {}) of {} (row0 a multiple of 8)", row0,
                  row0 + rows, OC);
  }
  Gemm g;
  g.transa = CUBLAS_OP_N;
  g.transb = CUBLAS_OP_T;
  g.m = C;
  g.n = rows;
  g.k = N;
  g.a = inp;
  g.lda = C;
  g.b = dout + row0;
  g.ldb = OC;
  g.d = dw;
  g.d_type = CUDA_R_32F;
  g.ldd = C;
  g.alpha = alpha;
  g.beta = 1.0f;
  auto r = impl_->RunPlain(g);
  if (!r) return std::unexpected(WithContext(r.error(), "matmul backward (dw rows)"));
  return {};
}

const MatmulOptions& Matmul::options() const { return impl_->options; }
MatmulFallbacks Matmul::fallbacks() const {
  return impl_ == nullptr ? MatmulFallbacks{} : impl_->fallbacks;
}

// Backward and BackwardGelu (pre non-null: the dinp product goes through gelu').
Result<void> Matmul::Impl::Backward(bf16* dinp, const bf16* pre, float* dw, float* dbias,
                                    const bf16* dout, const bf16* inp, const bf16* w, int N,
                                    int C, int OC, float alpha) {
  COHORT_TRY_VOID(CheckShape(N, C, OC));
  if (dout == nullptr || (dw != nullptr && inp == nullptr) || (dinp != nullptr && w == nullptr) ||
      (dw == nullptr && (dinp == nullptr || dbias != nullptr))) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "Matmul::Backward: null dout, inp with dw, w with dinp, or neither dinp nor "
                     "dw (or dbias without dw)");
  }
  if (dbias != nullptr && alpha != 1.0f) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "Matmul::Backward: alpha must be 1 with a bias gradient, got {}", alpha);
  }
  if (dinp != nullptr) {
    Gemm g;
    g.transa = CUBLAS_OP_N;
    g.transb = CUBLAS_OP_N;
    g.m = C;
    g.n = N;
    g.k = OC;
    g.a = w;
    g.lda = C;
    g.b = dout;
    g.ldb = OC;
    g.d = dinp;
    g.d_type = CUDA_R_16BF;
    g.ldd = C;
    g.alpha = alpha;
    g.beta = 0.0f;
    bool done = false;
    if (pre != nullptr && options.gelu_epilogue) {
      Gemm e = g;
      e.epilogue = CUBLASLT_EPILOGUE_DGELU;
      e.aux = const_cast<bf16*>(pre);  // an input for DGELU; the attribute is one pointer
      e.aux_ld = C;
      auto ran = Run(e);
      if (!ran) return std::unexpected(WithContext(ran.error(), "matmul backward (DGELU)"));
      done = *ran;
      if (!done) ++fallbacks.gelu_backward;
    }
    if (!done) {
      auto r = RunPlain(g);
      if (!r) return std::unexpected(WithContext(r.error(), "matmul backward (dinp)"));
      if (pre != nullptr) {
        GeluBackward(dinp, pre, dinp, static_cast<size_t>(N) * C, stream);
        COHORT_CUDA_CHECK(cudaGetLastError());  // matmul backward: GELU
      }
    }
  }
  if (dw == nullptr) return {};  // dinp only (a weight whose gradient is taken later)
  Gemm g;
  g.transa = CUBLAS_OP_N;
  g.transb = CUBLAS_OP_T;
  g.m = C;
  g.n = OC;
  g.k = N;
  g.a = inp;
  g.lda = C;
  g.b = dout;
  g.ldb = OC;
  g.d = dw;
  g.d_type = CUDA_R_32F;
  g.ldd = C;
  g.alpha = alpha;
  g.beta = 1.0f;
  if (dbias != nullptr && options.bias_grad_epilogue) {
    Gemm e = g;
    e.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    e.bias = COHORT_TRY(BiasGradOut(static_cast<size_t>(OC)));
    auto ran = Run(e);
    if (!ran) return std::unexpected(WithContext(ran.error(), "matmul backward (dw, BGRADB)"));
    if (*ran) {
      BiasGradAccumulate(dbias, static_cast<const float*>(e.bias), OC, stream);
      COHORT_CUDA_CHECK(cudaGetLastError());  // matmul backward: bias gradient (epilogue)
      return {};
    }
    ++fallbacks.bias_grad;
  }
  if (dbias != nullptr) {
    void* scratch = COHORT_TRY(BiasScratch(BiasGradScratchBytes(N, OC)));
    BiasGradient(dbias, dout, N, OC, scratch, stream);
    COHORT_CUDA_CHECK(cudaGetLastError());  // matmul backward: bias gradient
  }
  auto r = RunPlain(g);
  if (!r) return std::unexpected(WithContext(r.error(), "matmul backward (dw)"));
  return {};
}

}  // namespace cohort::engine::cuda
