// POST /v1/teams and PUT /v1/teams/{name} bodies from outside: every bad field is refused
// with its name and the value (negative or non-integer quotas, a weight of 0, unknown
// fields), and the stored form round-trips.
#include <gtest/gtest.h>

#include "api/team.h"

namespace cohort::api {
namespace {

void ExpectTeamRefused(const json& body, const std::string& part) {
  auto t = TeamFromJson(body);
  ASSERT_FALSE(t.has_value()) << "accepted " << body.dump();
  EXPECT_EQ(t.error().code, ErrorCode::kInvalidArgument) << t.error().message;
  EXPECT_NE(t.error().message.find(part), std::string::npos) << body.dump() << " -> " << t.error().message;
}

void ExpectPatchRefused(const json& body, const std::string& part) {
  auto p = TeamPatchFromJson(body);
  ASSERT_FALSE(p.has_value()) << "accepted " << body.dump();
  EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument) << p.error().message;
  EXPECT_NE(p.error().message.find(part), std::string::npos) << body.dump() << " -> " << p.error().message;
}

TEST(TeamCodec, ATeamWithEveryFieldRoundTrips) {
  auto t = TeamFromJson(
      json::parse(R"({"name": "ml", "quota": {"gpus": 16}, "borrow_limit": {"gpus": 8}, "weight": 2,
                      "users": ["bob", "alice"]})"));
  ASSERT_TRUE(t.has_value()) << t.error().message;
  EXPECT_EQ(t->quota_gpus, 16);
  EXPECT_EQ(t->borrow_limit_gpus, 8);
  EXPECT_EQ(t->LimitGpus(), 24);
  EXPECT_EQ(t->weight, 2);
  EXPECT_EQ(t->users, (std::vector<std::string>{"alice", "bob"}));
  auto back = TeamsFromJson(TeamsToJson({*t}));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0], *t);
  // Defaults: quota 0, unlimited borrowing, weight 1.
  auto bare = TeamFromJson(json{{"name", "cv"}});
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->quota_gpus, 0);
  EXPECT_FALSE(bare->borrow_limit_gpus.has_value());
  EXPECT_EQ(bare->weight, 1);
}

TEST(TeamCodec, BadTeamsNameTheFieldAndTheValue) {
  ExpectTeamRefused(json::parse(R"({"name": "ml", "quota": {"gpus": -1}})"), "quota.gpus");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "quota": {"gpus": -1}})"), "-1");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "quota": {"gpus": 2.5}})"), "quota.gpus");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "quota": {"gpus": "4"}})"), "quota.gpus");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "quota": 4})"), "quota");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "quota": {"gpus": 4, "cpus": 2}})"), "cpus");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "quota": {"gpus": 1000001}})"), "quota.gpus");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "borrow_limit": {"gpus": -2}})"), "borrow_limit.gpus");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "weight": 0})"), "weight");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "weight": 0})"), "got 0");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "weight": 1.5})"), "weight");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "weight": -3})"), "weight");
  ExpectTeamRefused(json::parse(R"({"name": "m l"})"), "name");
  ExpectTeamRefused(json::parse(R"({"quota": {"gpus": 1}})"), "name");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "users": ["al ice"]})"), "users[0]");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "users": ["a", "a"]})"), "lists 'a' twice");
  ExpectTeamRefused(json::parse(R"({"name": "ml", "qouta": {"gpus": 1}})"), "qouta");
}

TEST(TeamCodec, BadPatchesNameTheFieldAndTheValue) {
  ExpectPatchRefused(json::parse(R"({"quota": {"gpus": -4}})"), "quota.gpus");
  ExpectPatchRefused(json::parse(R"({"quota": {"gpus": 0.5}})"), "quota.gpus");
  ExpectPatchRefused(json::parse(R"({"weight": 0})"), "weight");
  ExpectPatchRefused(json::parse(R"({"borrow_limit": 3})"), "borrow_limit: must be {\"gpus\": N} or \"unlimited\"");
  ExpectPatchRefused(json::parse(R"({"borrow_limit": "none"})"), "borrow_limit");
  ExpectPatchRefused(json::parse(R"({})"), "nothing to change");
  ExpectPatchRefused(json::parse(R"({"weigth": 2})"), "weigth");

  auto unlimited = TeamPatchFromJson(json::parse(R"({"borrow_limit": "unlimited"})"));
  ASSERT_TRUE(unlimited.has_value()) << unlimited.error().message;
  EXPECT_TRUE(unlimited->borrow_unlimited);
  auto quota = TeamPatchFromJson(json::parse(R"({"quota": {"gpus": 0}, "weight": 3})"));
  ASSERT_TRUE(quota.has_value()) << quota.error().message;
  EXPECT_EQ(quota->quota_gpus, 0);
  EXPECT_EQ(quota->weight, 3);
}

}  // namespace
}  // namespace cohort::api
