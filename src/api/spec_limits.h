// What a node can start: Linux's limits on exec's arguments and environment and on paths,
// which a job spec is checked against when it is submitted.
//
// The head cannot see its nodes, so it checks only what no node could accept: a task
// whose arguments and environment exceed what exec takes fails on every node with
// "Argument list too long", and a working directory longer than PATH_MAX cannot be
// entered anywhere. Stored jobs are not checked again (JobFromJson), so a head that
// stored a job before these checks existed still loads it. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "api/types.h"
#include "common/error.h"

namespace cohort::api {

// One argument or environment string, with its NUL, is at most MAX_ARG_STRLEN (32 pages).
inline constexpr size_t kMaxArgStrlen = 32 * 4096;
// All of them together, with a pointer each, at most a quarter of the stack limit: 2 MiB
// under the 8 MiB stack limit every distribution starts processes with (what
// sysconf(_SC_ARG_MAX) reports there). A node with a larger stack limit takes more; the
// head holds every node to the default.
inline constexpr size_t kExecArgMax = 2 << 20;
// What the agent and the task shim add to a task's exec beyond the spec's command and env:
// the job contract's variables (api::TaskEnvironment, under 2 KiB of ranks and URLs), the
// shim's own arguments (its log, status and lease paths and the working directory, up to
// ~5 KiB) and the agent's environment, which tasks inherit. 64 KiB leaves an agent
// environment about 55 KiB.
inline constexpr size_t kExecReserveBytes = 64 << 10;
// What a spec's command and env may take: kExecArgMax - kExecReserveBytes (1.9 MiB).
inline constexpr size_t kMaxSpecExecBytes = kExecArgMax - kExecReserveBytes;
// A path is at most PATH_MAX bytes with its NUL; one name in it at most NAME_MAX.
inline constexpr size_t kPathMax = 4096;
inline constexpr size_t kNameMax = 255;

// The bytes exec needs for `strings`: each with its NUL, and a pointer to each.
size_t ExecBytes(const std::vector<std::string>& strings);
// The same for an environment: "NAME=value" with its NUL, and a pointer, per variable.
size_t ExecBytes(const std::map<std::string, std::string>& env);

// kInvalidArgument when no node could start `s`: one argument of its command over
// MAX_ARG_STRLEN ("command[3]"), its command and env together over kMaxSpecExecBytes
// ("env" or "command", whichever is larger, with both sizes), or a workdir with a '..'
// component, longer than PATH_MAX or with a name longer than NAME_MAX ("workdir").
Result<void> CheckSpecFitsNodes(const JobSpec& s);

}  // namespace cohort::api
