#include "engine/kernels/cpu/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "engine/kernels/cpu/parallel.h"

namespace cohort::engine::cpu {

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

std::string SuggestedBlasCoreType() {
  if (const char* env = std::getenv("OPENBLAS_CORETYPE"); env != nullptr && *env) return "";
#if defined(__x86_64__) && defined(__GNUC__)
  const std::string core = BlasCoreName();
  auto is_one_of = [&core](std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (strcasecmp(core.c_str(), n) == 0) return true;
    }
    return false;
  };
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (avx512 && !is_one_of({"SkylakeX", "Cooperlake", "SapphireRapids"})) {
    return __builtin_cpu_supports("avx512bf16") ? "COOPERLAKE" : "SKYLAKEX";
  }
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx512 && avx2 &&
      !is_one_of({"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})) {
    return "HASWELL";
  }
#endif
  return "";
}

void UseOpenMpForBlas() {
  // Checked on every call (cheap): another component may have set a count since.
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

namespace {

// Work is cut into chunks handed out dynamically (a busy or preempted core does not hold
// the others at the barrier). Each chunk repacks the operand it shares with the other
// chunks, so chunks stay >= kMinChunk along the split dimension (repacking then costs a
// few percent of the chunk's flops) and there are at most 8 per thread.
constexpr size_t kMinChunk = 512;

size_t ChunkSize(size_t dim, int nth) {
  size_t chunk = std::max(kMinChunk, (dim + 8 * nth - 1) / (8 * nth));
  chunk = std::min(chunk, (dim + nth - 1) / nth);  // at least one chunk per thread
  return std::max<size_t>(16, (chunk + 15) / 16 * 16);
}

}  // namespace

void MatmulForward(float* out, const float* inp, const float* w, const float* bias, int N,
                   int C, int OC) {
  UseOpenMpForBlas();
  const float beta = bias != nullptr ? 1.0f : 0.0f;
  // Split the larger output dimension: chunks of output columns share (and repack) inp,
  // chunks of rows share w.
  const bool split_columns = OC > N;
#pragma omp parallel
  {
    const size_t dim = split_columns ? OC : N;
    const size_t chunk = ChunkSize(dim, omp_get_num_threads());
    const long chunks = static_cast<long>((dim + chunk - 1) / chunk);
#pragma omp for schedule(dynamic, 1)
    for (long k = 0; k < chunks; ++k) {
      const size_t b = k * chunk, e = std::min(dim, b + chunk), m = e - b;
      if (split_columns) {
        if (bias != nullptr) {
          for (int n = 0; n < N; ++n) std::memcpy(out + static_cast<size_t>(n) * OC + b, bias + b, m * sizeof(float));
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, static_cast<int>(m), C, 1.0f,
                    inp, C, w + b * C, C, beta, out + b, OC);
      } else {
        float* o = out + b * OC;
        if (bias != nullptr) {
          for (size_t r = 0; r < m; ++r) std::memcpy(o + r * OC, bias, OC * sizeof(float));
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), OC, C, 1.0f,
                    inp + b * C, C, w, C, beta, o, OC);
      }
    }
  }
}

void MatmulBackward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                    const float* w, int N, int C, int OC, float alpha) {
  UseOpenMpForBlas();
#pragma omp parallel
  {
    const int nth = omp_get_num_threads();
    if (dinp != nullptr) {
      // dinp rows [b, e) += alpha · dout[b:e] · w (each chunk repacks w).
      const size_t chunk = ChunkSize(N, nth);
      const long chunks = static_cast<long>((N + chunk - 1) / chunk);
#pragma omp for schedule(dynamic, 1) nowait
      for (long k = 0; k < chunks; ++k) {
        const size_t b = k * chunk, e = std::min<size_t>(N, b + chunk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(e - b), C, OC,
                    alpha, dout + b * OC, OC, w, C, 1.0f, dinp + b * C, C);
      }
    }
    // dw rows [b, e) += alpha · dout[:, b:e]ᵀ · inp (each chunk repacks inp), and dbias.
    const size_t chunk = ChunkSize(OC, nth);
    // Every thread takes the same branch: the worksharing loop is skipped by all or none.
    const long chunks =
        dw == nullptr && dbias == nullptr ? 0 : static_cast<long>((OC + chunk - 1) / chunk);
#pragma omp for schedule(dynamic, 1)
    for (long k = 0; k < chunks; ++k) {
      const size_t b = k * chunk, e = std::min<size_t>(OC, b + chunk), m = e - b;
      if (dw != nullptr) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), C, N, alpha,
                    dout + b, OC, inp, C, 1.0f, dw + b * C, C);
      }
      if (dbias != nullptr) {
        float* db = dbias + b;
        for (int n = 0; n < N; ++n) {
          const float* d = dout + static_cast<size_t>(n) * OC + b;
#pragma omp simd
          for (size_t o = 0; o < m; ++o) db[o] += alpha * d[o];
        }
      }
    }
  }
}

void MatmulBackwardWeightRows(float* dw_rows, const float* dout, const float* inp, int N, int C,
                              int OC, int r0, int rows) {
  UseOpenMpForBlas();
#pragma omp parallel
  {
    // As MatmulBackward's dw: each chunk of rows one sgemm (repacking inp).
    const size_t chunk = ChunkSize(rows, omp_get_num_threads());
    const long chunks = static_cast<long>((rows + chunk - 1) / chunk);
#pragma omp for schedule(dynamic, 1)
    for (long k = 0; k < chunks; ++k) {
      const size_t b = k * chunk, e = std::min<size_t>(rows, b + chunk);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(e - b), C, N, 1.0f,
                  dout + r0 + b, OC, inp, C, 1.0f, dw_rows + b * C, C);
    }
  }
}

void ReexecWithSuggestedBlasCoreType(const char* command, int argc, char** argv) {
  const std::string core = SuggestedBlasCoreType();
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  std::vector<std::string> args = {SelfExePath(), command};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execv(args[0].c_str(), cargv.data());
  std::fprintf(stderr, "cohort %s: warning: could not re-execute with OPENBLAS_CORETYPE=%s: %s\n", command,
               core.c_str(), std::strerror(errno));
}

}  // namespace cohort::engine::cpu
