// Errors in OpenAI's shape, for the OpenAI-compatible endpoints of a replica (src/serve)
// and of the head's gateway: {"error": {"message", "type", "param", "code"}}, where
// `type` follows the error's code (invalid_request_error, not_found_error,
// authentication_error, permission_error, rate_limit_error, service_unavailable_error,
// server_error), `param` is the field named by the error (null without one) and `code`
// is Cohort's code name ("model_not_found" for an unknown model). OpenAI's clients read
// `message` and the HTTP status. Plain functions; any thread.
#pragma once

#include <string>

#include "common/error.h"
#include "common/json.h"

namespace cohort {

json OpenAiErrorBody(const Error& e);
// The body's text; invalid UTF-8 in a message becomes U+FFFD.
std::string OpenAiErrorText(const Error& e);

}  // namespace cohort
