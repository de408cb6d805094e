// Teams in the head's core: bad input is refused with an error naming the field and the
// numbers, and leaves the state as it was (no team changed, nothing to store); a job gets
// its team from its spec or its user.
#include "core_test_util.h"
#include "api/gpu_request.h"
#include "head/core/shares.h"
#include "head/core/teams.h"

namespace cohort::head::core::testing {
namespace {

api::Team MakeTeam(const std::string& name, int64_t quota, std::optional<int64_t> borrow, int64_t weight,
                   std::vector<std::string> users = {}) {
  api::Team t;
  t.name = name;
  t.quota_gpus = quota;
  t.borrow_limit_gpus = borrow;
  t.weight = weight;
  t.users = std::move(users);
  return t;
}

class TeamsTest : public CoreTest {
 protected:
  void SetUp() override {
    Register(Reg("n1", 2));
    Register(Reg("n2", 2));
    auto fx = CreateTeam(state_, ctx_, MakeTeam("ml", 2, 2, 2, {"alice"}), now_);
    ASSERT_TRUE(fx.has_value()) << fx.error().message;
    EXPECT_TRUE(fx->teams_changed);
    before_ = ListTeams(state_);
  }

  // A job of `user` naming `team` ("" for none), submitted as an admin or not.
  Result<api::JobSpec> Resolve(const std::string& user, const std::string& team, bool any_team) {
    api::JobSpec s = Spec(1, 1);
    s.user = user;
    s.team = team;
    COHORT_TRY_VOID(ResolveTeam(state_, s, any_team));
    return s;
  }

  // The error, which must name `part`, and the teams exactly as they were.
  void ExpectRefused(const Result<Effects>& r, ErrorCode code, const std::string& part) {
    ASSERT_FALSE(r.has_value()) << "accepted; expected an error naming '" << part << "'";
    EXPECT_EQ(r.error().code, code) << r.error().message;
    EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
    EXPECT_EQ(ListTeams(state_), before_) << "a refused change changed the teams: " << r.error().message;
  }

  std::vector<api::Team> before_;
};

TEST_F(TeamsTest, CreateRefusesBadTeamsAndChangesNothing) {
  ExpectRefused(CreateTeam(state_, ctx_, MakeTeam("cv", 4, 2, 0), now_), ErrorCode::kInvalidArgument,
                "weight: must be an integer between 1 and 1000000 (a team's share of the cluster), got 0");
  ExpectRefused(CreateTeam(state_, ctx_, MakeTeam("cv", -1, 2, 1), now_), ErrorCode::kInvalidArgument,
                "quota.gpus: must be an integer between 0 and 1000000, got -1");
  ExpectRefused(CreateTeam(state_, ctx_, MakeTeam("cv", 4, -3, 1), now_), ErrorCode::kInvalidArgument,
                "borrow_limit.gpus: must be an integer between 0 and 1000000, got -3");
  ExpectRefused(CreateTeam(state_, ctx_, MakeTeam("c v", 4, 2, 1), now_), ErrorCode::kInvalidArgument,
                "name: must be 1-64 characters");
  ExpectRefused(CreateTeam(state_, ctx_, MakeTeam("ml", 4, 2, 1), now_), ErrorCode::kAlreadyExists,
                "team 'ml' already exists");
  ExpectRefused(CreateTeam(state_, ctx_, MakeTeam("cv", 4, 2, 1, {"bob", "alice"}), now_),
                ErrorCode::kFailedPrecondition, "users: 'alice' already belongs to team 'ml'");
  ExpectRefused(CreateTeam(state_, ctx_, MakeTeam("cv", 4, 2, 1, {"bob", "bob"}), now_), ErrorCode::kInvalidArgument,
                "users: lists 'bob' twice");
}

TEST_F(TeamsTest, UpdateRefusesBadChangesAndChangesNothing) {
  // The team runs a 2-node job of 1 GPU per node: it holds 2 GPUs.
  auto resolved = Resolve("alice", "", false);
  ASSERT_TRUE(resolved.has_value()) << resolved.error().message;
  api::JobSpec s = *resolved;
  s.nodes = 2;
  const api::JobId id = Submit(s);
  ASSERT_EQ(Pass(), 1);
  ASSERT_EQ(Job(id).state, api::JobState::kRunning);
  ASSERT_EQ(TeamUnitsInUse(state_, "ml"), 2 * api::kGpuShareUnits);

  api::TeamPatch low;
  low.quota_gpus = 1;
  ExpectRefused(UpdateTeam(state_, ctx_, "ml", low, now_), ErrorCode::kInvalidArgument,
                "quota.gpus: 1 is below the 2 GPUs team 'ml' holds now");
  api::TeamPatch negative;
  negative.quota_gpus = -4;
  ExpectRefused(UpdateTeam(state_, ctx_, "ml", negative, now_), ErrorCode::kInvalidArgument,
                "quota.gpus: must be an integer between 0 and 1000000, got -4");
  api::TeamPatch zero_weight;
  zero_weight.weight = 0;
  zero_weight.quota_gpus = 8;  // valid on its own: nothing of the patch applies
  ExpectRefused(UpdateTeam(state_, ctx_, "ml", zero_weight, now_), ErrorCode::kInvalidArgument, "weight:");
  api::TeamPatch remove;
  remove.remove_users = {"carol"};
  ExpectRefused(UpdateTeam(state_, ctx_, "ml", remove, now_), ErrorCode::kInvalidArgument,
                "remove_users: 'carol' is not in team 'ml'");
  api::TeamPatch fine;
  fine.quota_gpus = 2;
  ExpectRefused(UpdateTeam(state_, ctx_, "nope", fine, now_), ErrorCode::kNotFound, "team 'nope' not found");
  ExpectRefused(RemoveTeam(state_, ctx_, "ml", now_), ErrorCode::kFailedPrecondition,
                "team 'ml' has 1 pending or running job(s)");
  ExpectRefused(RemoveTeam(state_, ctx_, "nope", now_), ErrorCode::kNotFound, "team 'nope' not found");

  // The quota may go down to exactly what the team holds.
  auto ok = UpdateTeam(state_, ctx_, "ml", fine, now_);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_TRUE(ok->teams_changed);
  EXPECT_EQ(state_.shares.teams.at("ml").quota_gpus, 2);
}

TEST_F(TeamsTest, AJobGetsItsTeamFromItsSpecOrItsUser) {
  auto own = Resolve("alice", "", false);
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->team, "ml");
  auto none = Resolve("bob", "", false);
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->team, "default");

  auto unknown = Resolve("alice", "vision", false);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  EXPECT_NE(unknown.error().message.find("team: unknown team 'vision'"), std::string::npos)
      << unknown.error().message;
  auto other = Resolve("bob", "ml", false);
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code, ErrorCode::kPermissionDenied);
  EXPECT_NE(other.error().message.find("team: user 'bob' is not in team 'ml' (its users: alice)"), std::string::npos)
      << other.error().message;
  // An admin may name any team; anyone may name "default".
  EXPECT_TRUE(Resolve("bob", "ml", true).has_value());
  EXPECT_TRUE(Resolve("alice", "default", false).has_value());
}

// Removing a team forgets its usage, and a head restart (usage rebuilt from the jobs'
// history) must not bring it back: the removed team used to reappear in `cohort shares` as
// an implicit team, taking a share from every other team, and a team created again under
// its name inherited the old usage only after the restart.
TEST_F(TeamsTest, ARemovedTeamsUsageStaysForgottenAcrossARestart) {
  ASSERT_TRUE(CreateTeam(state_, ctx_, MakeTeam("tmp", 0, std::nullopt, 1, {"erin"}), now_).has_value());
  api::JobSpec spec = Spec(1, 2);
  spec.user = "erin";
  spec.team = "tmp";
  const api::JobId id = Submit(spec);
  ASSERT_EQ(Pass(), 1);
  Advance(100'000);
  Beat(Job(id).allocation.nodes[0].node, {Exited(id, 0, 0, 0)});
  ASSERT_EQ(Job(id).state, api::JobState::kSucceeded);
  Advance(1000);
  EXPECT_NEAR(UsageAsOf(state_, ctx_, now_.unix_ms).at("tmp"), 200, 1);
  ASSERT_TRUE(RemoveTeam(state_, ctx_, "tmp", now_).has_value());

  const auto team_names = [&] {
    std::vector<std::string> names;
    for (const auto& t : Shares(state_, ctx_, now_).teams) names.push_back(t.name);
    return names;
  };
  EXPECT_EQ(team_names(), std::vector<std::string>{"ml"});
  RebuildUsage(state_, ctx_, now_);  // as a restarted head does
  EXPECT_EQ(team_names(), std::vector<std::string>{"ml"}) << "the removed team is back after a restart";
  EXPECT_FALSE(state_.shares.usage.contains("tmp"));

  // Created again: only what runs from now on counts, before and after a restart.
  Advance(1000);
  ASSERT_TRUE(CreateTeam(state_, ctx_, MakeTeam("tmp", 0, std::nullopt, 1, {"erin"}), now_).has_value());
  Advance(1000);
  EXPECT_EQ(UsageAsOf(state_, ctx_, now_.unix_ms).count("tmp"), 0u);
  RebuildUsage(state_, ctx_, now_);
  EXPECT_EQ(UsageAsOf(state_, ctx_, now_.unix_ms).count("tmp") ? UsageAsOf(state_, ctx_, now_.unix_ms).at("tmp") : 0.0,
            0.0)
      << "the old team's usage came back with the new team";
}

}  // namespace
}  // namespace cohort::head::core::testing
