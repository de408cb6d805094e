// Check macros for NCCL calls, and the errors they produce.
//
// Every NCCL call of the nccl backend goes through COHORT_NCCL_CHECK (or the enqueue
// paths' own macro) inside a function returning Result<T>; its CUDA runtime calls go
// through COHORT_CUDA_CHECK (common/cuda_status.h, included here). On failure the macro
// returns an Error whose message records where the call was made and what NCCL said:
//   "nccl_communicator.cc:98: ncclCommInitRankConfig failed: invalid usage (Duplicate GPU
//    detected: rank 1 and rank 0 both on CUDA device 1a000)"
// Codes: NCCL system/remote errors are kUnavailable; invalid argument/usage
// kInvalidArgument; the rest kInternal. ncclInProgress (a non-blocking communicator still
// working) is an error for COHORT_NCCL_CHECK; the communicator's enqueue paths, which poll
// for it, have their own macro. Only compiled when the binary is built with CUDA and NCCL.
// Pure functions: any thread.
#pragma once

#include <string_view>

#include <nccl.h>

#include "common/cuda_status.h"
#include "common/error.h"

namespace cohort::comm::nccl_backend {

// "<file basename>:<line>: <function> failed: <nccl error string> (<ncclGetLastError>)",
// where <function> is `call` up to its first '('.
Error NcclError(ncclResult_t status, std::string_view call, const char* file, int line);

// The error code for an NCCL status (see the header comment).
ErrorCode NcclErrorCode(ncclResult_t status);

}  // namespace cohort::comm::nccl_backend

#define COHORT_NCCL_CHECK(call)                                                         \
  do {                                                                                  \
    const ncclResult_t _cohort_s = (call);                                              \
    if (_cohort_s != ncclSuccess) {                                                     \
      return std::unexpected<::cohort::Error>(                                          \
          ::cohort::comm::nccl_backend::NcclError(_cohort_s, #call, __FILE__, __LINE__)); \
    }                                                                                   \
  } while (0)
