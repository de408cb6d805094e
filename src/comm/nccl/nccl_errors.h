// Check macros for CUDA runtime and NCCL calls, and the errors they produce.
//
// Every CUDA and NCCL call of the nccl backend goes through COHORT_CUDA_CHECK or
// COHORT_NCCL_CHECK inside a function returning Result<T>. On failure the macro returns
// an Error whose message records where the call was made and what the library said:
//   "nccl_communicator.cc:214: cudaMalloc failed: out of memory (cudaErrorMemoryAllocation)"
//   "nccl_communicator.cc:98: ncclCommInitRankConfig failed: invalid usage (Duplicate GPU
//    detected: rank 1 and rank 0 both on CUDA device 1a000)"
// Codes: out of memory, no device or no driver, and NCCL system/remote errors are
// kUnavailable; NCCL's invalid argument/usage kInvalidArgument; the rest kInternal.
// ncclInProgress (a non-blocking communicator still working) is not an error for
// COHORT_NCCL_CHECK_ASYNC, which the enqueue paths use; it is for COHORT_NCCL_CHECK.
// Only compiled when the binary is built with CUDA and NCCL. Pure functions: any thread.
#pragma once

#include <string_view>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "common/error.h"

namespace cohort::comm::nccl_backend {

// "<file basename>:<line>: <function> failed: <cuda error string> (<cuda error name>)",
// where <function> is `call` up to its first '('.
Error CudaError(cudaError_t status, std::string_view call, const char* file, int line);
// "<file basename>:<line>: <function> failed: <nccl error string> (<ncclGetLastError>)".
Error NcclError(ncclResult_t status, std::string_view call, const char* file, int line);

// The error code for a CUDA or NCCL status (see the header comment).
ErrorCode CodeFor(cudaError_t status);
ErrorCode CodeFor(ncclResult_t status);

// "cudaMalloc(&p, n)" -> "cudaMalloc"; "src/comm/x.cc" -> "x.cc".
std::string_view CallName(std::string_view call);
std::string_view FileName(const char* file);

}  // namespace cohort::comm::nccl_backend

#define COHORT_CUDA_CHECK(call)                                                         \
  do {                                                                                  \
    const cudaError_t _cohort_s = (call);                                               \
    if (_cohort_s != cudaSuccess) {                                                     \
      return std::unexpected<::cohort::Error>(                                          \
          ::cohort::comm::nccl_backend::CudaError(_cohort_s, #call, __FILE__, __LINE__)); \
    }                                                                                   \
  } while (0)

#define COHORT_NCCL_CHECK(call)                                                         \
  do {                                                                                  \
    const ncclResult_t _cohort_s = (call);                                              \
    if (_cohort_s != ncclSuccess) {                                                     \
      return std::unexpected<::cohort::Error>(                                          \
          ::cohort::comm::nccl_backend::NcclError(_cohort_s, #call, __FILE__, __LINE__)); \
    }                                                                                   \
  } while (0)

// As COHORT_NCCL_CHECK, but ncclInProgress (accepted by a non-blocking communicator,
// still being enqueued) passes: the caller then polls ncclCommGetAsyncError.
#define COHORT_NCCL_CHECK_ASYNC(call)                                                   \
  do {                                                                                  \
    const ncclResult_t _cohort_s = (call);                                              \
    if (_cohort_s != ncclSuccess && _cohort_s != ncclInProgress) {                      \
      return std::unexpected<::cohort::Error>(                                          \
          ::cohort::comm::nccl_backend::NcclError(_cohort_s, #call, __FILE__, __LINE__)); \
    }                                                                                   \
  } while (0)
