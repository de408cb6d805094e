#include "api/routes.h"

#include <gtest/gtest.h>

#include <regex>

namespace cohort::api::routes {
namespace {

// The builder's path (less any query) matches the pattern the server registers, and the
// captured segments decode back to what was passed in.
void ExpectMatches(const std::string& path, const char* pattern, std::vector<std::string> captures) {
  std::smatch m;
  ASSERT_TRUE(std::regex_match(path, m, std::regex(pattern))) << path << " !~ " << pattern;
  ASSERT_EQ(m.size(), captures.size() + 1) << path;
  for (size_t i = 0; i < captures.size(); ++i) EXPECT_EQ(m[i + 1].str(), captures[i]) << path;
}

TEST(RoutesTest, BuildersMatchTheirPatterns) {
  ExpectMatches(Job(42), kJobPattern, {"42"});
  ExpectMatches(JobCancel(42), kJobCancelPattern, {"42"});
  ExpectMatches(JobHold(42), kJobHoldPattern, {"42"});
  ExpectMatches(JobRelease(42), kJobReleasePattern, {"42"});
  ExpectMatches(JobUpdate(42), kJobUpdatePattern, {"42"});
  ExpectMatches(JobLogs(42), kJobLogsPattern, {"42"});
  ExpectMatches(JobExec(42), kJobExecPattern, {"42"});
  ExpectMatches(JobSteps(42), kJobStepsPattern, {"42"});
  ExpectMatches(JobEnd(42), kJobEndPattern, {"42"});
  ExpectMatches(JobExecOutput(42, "0af3"), kJobExecOutputPattern, {"42", "0af3"});
  ExpectMatches(JobExecInput(42, "0af3"), kJobExecInputPattern, {"42", "0af3"});
  ExpectMatches(AgentExecOutput("0af3"), kAgentExecOutputPattern, {"0af3"});
  ExpectMatches(AgentExecInput("0af3"), kAgentExecInputPattern, {"0af3"});
  ExpectMatches(JobProgress(42), kJobProgressPattern, {"42"});
  ExpectMatches(Node("gpu-01"), kNodePattern, {"gpu-01"});
  ExpectMatches(NodeDrain("gpu-01"), kNodeDrainPattern, {"gpu-01"});
  ExpectMatches(NodeResume("gpu-01"), kNodeResumePattern, {"gpu-01"});
  ExpectMatches(Service("chat-1"), kServicePattern, {"chat-1"});
  ExpectMatches(ServiceScale("chat.v2"), kServiceScalePattern, {"chat.v2"});
  ExpectMatches(AgentHeartbeat("gpu-01"), kAgentHeartbeatPattern, {"gpu-01"});
  ExpectMatches(Report("tok"), kReportPattern, {"tok"});
  ExpectMatches(Rendezvous("tok") + "/keys/a/b", kRendezvousKeyPattern, {"tok", "a/b"});
  ExpectMatches(Rendezvous("tok") + "/add/n", kRendezvousAddPattern, {"tok", "n"});
}

TEST(RoutesTest, PathsAreTheV1Paths) {
  EXPECT_EQ(Job(7), "/v1/jobs/7");
  EXPECT_EQ(JobCancel(7), "/v1/jobs/7/cancel");
  EXPECT_EQ(JobHold(7), "/v1/jobs/7/hold");
  EXPECT_EQ(JobUpdate(7), "/v1/jobs/7/update");
  EXPECT_EQ(JobLogs(7), "/v1/jobs/7/logs");
  EXPECT_EQ(JobProgress(7), "/v1/jobs/7/progress");
  EXPECT_EQ(Node("n1"), "/v1/nodes/n1");
  EXPECT_EQ(NodeDrain("n1"), "/v1/nodes/n1/drain");
  EXPECT_EQ(NodeResume("n1"), "/v1/nodes/n1/resume");
  EXPECT_EQ(AgentHeartbeat("n1"), "/v1/agents/n1/heartbeat");
  EXPECT_EQ(Rendezvous("t"), "/v1/rendezvous/t");
  EXPECT_EQ(Report("t"), "/v1/report/t");
  EXPECT_STREQ(kJobs, "/v1/jobs");
  EXPECT_STREQ(kNodes, "/v1/nodes");
  EXPECT_STREQ(kAgentRegister, "/v1/agents/register");
  EXPECT_STREQ(kDashboard, "/v1/dashboard");
  EXPECT_STREQ(kUsage, "/v1/usage");
  EXPECT_STREQ(kHealth, "/v1/health");
  EXPECT_STREQ(kMetrics, "/metrics");
  EXPECT_STREQ(kAgentWake, "/v1/wake");
  EXPECT_STREQ(kAgentLogs, "/v1/logs");
  EXPECT_STREQ(kAgentSimulateXid, "/v1/simulate/xid");
}

TEST(RoutesTest, NamesArePercentEncoded) {
  // A name with '/' stays one segment: it cannot reach another route.
  EXPECT_EQ(Node("a/b c"), "/v1/nodes/a%2Fb%20c");
  EXPECT_EQ(NodeDrain("../x"), "/v1/nodes/..%2Fx/drain");
  EXPECT_EQ(UrlEncode("Az09-_.~"), "Az09-_.~");
  EXPECT_EQ(UrlEncode("é&="), "%C3%A9%26%3D");
}

TEST(RoutesTest, WithQueryEncodesValuesAndJoins) {
  EXPECT_EQ(WithQuery(kUsage, {}), "/v1/usage");
  EXPECT_EQ(WithQuery(kUsage, {{"since", "10"}, {"user", "a b&c"}}), "/v1/usage?since=10&user=a%20b%26c");
}

}  // namespace
}  // namespace cohort::api::routes
