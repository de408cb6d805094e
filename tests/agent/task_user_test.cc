// Who a task runs as: the policy (ResolveTaskUser against a fake account database), the
// environment an account gives a task, the identity the agent hands the shim, and the
// system lookup itself (root exists everywhere).
#include "agent/task_user.h"

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/task_identity.h"

namespace cohort::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TaskAccount Alice() {
  TaskAccount a;
  a.identity = {"alice", 1001, 1001, {1001, 27}};
  a.home = "/home/alice";
  a.shell = "/bin/bash";
  return a;
}

// An account database with alice only.
Result<std::optional<TaskAccount>> FakeLookup(const std::string& name) {
  if (name == "alice") return Alice();
  if (name == "broken") return MakeError(ErrorCode::kUnavailable, "ldap is down");
  return std::nullopt;
}

TEST(ResolveTaskUser, RootAgentRunsTheTaskAsTheJobsAccount) {
  auto r = ResolveTaskUser("alice", TaskUserPolicy::kJobUser, 0, "n1", FakeLookup);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->identity.uid, 1001u);
  EXPECT_EQ((*r)->identity.gid, 1001u);
  EXPECT_THAT((*r)->identity.groups, ElementsAre(1001u, 27u));
}

TEST(ResolveTaskUser, RootAgentFailsATaskWhoseUserHasNoAccountNamingUserAndNode) {
  auto r = ResolveTaskUser("mallory", TaskUserPolicy::kJobUser, 0, "gpu-7", FakeLookup);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(r.error().message, HasSubstr("'mallory'"));
  EXPECT_THAT(r.error().message, HasSubstr("'gpu-7'"));
}

TEST(ResolveTaskUser, NonRootAgentRunsItsOwnUsersTasksAndRefusesOthers) {
  auto own = ResolveTaskUser("alice", TaskUserPolicy::kJobUser, 1001, "n1", FakeLookup);
  ASSERT_TRUE(own.has_value());
  EXPECT_FALSE(own->has_value()) << "already the right user: no switch";
  for (std::string user : {"mallory", "root"}) {
    auto other = ResolveTaskUser(user, TaskUserPolicy::kJobUser, 2000, "n1", FakeLookup);
    ASSERT_FALSE(other.has_value()) << user;
    EXPECT_EQ(other.error().code, ErrorCode::kFailedPrecondition);
    EXPECT_THAT(other.error().message, HasSubstr("'" + user + "'"));
    EXPECT_THAT(other.error().message, HasSubstr("--task-user agent"));
  }
}

TEST(ResolveTaskUser, AgentPolicyAndUnnamedUsersRunAsTheAgent) {
  for (uid_t agent : {0u, 2000u}) {
    auto r = ResolveTaskUser("mallory", TaskUserPolicy::kAgentUser, agent, "n1", FakeLookup);
    ASSERT_TRUE(r.has_value());
    EXPECT_FALSE(r->has_value());
    auto unnamed = ResolveTaskUser("", TaskUserPolicy::kJobUser, agent, "n1", FakeLookup);
    ASSERT_TRUE(unnamed.has_value());
    EXPECT_FALSE(unnamed->has_value());
  }
}

TEST(ResolveTaskUser, ANameServiceFailureFailsTheStart) {
  auto r = ResolveTaskUser("broken", TaskUserPolicy::kJobUser, 0, "n1", FakeLookup);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr("ldap is down"));
}

TEST(ParseTaskUserPolicy, JobOrAgent) {
  EXPECT_EQ(ParseTaskUserPolicy("job").value(), TaskUserPolicy::kJobUser);
  EXPECT_EQ(ParseTaskUserPolicy("agent").value(), TaskUserPolicy::kAgentUser);
  EXPECT_FALSE(ParseTaskUserPolicy("root").has_value());
}

TEST(AddUserEnvironment, FillsWhatTheJobDoesNotSet) {
  std::map<std::string, std::string> env = {{"HOME", "/scratch/alice"}, {"RANK", "0"}};
  AddUserEnvironment(Alice(), env);
  EXPECT_EQ(env["HOME"], "/scratch/alice");  // the job's own wins
  EXPECT_EQ(env["USER"], "alice");
  EXPECT_EQ(env["LOGNAME"], "alice");
  EXPECT_EQ(env["SHELL"], "/bin/bash");
  EXPECT_EQ(env["RANK"], "0");
}

TEST(TaskIdentity, FormatAndParseRoundTrip) {
  TaskIdentity id = Alice().identity;
  EXPECT_EQ(FormatTaskIdentity(id), "alice:1001:1001:1001,27");
  auto back = ParseTaskIdentity(FormatTaskIdentity(id));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->user, "alice");
  EXPECT_EQ(back->uid, 1001u);
  EXPECT_EQ(back->gid, 1001u);
  EXPECT_THAT(back->groups, ElementsAre(1001u, 27u));
  auto no_groups = ParseTaskIdentity("bob:7:8:");
  ASSERT_TRUE(no_groups.has_value());
  EXPECT_TRUE(no_groups->groups.empty());
}

TEST(TaskIdentity, ParseRejectsMalformedText) {
  for (std::string bad : {"", "alice", "alice:1:2", ":1:2:", "alice:x:2:", "alice:1:-2:", "alice:1:2:3,,4",
                          "alice:4294967295:1:", "alice:1:2:3,y"}) {
    auto r = ParseTaskIdentity(bad);
    EXPECT_FALSE(r.has_value()) << "'" << bad << "' parsed";
  }
}

TEST(LookupSystemUser, FindsRootAndNotAnInventedName) {
  auto root = LookupSystemUser("root");
  ASSERT_TRUE(root.has_value()) << root.error().message;
  ASSERT_TRUE(root->has_value());
  EXPECT_EQ((*root)->identity.uid, 0u);
  EXPECT_EQ((*root)->identity.gid, 0u);
  EXPECT_THAT((*root)->identity.groups, ::testing::Contains(0u));
  auto none = LookupSystemUser("cohort-no-such-user-" + std::to_string(getpid()));
  ASSERT_TRUE(none.has_value()) << none.error().message;
  EXPECT_FALSE(none->has_value());
}

}  // namespace
}  // namespace cohort::agent
