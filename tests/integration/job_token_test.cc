// A job's own token (COHORT_JOB_TOKEN, issue 13): from inside a task it reads its job's
// state, logs and progress, through curl and through the CLI, and nothing else: not
// another job, not a listing, no change; and it stops working when its attempt ends.
#include <fstream>

#include "harness.h"

namespace cohort::testing {
namespace {

// `curl` of the head's API as the job: prints "<label>=<HTTP status>".
std::string Probe(const std::string& label, const std::string& method, const std::string& path) {
  return "printf '" + label + "=%s\\n' \"$(curl -s --cacert \"$ca\" -o /dev/null -w '%{http_code}' -X " + method +
         " -H \"Authorization: Bearer $COHORT_JOB_TOKEN\" -H 'Content-Type: application/json' " +
         (method == "POST" ? "-d '{\"command\": [\"true\"]}' " : "") + "\"$COHORT_HEAD" + path + "\")\"; ";
}

TEST(JobToken, ATaskReadsItsOwnJobAndNothingElse) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  const std::string gate = c.dir() + "/gate";
  // The other job: it waits, so that it is RUNNING while the first one probes.
  json other = c.Submit({{"command", {"sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.05; done"}},
                         {"gpus_per_node", 1}});
  c.WaitForState(other["id"], "RUNNING");
  const std::string other_id = std::to_string(other["id"].get<int64_t>());
  const std::string kept = c.dir() + "/job-token";

  // The agent runs with the admin's COHORT_TOKEN (the harness exports it): none of the
  // agent's credentials reach the task.
  std::string script = std::string(kTaskCaFile) + "echo started; " +
                       "echo inherited_token=${COHORT_TOKEN:-none}; echo inherited_join=${COHORT_JOIN_TOKEN:-none}; " +
                       Probe("own", "GET", "/v1/jobs/$COHORT_JOB_ID") +
                       Probe("own_logs", "GET", "/v1/jobs/$COHORT_JOB_ID/logs") +
                       Probe("own_progress", "GET", "/v1/jobs/$COHORT_JOB_ID/progress") +
                       Probe("other", "GET", "/v1/jobs/" + other_id) +
                       Probe("other_logs", "GET", "/v1/jobs/" + other_id + "/logs") +
                       Probe("list", "GET", "/v1/jobs") +
                       Probe("nodes", "GET", "/v1/nodes") +
                       Probe("submit", "POST", "/v1/jobs") +
                       Probe("cancel_own", "POST", "/v1/jobs/$COHORT_JOB_ID/cancel") +
                       Probe("cancel_other", "POST", "/v1/jobs/" + other_id + "/cancel") +
                       // The other job's rendezvous keys, with this job's MAC under its id.
                       "r=${COHORT_RENDEZVOUS%/*}; mac=${COHORT_RENDEZVOUS##*-}; "
                       "printf 'other_keys=%s\\n' \"$(curl -s --cacert \"$ca\" -o /dev/null -w '%{http_code}' "
                       "\"$r/" + other_id + "-0-$mac/keys/x\")\"; "
                       // The CLI inside a task: COHORT_HEAD, COHORT_CA and COHORT_JOB_TOKEN suffice.
                       "home=$(mktemp -d); HOME=$home " + std::string(COHORT_BINARY) +
                       " show $COHORT_JOB_ID > /dev/null 2>&1; echo cli_show=$?; "
                       "HOME=$home " + std::string(COHORT_BINARY) + " show " + other_id +
                       " > /dev/null 2>&1; echo cli_other=$?; rm -rf \"$home\"; "
                       "printf '%s' \"$COHORT_JOB_TOKEN\" > " + kept;
  json job = c.Submit({{"command", {"sh", "-c", script}}, {"gpus_per_node", 1}});
  c.WaitForState(job["id"], "SUCCEEDED");
  const auto seen = ParseEnvLines(c.Logs(job["id"], 0));
  const std::map<std::string, std::string> want = {
      {"own", "200"},          {"own_logs", "200"},     {"own_progress", "200"}, {"other", "403"},
      {"other_logs", "403"},   {"list", "403"},         {"nodes", "403"},        {"submit", "403"},
      {"cancel_own", "403"},   {"cancel_other", "403"}, {"other_keys", "404"},   {"cli_show", "0"},
      {"cli_other", "4"} /* refused credentials */,      {"inherited_token", "none"}, {"inherited_join", "none"},
  };
  for (const auto& [probe, status] : want) {
    auto it = seen.find(probe);
    ASSERT_NE(it, seen.end()) << probe << " did not run: " << c.Logs(job["id"], 0);
    EXPECT_EQ(it->second, status) << probe << "\n" << c.Logs(job["id"], 0);
  }
  EXPECT_EQ(c.Job(other["id"])["state"], "RUNNING") << "the other job was not touched";

  // The attempt ended: its token no longer works, and says why.
  std::string token;
  std::ifstream(kept) >> token;
  ASSERT_EQ(token.rfind("cohortjob_", 0), 0u) << token;
  auto raw = RawClient(c.url());
  auto r = raw->Get("/v1/jobs/" + std::to_string(job["id"].get<int64_t>()), {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_NE(r->body.find("ended"), std::string::npos) << r->body;
  // A forged one (a changed MAC) is refused the same way as any unknown credential.
  token.back() = token.back() == '0' ? '1' : '0';
  r = raw->Get("/v1/jobs/" + other_id, {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401) << r->body;

  std::ofstream(gate) << "go";
  c.WaitForState(other["id"], "SUCCEEDED");
}

}  // namespace
}  // namespace cohort::testing
