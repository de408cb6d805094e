// `cohort audit`: its time flags (RFC 3339 or a duration back from now), the checks of
// every flag (each error names its flag), and the table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/client.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNow = 1'800'000'000'000;  // 2027-01-15T08:00:00Z

AuditFlags Flags(std::string user, std::string since, std::string until, std::string limit = "100") {
  AuditFlags f;
  f.user = std::move(user);
  f.since = std::move(since);
  f.until = std::move(until);
  f.limit = std::move(limit);
  return f;
}

TEST(ParseTimeFlagTest, Rfc3339TimesAndDurationsBackFromNow) {
  EXPECT_EQ(ParseTimeFlag("2027-01-15T08:00:00Z", "--since", 0).value(), kNow);
  EXPECT_EQ(ParseTimeFlag("2027-01-15t08:00:00z", "--since", 0).value(), kNow);
  EXPECT_EQ(ParseTimeFlag("2027-01-15 08:00:00Z", "--since", 0).value(), kNow);
  EXPECT_EQ(ParseTimeFlag("2027-01-15T09:30:00+01:30", "--since", 0).value(), kNow);
  EXPECT_EQ(ParseTimeFlag("2027-01-15T03:00:00-05:00", "--since", 0).value(), kNow);
  EXPECT_EQ(ParseTimeFlag("2027-01-15T08:00:00.25Z", "--since", 0).value(), kNow + 250);
  EXPECT_EQ(ParseTimeFlag("2027-01-15T08:00:00.123456Z", "--since", 0).value(), kNow + 123);
  EXPECT_EQ(ParseTimeFlag("2024-02-29T00:00:00Z", "--since", 0).value(), 1'709'164'800'000);
  EXPECT_EQ(ParseTimeFlag("1h", "--since", kNow).value(), kNow - 3'600'000);
  EXPECT_EQ(ParseTimeFlag("7d", "--since", kNow).value(), kNow - 7 * 86'400'000LL);
  EXPECT_EQ(ParseTimeFlag("90m", "--since", kNow).value(), kNow - 5'400'000);
  EXPECT_EQ(ParseTimeFlag("1h", "--since", 1000).value(), 0) << "never before 1970";
  for (const char* bad : {"", "yesterday", "-1h", "1w", "2027-01-15", "2027-01-15T08:00:00", "2027-01-15T08:00Z",
                          "2027-13-01T00:00:00Z", "2027-02-30T00:00:00Z", "2027-01-15T24:00:00Z",
                          "2027-01-15T08:00:00+1:00", "2027-01-15T08:00:00.Z", "2027-01-15T08:00:00Zjunk",
                          "1969-12-31T23:59:59Z"}) {
    auto r = ParseTimeFlag(bad, "--since", kNow);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << bad;
    EXPECT_EQ(r.error().field, "--since") << bad;
    EXPECT_THAT(r.error().message, HasSubstr("RFC 3339")) << bad;
  }
}

TEST(AuditQueryForTest, BuildsTheQueryFromTheFlags) {
  auto q = AuditQueryFor(Flags("alice", "1h", "2027-01-15T08:00:00Z", "20"), kNow);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(*q, (std::vector<std::pair<std::string, std::string>>{{"user", "alice"},
                                                                    {"since", std::to_string(kNow - 3'600'000)},
                                                                    {"until", std::to_string(kNow)},
                                                                    {"limit", "20"}}));
  auto plain = AuditQueryFor({}, kNow);
  ASSERT_TRUE(plain);
  EXPECT_EQ(*plain, (std::vector<std::pair<std::string, std::string>>{{"limit", "100"}}));
}

TEST(AuditQueryForTest, EveryFlagIsCheckedAndNamed) {
  struct Case {
    AuditFlags flags;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {Flags("a b", "", ""), "--user"},
           {Flags(std::string(65, 'u'), "", ""), "--user"},
           {Flags("", "soon", ""), "--since"},
           {Flags("", "", "later"), "--until"},
           {Flags("", "1h", "2h"), "--until"},
           {Flags("", "2027-01-15T08:00:00Z", "2027-01-15T08:00:00Z"), "--until"},
           {Flags("", "", "", "0"), "--limit"},
           {Flags("", "", "", "10001"), "--limit"},
           {Flags("", "", "", "ten"), "--limit"},
       }) {
    auto q = AuditQueryFor(c.flags, kNow);
    ASSERT_FALSE(q) << c.field;
    EXPECT_EQ(q.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(q.error().field, c.field) << q.error().message;
    EXPECT_THAT(q.error().message, HasSubstr(c.field));
  }
}

TEST(RenderAuditTest, OneRowPerRequestWithWhoAndTheAnswer) {
  api::AuditEntry ok;
  ok.id = 1;
  ok.time_ms = kNow;
  ok.caller = "alice (user, token 0123456789ab)";
  ok.user = "alice";
  ok.token_id = "0123456789ab";
  ok.client = "10.0.0.7";
  ok.method = "POST";
  ok.path = "/v1/jobs";
  ok.status = 201;
  ok.job_id = 12;
  api::AuditEntry node = ok;
  node.id = 2;
  node.caller = "node gpu-3";
  node.user = node.token_id = "";
  node.node = "gpu-3";
  node.path = "/v1/agents/gpu-4/heartbeat";
  node.status = 403;
  node.job_id = 0;
  node.error = "node gpu-3 may not heartbeat for node gpu-4";
  api::AuditEntry anon = node;
  anon.id = 3;
  anon.caller = "anonymous";
  anon.node = "";
  anon.client = "";
  anon.path = "/v1/tokens";
  anon.status = 401;
  anon.error = "this request needs a token";
  EXPECT_EQ(RenderAudit({ok, node, anon}),
            "TIME                  WHO         TOKEN         CLIENT    REQUEST                          STATUS  JOB  "
            "ERROR\n"
            "2027-01-15T08:00:00Z  alice       0123456789ab  10.0.0.7  POST /v1/jobs                    201     12\n"
            "2027-01-15T08:00:00Z  node gpu-3  -             10.0.0.7  POST /v1/agents/gpu-4/heartbeat  403     -    "
            "node gpu-3 may not heartbeat for node gpu-4\n"
            "2027-01-15T08:00:00Z  anonymous   -             -         POST /v1/tokens                  401     -    "
            "this request needs a token\n");
  // A join: the join token's user and the node it registered.
  api::AuditEntry join = ok;
  join.user = "agents";
  join.node = "gpu-9";
  join.path = "/v1/agents/register";
  join.status = 200;
  join.job_id = 0;
  EXPECT_NE(RenderAudit({join}).find("  agents (node gpu-9)  0123456789ab  "), std::string::npos) << RenderAudit({join});
}

}  // namespace
}  // namespace cohort::cli
