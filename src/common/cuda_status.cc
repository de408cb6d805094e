#include "common/cuda_status.h"

#include <mutex>

#include <fmt/format.h>

namespace cohort {

ErrorCode CudaErrorCode(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation:
      return ErrorCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
      return ErrorCode::kUnavailable;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
      return ErrorCode::kInvalidArgument;
    default:
      return ErrorCode::kInternal;
  }
}

Error CudaError(cudaError_t status, std::string_view call, const char* file, int line) {
  return Error(CudaErrorCode(status),
               fmt::format("{}:{}: {} failed: {} ({})", FileName(file), line, CallName(call),
                           cudaGetErrorString(status), cudaGetErrorName(status)));
}

Result<int> CudaDeviceCount() {
  // cudaGetDeviceCount is safe without a driver (it returns cudaErrorInsufficientDriver or
  // cudaErrorNoDevice); the answer cannot change within a process, so ask once.
  static std::once_flag once;
  static cudaError_t status = cudaSuccess;
  static int count = 0;
  std::call_once(once, [] {
    status = cudaGetDeviceCount(&count);
    // A failed query also sets the runtime's last-error slot; clear it so that a later,
    // unrelated launch check does not report it (a runtime that cannot initialise at all,
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

std::string_view CallName(std::string_view call) {
  const size_t paren = call.find('(');
  std::string_view name = paren == std::string_view::npos ? call : call.substr(0, paren);
  while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
  return name;
}

std::string_view FileName(const char* file) {
  std::string_view f(file == nullptr ? "" : file);
  const size_t slash = f.rfind('/');
  return slash == std::string_view::npos ? f : f.substr(slash + 1);
}

}  // namespace cohort
