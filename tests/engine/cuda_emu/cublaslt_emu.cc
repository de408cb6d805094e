// A host implementation of the part of cuBLASLt that matmul.cc uses, so that matmul.cc itself
// (its descriptors, transposes, leading dimensions, epilogue, beta accumulation and algorithm
// cache) runs in the CPU-emulated tests, and with it the whole GptCudaModel.
//
// It follows the cuBLASLt documentation, not matmul.cc's comments:
//   - matrices are column-major; a layout is (type, rows, cols, ld) with ld ≥ rows;
//   - cublasLtMatmul computes D = alpha·op(A)·op(B) + beta·C [+ bias], D m×n with m, n the
//     rows and columns of D's layout; op(A) must be m×k and op(B) k×n, where op(X) = X for
//     CUBLAS_OP_N and Xᵀ for CUBLAS_OP_T, and k is read from A's layout; C must have D's
//     shape; C is not read when beta is 0 (so poisoned outputs stay harmless);
//   - CUBLASLT_EPILOGUE_BIAS adds a vector with one element per row of D, to every column;
//   - GELU_AUX[_BIAS]: D = gelu(x) with x = alpha·op(A)·op(B) [+ bias], and x itself into the
//     aux matrix (EPILOGUE_AUX_POINTER, D's shape, ld EPILOGUE_AUX_LD, which must be a
//     multiple of 8 and >= D's rows; type EPILOGUE_AUX_DATA_TYPE, default D's type). GELU is
//     the tanh approximation (what cuBLASLt computes; PyTorch's _addmm_activation relies on
//     it), here in float32 with tanhf;
//   - DGELU: D = gelu'(aux) ⊙ alpha·op(A)·op(B), the aux matrix an input with the same rules;
//   - BGRADA / BGRADB: besides D, STORE (not add) at the bias pointer the sums of op(A)'s
//     rows (length m) / op(B)'s columns (length n) over the k dimension, in the bias type,
//     which must be D's type (the default); summed in float32 in k order;
//   - GELU and DGELU with beta != 0 are refused (NOT_SUPPORTED): matmul.cc never asks, and
//     the documentation does not say where C enters;
//   - attributes are checked for their exact sizes, as the library does;
//   - the algorithm returned by the heuristic remembers the alignments it was promised, and
//     cublasLtMatmul refuses pointers that break them (the library's algorithms may read
//     with wider loads than the pointers allow);
//   - only the combinations matmul.cc asks for are supported: A, B bf16, C = D bf16 or
//     float32, CUBLAS_COMPUTE_32F with a float32 scale, alpha/beta on the host. Anything
//     else is CUBLAS_STATUS_NOT_SUPPORTED, so a change in matmul.cc cannot silently run on
//     semantics this file does not implement.
// The products accumulate in float32, one k after another (the library's order differs; the
// parity bounds are bf16's). Everything is synchronous, like the rest of the emulator.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cublaslt_emu.h"

namespace {

// CohortEmuCublasLtDeclineEpilogue's set, indexed by epilogue value (all below 1024).
std::atomic<bool> g_declined[1024];

struct EmuLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};

struct EmuDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t aux_type = -1;  // -1: D's type
};

bool IsGeluForward(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool UsesAux(uint32_t e) { return IsGeluForward(e) || e == CUBLASLT_EPILOGUE_DGELU; }
bool AddsBias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool IsBiasGrad(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;
float Gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
}
float GeluGrad(float x) {
  const float th = std::tanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x));
  return 0.5f * (1.0f + th) +
         0.5f * x * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
}

struct EmuPref {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};

// What the algorithm carries: the alignments the heuristic was promised.
struct EmuAlgo {
  uint32_t magic;
  uint32_t align[4];
};
constexpr uint32_t kAlgoMagic = 0xc0401e7u;
static_assert(sizeof(EmuAlgo) <= sizeof(cublasLtMatmulAlgo_t));

EmuLayout* L(cublasLtMatrixLayout_t p) { return reinterpret_cast<EmuLayout*>(p); }
EmuDesc* D(cublasLtMatmulDesc_t p) { return reinterpret_cast<EmuDesc*>(p); }
EmuPref* P(cublasLtMatmulPreference_t p) { return reinterpret_cast<EmuPref*>(p); }

template <typename T>
cublasStatus_t Store(T& field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool Aligned(const void* p, uint32_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The checks cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul share: supported types and
// consistent shapes. Sets m, n, k.
cublasStatus_t CheckProblem(const EmuDesc& d, const EmuLayout& a, const EmuLayout& b,
                            const EmuLayout& c, const EmuLayout& dl, uint64_t* m, uint64_t* n,
                            uint64_t* k) {
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (a.type != CUDA_R_16BF || b.type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (dl.type != CUDA_R_16BF && dl.type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (c.type != dl.type || c.rows != dl.rows || c.cols != dl.cols) return CUBLAS_STATUS_INVALID_VALUE;
  if ((d.transa != CUBLAS_OP_N && d.transa != CUBLAS_OP_T) ||
      (d.transb != CUBLAS_OP_N && d.transb != CUBLAS_OP_T)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const uint32_t e = d.epilogue;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && !AddsBias(e) && !UsesAux(e) && !IsBiasGrad(e)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const int32_t bias_type = d.bias_type < 0 ? dl.type : d.bias_type;
  if (AddsBias(e) && (bias_type != CUDA_R_16BF || dl.type != CUDA_R_16BF)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (UsesAux(e)) {
    const int32_t aux_type = d.aux_type < 0 ? dl.type : d.aux_type;
    if (dl.type != CUDA_R_16BF || aux_type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d.aux_ld % 8 != 0 || d.aux_ld < static_cast<int64_t>(dl.rows)) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (IsBiasGrad(e) && bias_type != dl.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  *m = dl.rows;
  *n = dl.cols;
  const bool ta = d.transa == CUBLAS_OP_T, tb = d.transb == CUBLAS_OP_T;
  *k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != *m) return CUBLAS_STATUS_INVALID_VALUE;
  if ((tb ? b.cols : b.rows) != *k || (tb ? b.rows : b.cols) != *n) return CUBLAS_STATUS_INVALID_VALUE;
  for (const EmuLayout* l : {&a, &b, &c, &dl}) {
    if (l->rows == 0 || l->cols == 0 || l->ld < static_cast<int64_t>(l->rows)) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

float LoadBf16(const void* base, uint64_t i) {
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new int(1));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<int*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(emulator: other)";
  }
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument (emulated cuBLASLt)";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported by the emulated cuBLASLt";
    default: return "emulated cuBLASLt";
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new EmuLayout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete L(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new EmuDesc;
  d->compute = compute;
  d->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete D(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  EmuDesc& d = *D(desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return Store(d.transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return Store(d.transb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return Store(d.epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return Store(d.bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return Store(d.bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return Store(d.aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return Store(d.aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return Store(d.aux_type, buf, size);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new EmuPref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete P(pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  EmuPref& p = *P(pref);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return Store(p.max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return Store(p.align[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return Store(p.align[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return Store(p.align[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return Store(p.align[3], buf, size);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  if (handle == nullptr || desc == nullptr || pref == nullptr || results == nullptr ||
      returned == nullptr || requested < 1) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  uint64_t m, n, k;
  const cublasStatus_t s = CheckProblem(*D(desc), *L(a), *L(b), *L(c), *L(d), &m, &n, &k);
  *returned = 0;
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const uint32_t e = D(desc)->epilogue;
  if (e < 1024 && g_declined[e].load()) return CUBLAS_STATUS_SUCCESS;  // no algorithm
  std::memset(&results[0], 0, sizeof(results[0]));
  EmuAlgo algo{kAlgoMagic, {}};
  for (int i = 0; i < 4; ++i) {
    const uint32_t al = P(pref)->align[i];
    if (al == 0 || (al & (al - 1)) != 0) return CUBLAS_STATUS_INVALID_VALUE;
    algo.align[i] = al;
  }
  std::memcpy(&results[0].algo, &algo, sizeof(algo));
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha_p, const void* A, cublasLtMatrixLayout_t a_desc,
                              const void* B, cublasLtMatrixLayout_t b_desc, const void* beta_p,
                              const void* C, cublasLtMatrixLayout_t c_desc, void* Dp,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo_p,
                              void* workspace, size_t workspace_bytes, cudaStream_t) {
  if (handle == nullptr || desc == nullptr || alpha_p == nullptr || beta_p == nullptr ||
      algo_p == nullptr || A == nullptr || B == nullptr || Dp == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (workspace == nullptr && workspace_bytes > 0) return CUBLAS_STATUS_INVALID_VALUE;
  const EmuDesc& d = *D(desc);
  const EmuLayout &a = *L(a_desc), &b = *L(b_desc), &c = *L(c_desc), &dl = *L(d_desc);
  uint64_t m, n, k;
  const cublasStatus_t s = CheckProblem(d, a, b, c, dl, &m, &n, &k);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  EmuAlgo algo;
  std::memcpy(&algo, algo_p, sizeof(algo));
  if (algo.magic != kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;
  if (!Aligned(A, algo.align[0]) || !Aligned(B, algo.align[1]) || !Aligned(C, algo.align[2]) ||
      !Aligned(Dp, algo.align[3])) {
    return CUBLAS_STATUS_INVALID_VALUE;  // the algorithm was chosen for wider alignment
  }
  const uint32_t e = d.epilogue;
  const bool with_bias = AddsBias(e);
  if ((with_bias || IsBiasGrad(e)) && d.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (UsesAux(e) && d.aux == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  float alpha, beta;
  std::memcpy(&alpha, alpha_p, sizeof(float));
  std::memcpy(&beta, beta_p, sizeof(float));
  if (beta != 0.0f && C == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (beta != 0.0f && UsesAux(e)) return CUBLAS_STATUS_NOT_SUPPORTED;

  // op(A) as m rows of k (row i contiguous), op(B) as n columns of k (column j contiguous).
  const bool ta = d.transa == CUBLAS_OP_T, tb = d.transb == CUBLAS_OP_T;
  std::vector<float> opa(m * k), opb(n * k);
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t kk = 0; kk < k; ++kk) {
      // A(row, col) at row + col·ld; op(A)(i, kk) = A(i, kk) or A(kk, i).
      opa[i * k + kk] = LoadBf16(A, ta ? kk + i * a.ld : i + kk * a.ld);
    }
  }
  for (uint64_t j = 0; j < n; ++j) {
    for (uint64_t kk = 0; kk < k; ++kk) {
      opb[j * k + kk] = LoadBf16(B, tb ? j + kk * b.ld : kk + j * b.ld);
    }
  }
  // The products: each element sums its k products in k order, as before, but a block of
  // rows at a time from op(A) stored k-major, so the rows' sums are independent lanes the
  // compiler vectorises (-O3 in cuda_emu.cmake; no reassociation, so the same bits).
  std::vector<float> opa_k(m * k);
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t kk = 0; kk < k; ++kk) opa_k[kk * m + i] = opa[i * k + kk];
  }
  constexpr uint64_t kRows = 256;
  float sums[kRows];
  for (uint64_t j = 0; j < n; ++j) {
    const float* y = &opb[j * k];
    for (uint64_t i0 = 0; i0 < m; i0 += kRows) {
      const uint64_t rows = std::min(kRows, m - i0);
      std::fill(sums, sums + rows, 0.0f);
      for (uint64_t kk = 0; kk < k; ++kk) {
        const float* x = &opa_k[kk * m + i0];
        const float yk = y[kk];
        for (uint64_t r = 0; r < rows; ++r) sums[r] += x[r] * yk;
      }
      for (uint64_t r = 0; r < rows; ++r) {
        const uint64_t i = i0 + r;
        float v = alpha * sums[r];
        const uint64_t ci = i + j * static_cast<uint64_t>(c.ld);
        if (beta != 0.0f) {
          v += beta * (c.type == CUDA_R_32F ? static_cast<const float*>(C)[ci] : LoadBf16(C, ci));
        }
        if (with_bias) v += LoadBf16(d.bias, i);
        const uint64_t ai = i + j * static_cast<uint64_t>(d.aux_ld);
        if (IsGeluForward(e)) {
          static_cast<__nv_bfloat16*>(d.aux)[ai] = __float2bfloat16(v);
          v = Gelu(v);
        } else if (e == CUBLASLT_EPILOGUE_DGELU) {
          v *= GeluGrad(LoadBf16(d.aux, ai));
        }
        const uint64_t di = i + j * static_cast<uint64_t>(dl.ld);
        if (dl.type == CUDA_R_32F) {
          static_cast<float*>(Dp)[di] = v;
        } else {
          static_cast<__nv_bfloat16*>(Dp)[di] = __float2bfloat16(v);
        }
      }
    }
  }
  if (IsBiasGrad(e)) {
    // Sums over k of op(A)'s rows (BGRADA, m values) or op(B)'s columns (BGRADB, n values).
    const bool over_a = e == CUBLASLT_EPILOGUE_BGRADA;
    const uint64_t count = over_a ? m : n;
    const std::vector<float>& op = over_a ? opa : opb;
    for (uint64_t x = 0; x < count; ++x) {
      float sum = 0.0f;
      for (uint64_t kk = 0; kk < k; ++kk) sum += op[x * k + kk];
      if (dl.type == CUDA_R_32F) {
        static_cast<float*>(const_cast<void*>(d.bias))[x] = sum;
      } else {
        static_cast<__nv_bfloat16*>(const_cast<void*>(d.bias))[x] = __float2bfloat16(sum);
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

void CohortEmuCublasLtDeclineEpilogue(uint32_t epilogue, int decline) {
  if (epilogue < 1024) g_declined[epilogue].store(decline != 0);
}

}  // extern "C"
