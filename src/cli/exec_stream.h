// The client side of an exec session's output and input (api/exec.h), shared by `cohort
// exec`/`attach` (exec.cc) and the steps of `cohort run` inside an allocation (step.cc).
//
// PumpExecOutput long-polls one session's output through the head until its command has
// exited; SendExecInput posts input, a window size or the close. A caller may pump several
// sessions at once, one thread each, each with its own HttpClient.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/exec.h"
#include "common/error.h"
#include "common/http.h"

namespace cohort::cli {

// One session, as the head named it when it started.
struct ExecSession {
  int64_t job = 0;
  std::string id;
  int attempt = 0;
  int rank = 0;
  std::string node;
  std::vector<std::pair<std::string, std::string>> Query() const {
    return {{"rank", std::to_string(rank)}, {"attempt", std::to_string(attempt)}};
  }
};

// Writes all of `data` to `fd`; false when it cannot.
bool WriteAll(int fd, std::string_view data);

Result<void> SendExecInput(const HttpClient& head, const ExecSession& s, const api::ExecInput& in);

// Reads the session's output from the start until its command has exited, handing every
// frame to `on_frame` in order; returns the command's exit code. Errors: the head's (the
// session or its task ended, the head cannot be reached) or a malformed reply.
Result<int> PumpExecOutput(const HttpClient& head, const ExecSession& s,
                           const std::function<void(const api::ExecFrame&)>& on_frame);

}  // namespace cohort::cli
