// CUDA runtime status in Cohort's error style: the one check macro for CUDA runtime calls,
// the ErrorCode a CUDA status maps to, and the device count.
//
// Every host-side CUDA runtime call of the data plane (comm's nccl backend, the engine's
// GPU model, kernels' host code, the trainer) goes through COHORT_CUDA_CHECK inside a
// function returning Result<T>. On failure the macro returns an Error that records where
// the call was made and what the runtime said:
//   "gpt_cuda.cc:223: cudaMalloc failed: out of memory (cudaErrorMemoryAllocation)"
// Codes (CudaErrorCode): out of memory is kResourceExhausted (the job asked for more
// than the device has: a smaller batch or model may fit); no device, no or too old a
// driver, devices unavailable and a runtime that cannot initialise are kUnavailable;
// invalid values, devices and device pointers kInvalidArgument; the rest kInternal.
//
// Built only when CUDA is found (library cohort_cuda_status); .cu files, compiled as
// C++20 by nvcc, never include it (it needs std::expected). The CPU emulator of the engine
// (tests/engine/cuda_emu) compiles cuda_status.cc against its own runtime stand-in.
// Pure functions but CudaDeviceCount, which asks the runtime once; all thread-safe.
#pragma once

#include <string_view>

#include <cuda_runtime_api.h>

#include "common/error.h"

namespace cohort {

// The ErrorCode for a CUDA runtime status (see the header comment).
ErrorCode CudaErrorCode(cudaError_t status);

// "<file basename>:<line>: <function> failed: <cuda error string> (<cuda error name>)",
// where <function> is `call` up to its first '(', with CudaErrorCode(status).
Error CudaError(cudaError_t status, std::string_view call, const char* file, int line);

// The number of CUDA devices this process sees (> 0), or kUnavailable "no CUDA device:
// <cuda error name>: <cuda error string>" (no GPU, no driver, CUDA_VISIBLE_DEVICES
// empty), or "no CUDA device: the driver reports 0 devices". Never crashes on a machine
// without a GPU or driver, and leaves no error behind for a later cudaGetLastError.
// Computed once per process; thread-safe.
Result<int> CudaDeviceCount();

// How the check macros name a call and its place: "cudaMalloc(&p, n)" -> "cudaMalloc";
// "src/comm/x.cc" -> "x.cc".
std::string_view CallName(std::string_view call);
std::string_view FileName(const char* file);

}  // namespace cohort

// Evaluates `call` (a cudaError_t expression) once; unless it is cudaSuccess, returns
// CudaError(...) from the enclosing function (which returns Result<T>). To check kernel
// launches, check cudaGetLastError() after them.
#define COHORT_CUDA_CHECK(call)                                                     \
  do {                                                                              \
    const cudaError_t _cohort_cuda_s = (call);                                      \
    if (_cohort_cuda_s != cudaSuccess) {                                            \
      return std::unexpected<::cohort::Error>(                                      \
          ::cohort::CudaError(_cohort_cuda_s, #call, __FILE__, __LINE__));          \
    }                                                                               \
  } while (0)
