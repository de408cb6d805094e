// Host-side CUDA status helpers (C++23, so they can return Result; see common.cuh).
#pragma once

#include <cuda_runtime.h>

#include "common/error.h"

namespace cohort::engine::cuda {

// kInternal "<what>: <cudaGetErrorName>: <cudaGetErrorString>" if `status` is not
// cudaSuccess.
Result<void> CheckCuda(cudaError_t status, const char* what);
// CheckCuda(cudaGetLastError(), what): call after a group of launches.
Result<void> CheckLastLaunch(const char* what);

// Number of CUDA devices (> 0), or kUnavailable "no CUDA device: <error>". Never
// crashes on a machine without a GPU or driver. Computed once; thread-safe.
Result<int> DeviceCount();

}  // namespace cohort::engine::cuda
