#include "engine/kernels/cuda/status.h"

#include <mutex>

namespace cohort::engine::cuda {

Result<void> CheckCuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return {};
  return Errorf(ErrorCode::kInternal, "{}: {}: {}", what, cudaGetErrorName(status),
                cudaGetErrorString(status));
}

Result<void> CheckLastLaunch(const char* what) { return CheckCuda(cudaGetLastError(), what); }

Result<int> DeviceCount() {
  // cudaGetDeviceCount is safe without a driver (it returns cudaErrorInsufficientDriver or
  // cudaErrorNoDevice); the answer cannot change within a process, so ask once.
  static std::once_flag once;
  static cudaError_t status = cudaSuccess;
  static int count = 0;
  std::call_once(once, [] {
    status = cudaGetDeviceCount(&count);
    // A failed query also sets the runtime's last-error slot; clear it so that a later,
    // unrelated CheckLastLaunch does not report it (a runtime that cannot initialise at all,
    // e.g. without a driver, keeps answering every call with its error anyway).
    if (status != cudaSuccess) (void)cudaGetLastError();
  });
  if (status != cudaSuccess) {
    return Errorf(ErrorCode::kUnavailable, "no CUDA device: {}: {}", cudaGetErrorName(status),
                  cudaGetErrorString(status));
  }
  if (count <= 0) {
    return MakeError(ErrorCode::kUnavailable, "no CUDA device: the driver reports 0 devices");
  }
  return count;
}

}  // namespace cohort::engine::cuda
