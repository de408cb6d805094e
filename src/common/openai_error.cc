#include "common/openai_error.h"

namespace cohort {

json OpenAiErrorBody(const Error& e) {
  std::string type;
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsatisfiable:
    case ErrorCode::kFailedPrecondition:
    case ErrorCode::kAlreadyExists: type = "invalid_request_error"; break;
    case ErrorCode::kNotFound: type = "not_found_error"; break;
    case ErrorCode::kUnauthenticated: type = "authentication_error"; break;
    case ErrorCode::kPermissionDenied: type = "permission_error"; break;
    case ErrorCode::kResourceExhausted: type = "rate_limit_error"; break;
    case ErrorCode::kUnavailable:
    case ErrorCode::kDeadlineExceeded: type = "service_unavailable_error"; break;
    case ErrorCode::kInternal: type = "server_error"; break;
  }
  json err = {{"message", e.message}, {"type", type}, {"code", std::string(ErrorCodeName(e.code))}};
  err["param"] = e.field.empty() ? json(nullptr) : json(e.field);
  if (e.code == ErrorCode::kNotFound && e.field == "model") err["code"] = "model_not_found";
  return json{{"error", err}};
}

std::string OpenAiErrorText(const Error& e) {
  return OpenAiErrorBody(e).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace cohort
