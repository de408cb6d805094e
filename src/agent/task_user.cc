#include "agent/task_user.h"

#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>

namespace cohort::agent {

Result<TaskUserPolicy> ParseTaskUserPolicy(std::string_view s) {
  if (s == "job") return TaskUserPolicy::kJobUser;
  if (s == "agent") return TaskUserPolicy::kAgentUser;
  return Errorf(ErrorCode::kInvalidArgument,
                "--task-user must be 'job' (each task as its job's user) or 'agent' (every task as the "
                "agent's user), got '{}'",
                s);
}

Result<std::optional<TaskAccount>> LookupSystemUser(const std::string& name) {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc;
  while ((rc = getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE && buf.size() < (1u << 20)) {
    buf.resize(buf.size() * 2);
  }
  // getpwnam_r reports "no such user" as success with no entry; some name services use
  // ENOENT, ESRCH or EBADF for it (getpwnam(3)).
  if (rc == ENOENT || rc == ESRCH || rc == EBADF || (rc == 0 && !found)) return std::nullopt;
  if (rc != 0) return Errorf(ErrorCode::kUnavailable, "cannot look up user '{}': {}", name, strerror(rc));
  TaskAccount c;
  c.identity.user = pw.pw_name;
  c.identity.uid = pw.pw_uid;
  c.identity.gid = pw.pw_gid;
  c.home = pw.pw_dir ? pw.pw_dir : "";
  c.shell = pw.pw_shell ? pw.pw_shell : "";
  // The groups initgroups would set: the primary group and every group listing the user.
  int n = 32;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  while (getgrouplist(c.identity.user.c_str(), c.identity.gid, groups.data(), &n) < 0) {
    if (n <= static_cast<int>(groups.size())) n = static_cast<int>(groups.size()) * 2;  // glibc < 2.3.3
    if (n > 65536) return Errorf(ErrorCode::kInternal, "user '{}' is in too many groups", name);
    groups.resize(static_cast<size_t>(n));
  }
  groups.resize(static_cast<size_t>(n));
  c.identity.groups = std::move(groups);
  return c;
}

Result<std::optional<TaskAccount>> ResolveTaskUser(const std::string& job_user, TaskUserPolicy policy,
                                                       uid_t agent_uid, const std::string& node,
                                                       const UserLookup& lookup) {
  if (policy == TaskUserPolicy::kAgentUser || job_user.empty()) return std::nullopt;
  auto found = COHORT_TRY(lookup(job_user));
  if (found && found->identity.uid == agent_uid) return std::nullopt;
  if (agent_uid == 0) {
    if (!found) {
      return Errorf(ErrorCode::kNotFound, "cannot run the task as user '{}': no such account on node '{}'", job_user,
                    node);
    }
    return found;
  }
  return Errorf(ErrorCode::kFailedPrecondition,
                "the agent on node '{}' runs as uid {}, not root, so it cannot start a task as user '{}'; run the "
                "agent as root, or with --task-user agent to run every task as the agent's user",
                node, agent_uid, job_user);
}

void AddUserEnvironment(const TaskAccount& account, std::map<std::string, std::string>& env) {
  env.try_emplace("HOME", account.home);
  env.try_emplace("USER", account.identity.user);
  env.try_emplace("LOGNAME", account.identity.user);
  env.try_emplace("SHELL", account.shell.empty() ? "/bin/sh" : account.shell);
}

}  // namespace cohort::agent
