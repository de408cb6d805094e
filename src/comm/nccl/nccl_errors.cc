#include "comm/nccl/nccl_errors.h"

#include <string>

#include <fmt/format.h>

namespace cohort::comm::nccl_backend {

ErrorCode NcclErrorCode(ncclResult_t status) {
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

Error NcclError(ncclResult_t status, std::string_view call, const char* file, int line) {
  std::string detail;
  // The last error of this thread (the argument is unused by NCCL).
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && *last != '\0') {
    detail = fmt::format(" ({})", last);
  }
  return Error(NcclErrorCode(status), fmt::format("{}:{}: {} failed: {}{}", FileName(file), line,
                                                  CallName(call), ncclGetErrorString(status),
                                                  detail));
}

}  // namespace cohort::comm::nccl_backend
