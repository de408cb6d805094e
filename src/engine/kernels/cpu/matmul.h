// Matrix products of the CPU reference: y = x · Wᵀ + b with W stored (out, in) row-major,
// and its backward. Every product is an OpenBLAS cblas_sgemm; the kernels split the work
// into chunks handed to OpenMP threads and run OpenBLAS single-threaded inside them, so
// OpenMP's and OpenBLAS's thread pools never compete for the same cores: every kernel
// call sets openblas_set_num_threads(1) for the process if it is not 1 already, and the
// OpenMP thread count (omp_set_num_threads / OMP_NUM_THREADS) is the one that matters.
//
// Backward kernels ACCUMULATE (+=) into every gradient they write, llm.c style. Buffers
// are dense row-major float32; pointers may not alias unless stated. Thread-safe as long
// as outputs are distinct; called from one thread (OpenMP parallelises inside).
#pragma once

#include <cstddef>
#include <string>

namespace cohort::engine::cpu {

// The kernel family OpenBLAS selected ("Cooperlake", "Haswell", "Prescott", ...).
std::string BlasCoreName();

// OpenBLAS's DYNAMIC_ARCH picks its kernels from the CPU model and falls back to the SSE3
// "Prescott" kernels on models it does not know (Debian's 0.3.21 on Intel Emerald Rapids:
// 3-4x slower sgemm). Returns the OPENBLAS_CORETYPE value that selects kernels matching the
// CPU's features ("COOPERLAKE", "SKYLAKEX", "HASWELL") when OpenBLAS chose a weaker one, and
// "" when its choice is fine or OPENBLAS_CORETYPE is already set. OpenBLAS reads the variable
// when it is loaded, so a program applies this by setting it and re-executing itself
// (bench/train_throughput.cc does), or a launcher sets it in the environment.
std::string SuggestedBlasCoreType();

// Applies SuggestedBlasCoreType to a `cohort COMMAND` process: sets OPENBLAS_CORETYPE and
// re-executes this binary as `cohort COMMAND argv[1..]`. Returns only when nothing needs
// doing or the exec failed (a warning on stderr; the kernels still work, slower).
void ReexecWithSuggestedBlasCoreType(const char* command, int argc, char** argv);

// Makes OpenBLAS single-threaded. Every kernel calls it first (from the calling thread,
// outside any parallel region); exposed for code that calls cblas directly.
void UseOpenMpForBlas();

// out (N, OC) = inp (N, C) · wᵀ (w: OC × C) + bias (OC; may be null).
void MatmulForward(float* out, const float* inp, const float* w, const float* bias, int N,
                   int C, int OC);

// dinp (N, C) += dout · w; dw (OC, C) += doutᵀ · inp; dbias (OC) += Σ_rows dout.
// dinp, dw and dbias may be null (not needed). `alpha` scales dout in all three (1 for the
// plain derivative).
void MatmulBackward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                    const float* w, int N, int C, int OC, float alpha = 1.0f);

// Rows [r0, r0 + rows) of MatmulBackward's dw: dw_rows (rows, C) += dout[:, r0:r0+rows]ᵀ · inp
// (dout is N × OC). A weight's gradient computed a slice at a time into a buffer that holds
// only the slice (ZeRO's gradient pieces, gpt.h GradSink).
void MatmulBackwardWeightRows(float* dw_rows, const float* dout, const float* inp, int N, int C,
                              int OC, int r0, int rows);

}  // namespace cohort::engine::cpu
