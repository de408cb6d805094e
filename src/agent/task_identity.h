// TaskIdentity: the Unix credentials a task runs with, as the agent hands them to the task
// shim (`--user NAME:UID:GID:G1,G2,...`; task_shim.h). The agent resolves the account
// (task_user.h); the shim only applies numbers, so the static shim program never calls the
// name service. Plain values; the functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cohort::agent {

struct TaskIdentity {
  std::string user;           // for messages only; [A-Za-z0-9._-] as api::JobSpec::user
  uid_t uid = 0;
  gid_t gid = 0;              // the primary group
  std::vector<gid_t> groups;  // the supplementary groups (initgroups' list)
};

// "alice:1001:1001:1001,27" (no groups: "alice:1001:1001:").
std::string FormatTaskIdentity(const TaskIdentity& id);
// The inverse; kInvalidArgument naming the part that is wrong.
Result<TaskIdentity> ParseTaskIdentity(std::string_view text);

// Becomes `id` for good: setgroups, setgid, setuid, in that order (the group calls need
// the privilege the last one gives up), then checks that no saved id can restore another
// user. Returns 0, or the errno of the call that failed. Only async-signal-safe calls:
// meant for a forked child before exec. Linux clears the parent-death signal on a
// credential change, so a caller that wants one sets it afterwards.
int AssumeTaskIdentity(const TaskIdentity& id);

}  // namespace cohort::agent
