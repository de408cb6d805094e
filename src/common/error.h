// Error and Result: the one error style inside Cohort.
//
// Every fallible function returns `Result<T>` (a std::expected<T, Error>). An Error has a
// code (what kind of failure, which decides the HTTP status and the CLI exit code at the
// edge), a message a person can act on, and optionally the name of the input field that
// was wrong. Errors are values: no exception escapes a module. Thread-safe: plain values.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace cohort {

enum class ErrorCode {
  kInvalidArgument,     // the input is malformed or a field is out of range (HTTP 400)
  kNotFound,            // the named object does not exist (404)
  kAlreadyExists,       // a conflicting object exists (409)
  kFailedPrecondition,  // the object is in the wrong state for this request (409)
  kUnsatisfiable,       // valid, but can never be satisfied by this cluster (422)
  kUnavailable,         // a peer or resource cannot be reached now; retry may help (503)
  kResourceExhausted,   // out of a finite resource (device memory); retrying the same
                        // request will not help, a smaller one may (429)
  kDeadlineExceeded,    // a wait ran past its deadline (504)
  kInternal,            // a bug or an unexpected system failure (500)
  kUnauthenticated,     // no valid credentials: none, unknown, expired or revoked (401)
  kPermissionDenied,    // the caller is known but may not do this (403)
};

// Stable lowercase name used on the wire ("invalid_argument"); parsed back by FromName.
std::string_view ErrorCodeName(ErrorCode code);
ErrorCode ErrorCodeFromName(std::string_view name);  // unknown names map to kInternal
int HttpStatusFor(ErrorCode code);

struct Error;

// The exit code a command-line program returns for `e`: 2 for bad input, 3 when a peer
// (the head, a store) could not be reached or did not answer in time, 4 when the head
// refused the credentials (none, unknown, revoked, or not allowed), 1 otherwise
// (kResourceExhausted included: rerunning the same command would fail again).
int ExitCodeFor(const Error& e);

struct Error {
  Error() = default;
  Error(ErrorCode c, std::string m, std::string f = {})
      : code(c), message(std::move(m)), field(std::move(f)) {}

  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  std::string field;  // the offending input field ("spec.gpus_per_node"), empty if none

  // "invalid_argument: gpus_per_node must be between 0 and 1024, got -1"
  std::string ToString() const;
};

template <typename T = void>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> MakeError(ErrorCode code, std::string message,
                                        std::string field = {}) {
  return std::unexpected<Error>(Error{code, std::move(message), std::move(field)});
}

template <typename... Args>
std::unexpected<Error> Errorf(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  return MakeError(code, fmt::format(f, std::forward<Args>(args)...));
}

// Error for a bad input field: the message is prefixed with the field name.
template <typename... Args>
std::unexpected<Error> FieldError(std::string field, fmt::format_string<Args...> f,
                                  Args&&... args) {
  std::string msg = field + ": " + fmt::format(f, std::forward<Args>(args)...);
  return MakeError(ErrorCode::kInvalidArgument, std::move(msg), std::move(field));
}

// Adds context in front of an error's message ("loading job 12: ...").
inline Error WithContext(Error e, std::string_view context) {
  e.message = std::string(context) + ": " + e.message;
  return e;
}

}  // namespace cohort

// Propagates an error from an expression returning Result<T>; evaluates to the value.
#define COHORT_TRY(expr)                                                  \
  ({                                                                      \
    auto&& _cohort_r = (expr);                                            \
    if (!_cohort_r) return std::unexpected<::cohort::Error>(_cohort_r.error()); \
    std::move(*_cohort_r);                                                \
  })

// Like COHORT_TRY for Result<void>.
#define COHORT_TRY_VOID(expr)                                             \
  do {                                                                    \
    auto&& _cohort_r = (expr);                                            \
    if (!_cohort_r) return std::unexpected<::cohort::Error>(_cohort_r.error()); \
  } while (0)
