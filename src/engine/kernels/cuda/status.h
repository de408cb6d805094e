// Kept only for bench/train_throughput.cc, which is outside the engine: the engine's CUDA
// status helpers are now common/cuda_status.h (COHORT_CUDA_CHECK, CudaDeviceCount).
// Switch that benchmark to CudaDeviceCount() and delete this header.
#pragma once

#include "common/cuda_status.h"

namespace cohort::engine::cuda {

// CudaDeviceCount() under its old name.
inline Result<int> DeviceCount() { return CudaDeviceCount(); }

}  // namespace cohort::engine::cuda
