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
// pointers' alignments, which the heuristic takes into account) and cached in the Impl.
#include "engine/kernels/cuda/matmul.h"

#include <cublasLt.h>

#include <map>
#include <tuple>
#include <utility>

#include "common/cuda_status.h"
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

// One product D (m×n, column-major) = alpha·op(A)·op(B) [+ bias] [+ beta·D] in cuBLASLt's terms
// (see the top of the file for how each row-major product maps to it).
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
  const bf16* bias = nullptr;  // epilogue bias (length m), bf16; null for none
};

// Everything the heuristic's choice can depend on.
struct AlgoKey {
  int transa, transb, m, n, k, lda, ldb, ldd, d_type;
  bool accumulate, bias;
  uint32_t align_a, align_b, align_d, align_bias;
  auto operator<=>(const AlgoKey&) const = default;
};

AlgoKey KeyFor(const Gemm& g) {
  return AlgoKey{static_cast<int>(g.transa), static_cast<int>(g.transb), g.m, g.n, g.k, g.lda,
                 g.ldb, g.ldd, static_cast<int>(g.d_type), g.beta != 0.0f, g.bias != nullptr,
                 AlignmentOf(g.a), AlignmentOf(g.b), AlignmentOf(g.d), AlignmentOf(g.bias)};
}

}  // namespace

struct Matmul::Impl {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;        // kWorkspaceBytes, cuBLASLt's and BiasGradient's scratch
  void* bias_scratch = nullptr;     // only when BiasGradScratchBytes exceeds the workspace
  size_t bias_scratch_bytes = 0;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;

  ~Impl() {
    if (handle != nullptr) cublasLtDestroy(handle);
    if (workspace != nullptr) cudaFree(workspace);
    if (bias_scratch != nullptr) cudaFree(bias_scratch);
  }

  Result<void> Run(const Gemm& g) {
    MatmulDesc desc;
    COHORT_TRY_VOID(desc.Init());
    COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_TRANSA, g.transa));
    COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_TRANSB, g.transb));
    if (g.bias != nullptr) {
      COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS));
      const void* bias = g.bias;
      COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
      COHORT_TRY_VOID(desc.Set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF));
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
      COHORT_TRY_VOID(CheckLt(cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), a_layout.get(),
                                                             b_layout.get(), d_layout.get(),
                                                             d_layout.get(), pref.get(), 1,
                                                             &result, &found),
                              "cublasLtMatmulAlgoGetHeuristic"));
      if (found < 1) {
        return Errorf(ErrorCode::kInternal,
                      "cuBLASLt has no algorithm for m={} n={} k={} (transa={}, transb={}, "
                      "output {}, bias {})",
                      g.m, g.n, g.k, ta ? "T" : "N", tb ? "T" : "N",
                      g.d_type == CUDA_R_32F ? "float32" : "bf16", g.bias != nullptr);
      }
      it = algos.emplace(key, result.algo).first;
    }
    const float alpha = g.alpha, beta = g.beta;
    return CheckLt(cublasLtMatmul(handle, desc.get(), &alpha, g.a, a_layout.get(), g.b,
                                  b_layout.get(), &beta, g.d, d_layout.get(), g.d, d_layout.get(),
                                  &it->second, workspace, kWorkspaceBytes, stream),
                   "cublasLtMatmul");
  }

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

Result<Matmul> Matmul::Create(cudaStream_t stream) {
  auto* impl = new Impl;
  Matmul matmul(impl);  // owns impl from here on, whatever happens below
  impl->stream = stream;
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

}  // namespace

Result<void> Matmul::Forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, int N,
                             int C, int OC) {
  if (impl_ == nullptr) return MakeError(ErrorCode::kFailedPrecondition, "Matmul was moved from");
  COHORT_TRY_VOID(CheckShape(N, C, OC));
  if (out == nullptr || inp == nullptr || w == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument, "Matmul::Forward: null out, inp or w");
  }
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
  g.bias = bias;
  auto r = impl_->Run(g);
  if (!r) return std::unexpected(WithContext(r.error(), "matmul forward"));
  return {};
}

Result<void> Matmul::Backward(bf16* dinp, float* dw, float* dbias, const bf16* dout,
                              const bf16* inp, const bf16* w, int N, int C, int OC,
                              float alpha) {
  if (impl_ == nullptr) return MakeError(ErrorCode::kFailedPrecondition, "Matmul was moved from");
  COHORT_TRY_VOID(CheckShape(N, C, OC));
  if (dw == nullptr || dout == nullptr || inp == nullptr || (dinp != nullptr && w == nullptr)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "Matmul::Backward: null dw, dout or inp (or w with dinp)");
  }
  if (dbias != nullptr && alpha != 1.0f) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "Matmul::Backward: alpha must be 1 with a bias gradient, got {}", alpha);
  }
  if (dbias != nullptr) {
    void* scratch = COHORT_TRY(impl_->BiasScratch(BiasGradScratchBytes(N, OC)));
    BiasGradient(dbias, dout, N, OC, scratch, impl_->stream);
    COHORT_CUDA_CHECK(cudaGetLastError());  // matmul backward: bias gradient
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
    auto r = impl_->Run(g);
    if (!r) return std::unexpected(WithContext(r.error(), "matmul backward (dinp)"));
  }
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
  auto r = impl_->Run(g);
  if (!r) return std::unexpected(WithContext(r.error(), "matmul backward (dw)"));
  return {};
}

}  // namespace cohort::engine::cuda
