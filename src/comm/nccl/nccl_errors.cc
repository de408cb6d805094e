#include "comm/nccl/nccl_errors.h"

#include <cstring>
#include <string>

#include <fmt/format.h>

namespace cohort::comm::nccl_backend {

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

ErrorCode CodeFor(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation:
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

ErrorCode CodeFor(ncclResult_t status) {
  switch (status) {
    case ncclSystemError:
    case ncclRemoteError:
      return ErrorCode::kUnavailable;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return ErrorCode::kInvalidArgument;
    default:
      return ErrorCode::kInternal;
  }
}

Error CudaError(cudaError_t status, std::string_view call, const char* file, int line) {
  return Error(CodeFor(status),
               fmt::format("{}:{}: {} failed: {} ({})", FileName(file), line, CallName(call),
                           cudaGetErrorString(status), cudaGetErrorName(status)));
}

Error NcclError(ncclResult_t status, std::string_view call, const char* file, int line) {
  std::string detail;
  // The last error of this thread (the argument is unused by NCCL).
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && *last != '\0') {
    detail = fmt::format(" ({})", last);
  }
  return Error(CodeFor(status), fmt::format("{}:{}: {} failed: {}{}", FileName(file), line,
                                            CallName(call), ncclGetErrorString(status), detail));
}

}  // namespace cohort::comm::nccl_backend
