// Task users: which Unix account a task runs as.
//
// A job names its user (api::JobSpec::user; the head sends it with every task). An agent
// running as root starts each task with that account's uid, primary gid and supplementary
// groups, as slurmd does, so one user's tasks cannot read another's environment
// (/proc/<pid>/environ, which holds the job's rendezvous token), files or checkpoints. The
// task shim itself stays root and drops privileges only in the task's child, just before
// exec (task_shim.h): the task cannot signal, ptrace or stop the shim that enforces its
// lease and reaps it.
//
// The policy (`cohort agent --task-user`):
//  - kJobUser (the default): a root agent runs each task as its job's user, and fails the
//    task at start when the node has no such account. An agent that is not root cannot
//    switch users: it runs tasks whose user is its own account and refuses the rest at
//    start, as Slurm refuses, so a job never runs under someone else's identity unnoticed.
//  - kAgentUser: every task runs as the agent's own user, whatever user the job names: a
//    single-user cluster (`cohort up`, the integration tests).
//
// The agent resolves the account (getpwnam_r, getgrouplist: NSS, so LDAP and sssd users
// work) and hands the shim plain numbers, so the static shim program never calls NSS.
// Everything here is thread-safe; LookupSystemUser may block on a slow name service.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/task_identity.h"
#include "common/error.h"

namespace cohort::agent {

enum class TaskUserPolicy { kJobUser, kAgentUser };

// "job" or "agent"; kInvalidArgument naming both otherwise.
Result<TaskUserPolicy> ParseTaskUserPolicy(std::string_view s);

// An account as a task gets it: the credentials the shim sets before exec, and the home
// and shell its environment names.
struct TaskAccount {
  TaskIdentity identity;  // groups: initgroups' list, the primary group included
  std::string home;
  std::string shell;
};

// Finds an account by name: nullopt when there is none; an error when the name service
// itself failed (then nobody can say whether the account exists).
using UserLookup = std::function<Result<std::optional<TaskAccount>>(const std::string& name)>;

// The system's passwd and group databases: getpwnam_r for the account, getgrouplist for
// its groups.
Result<std::optional<TaskAccount>> LookupSystemUser(const std::string& name);

// Who runs a task of `job_user` on node `node`, for an agent running as `agent_uid` under
// `policy`. nullopt: the task runs as the agent (kAgentUser, no user named, or the job's
// user is the agent's own account). Returns kNotFound naming the user and the node when a
// root agent finds no such account, kFailedPrecondition when an agent that is not root is
// asked to run another user's task, and the lookup's error when the name service fails.
Result<std::optional<TaskAccount>> ResolveTaskUser(const std::string& job_user, TaskUserPolicy policy,
                                                       uid_t agent_uid, const std::string& node,
                                                       const UserLookup& lookup);

// HOME, USER, LOGNAME and SHELL from the account, unless `env` sets them already (a job's
// own env wins).
void AddUserEnvironment(const TaskAccount& account, std::map<std::string, std::string>& env);

}  // namespace cohort::agent
