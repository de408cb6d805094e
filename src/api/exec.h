// Exec sessions: a command run beside a running task, in its environment (`cohort exec`,
// `cohort attach`, and steps of an allocation's `cohort run`). The wire types shared by the
// CLI, the head (which authorizes and relays) and the agent (which runs the command).
//
// The protocol is plain request/response over the API's HTTP (so it has the same tokens,
// TLS, limits and proxies as every other call; docs/ARCHITECTURE.md, "Exec sessions"):
//   POST .../exec?rank=R            ExecRequest → {"session": ID, "attempt": A, "node": N}
//   GET  .../exec/ID/output?rank=R&attempt=A&offset=O&wait_ms=W
//        the session's output from byte O of its frame stream (ExecFrame below), waiting
//        up to W ms for some; headers X-Cohort-Next-Offset, and once the command has
//        exited and everything was read X-Cohort-Done: 1 and X-Cohort-Exit-Code. Reading
//        from O acknowledges everything before it (the agent may forget it).
//   POST .../exec/ID/input?rank=R&attempt=A   ExecInput
// Pure functions; any thread may call them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

inline constexpr int kMaxExecArgs = 4096;
inline constexpr size_t kMaxExecArgBytes = 128 << 10;
inline constexpr int kMaxTerminalSide = 10'000;
// The longest a read of output may wait, on the agent (the head's call waits this plus a
// margin).
inline constexpr int kMaxExecWaitMs = 5'000;
// The most one input call carries (decoded).
inline constexpr size_t kMaxExecInputBytes = 1 << 20;

struct ExecRequest {
  std::vector<std::string> command;  // argv; command[0] looked up in the task's PATH
  bool tty = false;                  // a pseudo-terminal (stdout and stderr are one stream)
  bool stdin_open = false;           // "stdin": input is forwarded; else stdin is /dev/null
  int rows = 24;                     // the terminal's size (tty only)
  int cols = 80;
  std::string term;                  // the client's $TERM for a tty ("" when unknown)
};
json ToJson(const ExecRequest& r);
// A command's argv as an exec session or a step takes it: a program, at most kMaxExecArgs
// arguments of at most kMaxExecArgBytes each, no NUL byte; errors name the field.
Result<void> ValidateExecCommand(const std::vector<std::string>& command);
// Every field checked and named ("command: must not be empty"). Unknown fields: the head
// refuses them from the CLI (kRefuse); the agent ignores them from the head (kIgnore: a
// newer head's field must not break an older agent's exec sessions).
Result<ExecRequest> ExecRequestFromJson(const json& j, UnknownFields unknown);

// One input call: bytes for the command's stdin (base64 in JSON), then, in this order,
// end of input (stdin closed), a new terminal size, or the end of the session (its
// processes killed).
struct ExecInput {
  std::string data;
  bool eof = false;
  std::optional<int> rows;  // both or neither
  std::optional<int> cols;
  bool close = false;
};
json ToJson(const ExecInput& in);
// Checked like ExecRequestFromJson, unknown fields as `unknown` says.
Result<ExecInput> ExecInputFromJson(const json& j, UnknownFields unknown);

// The output stream is a sequence of frames, "<stream> <length>\n<bytes>": stream 'o'
// (stdout, or the terminal) or 'e' (stderr).
struct ExecFrame {
  char stream = 'o';
  std::string data;
};
std::string EncodeExecFrame(char stream, std::string_view data);
// Decodes whole frames from `bytes`; kInternal naming the offset of a malformed one (a
// truncated frame is malformed: a reply carries whole frames only).
Result<std::vector<ExecFrame>> DecodeExecFrames(std::string_view bytes);

}  // namespace cohort::api
