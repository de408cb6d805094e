// Flags shared by the daemon commands (head, agent, up): logging and head timing.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "api/types.h"
#include "common/error.h"

namespace cohort::cli {

// Timing flags as typed by a person ("3s", "500ms"); converted by Resolve.
struct TimingFlags {
  std::string heartbeat_interval = "1s";
  std::string failure_timeout = "3s";
  std::string fence_timeout;  // default: two thirds of the failure timeout
  std::string kill_grace = "5s";

  void AddTo(CLI::App* sub);
  Result<api::AgentTiming> Resolve() const;
};

// --log-level trace|debug|info|warn|error.
void AddLogLevelFlag(CLI::App* sub, std::string& level);

// An agent's join token: `token` if given, else the first line of `file` if given (an
// unreadable or empty file is kInvalidArgument naming it), else $COHORT_JOIN_TOKEN, else "".
Result<std::string> ResolveJoinToken(const std::string& token, const std::string& file);

// Overwrites, in place, the values of the flags that carry a secret (--join-token VALUE or
// --join-token=VALUE, login's --token) with '*', once the parser has copied them: every
// user of the machine reads a process's command line (ps, /proc/PID/cmdline), and an
// agent runs for days. The flags' names and every other argument stay as they are.
void HideSecretArguments(int argc, char** argv);

}  // namespace cohort::cli
