#include "common/error.h"

namespace cohort {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kAlreadyExists: return "already_exists";
    case ErrorCode::kFailedPrecondition: return "failed_precondition";
    case ErrorCode::kUnsatisfiable: return "unsatisfiable";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kDeadlineExceeded: return "deadline_exceeded";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kUnauthenticated: return "unauthenticated";
    case ErrorCode::kPermissionDenied: return "permission_denied";
  }
  return "internal";
}

ErrorCode ErrorCodeFromName(std::string_view name) {
  for (ErrorCode c : {ErrorCode::kInvalidArgument, ErrorCode::kNotFound,
                      ErrorCode::kAlreadyExists, ErrorCode::kFailedPrecondition,
                      ErrorCode::kUnsatisfiable, ErrorCode::kUnavailable,
                      ErrorCode::kResourceExhausted, ErrorCode::kDeadlineExceeded,
                      ErrorCode::kInternal, ErrorCode::kUnauthenticated,
                      ErrorCode::kPermissionDenied}) {
    if (ErrorCodeName(c) == name) return c;
  }
  return ErrorCode::kInternal;
}

int HttpStatusFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return 400;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kAlreadyExists: return 409;
    case ErrorCode::kFailedPrecondition: return 409;
    case ErrorCode::kUnsatisfiable: return 422;
    case ErrorCode::kUnavailable: return 503;
    case ErrorCode::kResourceExhausted: return 429;
    case ErrorCode::kDeadlineExceeded: return 504;
    case ErrorCode::kInternal: return 500;
    case ErrorCode::kUnauthenticated: return 401;
    case ErrorCode::kPermissionDenied: return 403;
  }
  return 500;
}

int ExitCodeFor(const Error& e) {
  switch (e.code) {
    case ErrorCode::kInvalidArgument: return 2;
    case ErrorCode::kUnavailable:
    case ErrorCode::kDeadlineExceeded: return 3;
    case ErrorCode::kResourceExhausted: return 1;
    case ErrorCode::kUnauthenticated:
    case ErrorCode::kPermissionDenied: return 4;
    default: return 1;
  }
}

std::string Error::ToString() const {
  return std::string(ErrorCodeName(code)) + ": " + message;
}

}  // namespace cohort
