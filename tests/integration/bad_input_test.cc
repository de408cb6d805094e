// Bad input at the HTTP API: each gets a clear error naming what is wrong, with the
// right status, and nothing stored is changed.
#include <httplib.h>

#include "harness.h"

namespace cohort::testing {
namespace {

class BadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster();
    cluster_->StartHead();
    cluster_->StartAgent("node-a", 4);
    cluster_->StartAgent("node-b", 4);
    cluster_->WaitForNodes(2);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  static std::pair<int, json> Post(const std::string& path, const std::string& body) {
    return PostRaw(*cluster_, path, body);
  }
  static std::pair<int, json> Get(const std::string& path) {
    auto r = RawClient(cluster_->url())->Get(path, {{"Authorization", "Bearer " + TestToken()}});
    if (!r) return {0, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  static std::string Message(const json& j) { return j.is_object() ? j["error"].value("message", "") : ""; }
  static std::string Field(const json& j) { return j.is_object() ? j["error"].value("field", "") : ""; }

  static LocalCluster* cluster_;
};
LocalCluster* BadInput::cluster_ = nullptr;

TEST_F(BadInput, MalformedJson) {
  auto [status, body] = Post("/v1/jobs", "{\"command\": [\"true\"");
  EXPECT_EQ(status, 400);
  EXPECT_NE(Message(body).find("not valid JSON"), std::string::npos) << body.dump();
  auto [s2, b2] = Post("/v1/jobs", "");
  EXPECT_EQ(s2, 400);
  auto [s3, b3] = Post("/v1/jobs", "[1,2]");
  EXPECT_EQ(s3, 400);
  EXPECT_NE(Message(b3).find("JSON object"), std::string::npos) << b3.dump();
}

TEST_F(BadInput, EachBadFieldIsNamed) {
  struct Case {
    std::string body, field, text;
  };
  std::vector<Case> cases = {
      {R"({"command": ["true"], "gpu": 1})", "gpu", "did you mean 'gpus'"},
      {R"({"command": ["true"], "gpus": "h100:x"})", "gpus", "[TYPE:]COUNT"},
      {R"({"command": ["true"], "gpus_per_task": 1.5})", "gpus_per_task", "0.25, 0.5 or 0.75"},
      {R"({"command": ["true"], "gpus_per_node": -1})", "gpus_per_node", "between 0 and 1024"},
      {R"({"command": ["true"], "gpus_per_node": 1000000000})", "gpus_per_node", "between 0 and 1024"},
      {R"({"command": ["true"], "nodes": 0})", "nodes", "between 1 and 4096"},
      {R"({"command": ["true"], "nodes": "two"})", "nodes", "must be an integer"},
      {R"({"command": []})", "command", "must name a program"},
      {R"({"nodes": 1})", "command", "is required"},
      {R"({"command": "true"})", "command", "array of strings"},
      {R"({"command": ["true"], "placement": "random"})", "placement", "'pack' or 'spread'"},
      {R"({"command": ["true"], "tasks_per_node": 3, "gpus_per_node": 4})", "gpus_per_node", "split evenly"},
      {R"({"command": ["true"], "env": {"RANK": "3"}})", "env.RANK", "set by Cohort"},
      {R"({"command": ["true"], "env": {"A B": "x"}})", "env.A B", "not a valid environment variable"},
      {R"({"command": ["true"], "workdir": "relative/dir"})", "workdir", "absolute path"},
      {R"({"command": ["true"], "priority": 5000})", "priority", "between -1000 and 1000"},
      {R"({"command": ["true"], "name": "has space"})", "name", "letters, digits"},
  };
  for (const auto& tc : cases) {
    auto [status, body] = Post("/v1/jobs", tc.body);
    EXPECT_EQ(status, 400) << tc.body;
    EXPECT_EQ(Field(body), tc.field) << tc.body << " → " << body.dump();
    EXPECT_NE(Message(body).find(tc.text), std::string::npos) << tc.body << " → " << body.dump();
  }
}

TEST_F(BadInput, JobThatCanNeverFitIsRejectedWithTheReason) {
  auto [s1, b1] = Post("/v1/jobs", R"({"command": ["true"], "gpus_per_node": 8})");
  EXPECT_EQ(s1, 422);
  EXPECT_NE(Message(b1).find("8"), std::string::npos) << b1.dump();
  auto [s2, b2] = Post("/v1/jobs", R"({"command": ["true"], "nodes": 3, "gpus_per_node": 1})");
  EXPECT_EQ(s2, 422);
  EXPECT_NE(Message(b2).find("3 nodes"), std::string::npos) << b2.dump();
  // Nothing was queued.
  auto [s3, b3] = Get("/v1/jobs?state=PENDING");
  EXPECT_EQ(s3, 200);
  EXPECT_TRUE(b3["jobs"].empty()) << b3.dump();
}

TEST_F(BadInput, UnknownIds) {
  auto [s1, b1] = Get("/v1/jobs/999999");
  EXPECT_EQ(s1, 404);
  EXPECT_NE(Message(b1).find("999999"), std::string::npos);
  auto [s2, b2] = Get("/v1/jobs/abc");
  EXPECT_EQ(s2, 400);
  auto [s3, b3] = Post("/v1/jobs/999999/cancel", "");
  EXPECT_EQ(s3, 404);
  auto [s4, b4] = Get("/v1/nodes/no-such-node");
  EXPECT_EQ(s4, 404);
  EXPECT_NE(Message(b4).find("no-such-node"), std::string::npos);
  auto [s5, b5] = Post("/v1/nodes/no-such-node/drain", "");
  EXPECT_EQ(s5, 404);
  auto [s6, b6] = Get("/v1/jobs/999999/logs");
  EXPECT_EQ(s6, 404);
  auto [s7, b7] = Get("/v1/no/such/endpoint");
  EXPECT_EQ(s7, 404);
  EXPECT_NE(Message(b7).find("no such endpoint"), std::string::npos);
  auto [s8, b8] = Get("/v1/jobs?state=SLEEPING");
  EXPECT_EQ(s8, 400);
  EXPECT_EQ(Field(b8), "state");
}

TEST_F(BadInput, AgentProtocolRejectsStrangers) {
  // No credentials, or a user's: only a node's own credential heartbeats (head/auth.h).
  auto [s0, b0] = PostRaw(*cluster_, "/v1/agents/node-a/heartbeat", R"({"incarnation": "abc", "tasks": []})", "");
  EXPECT_EQ(s0, 401) << b0.dump();
  auto [s1, b1] = Post("/v1/agents/ghost/heartbeat", R"({"incarnation": "abc", "tasks": []})");
  EXPECT_EQ(s1, 403) << b1.dump();
  // A node registered here (its credential and certificate come with the reply) cannot
  // heartbeat for another node, its credential needs its certificate, and its own
  // heartbeat with a stale incarnation is refused.
  NodeKey key;
  json registration = {{"name", "stranger"}, {"address", "127.0.0.9"}, {"agent_url", "https://127.0.0.9:1"},
                       {"incarnation", "i1"}, {"cpus", 1}, {"csr", key.csr}};
  auto [sr, reg] = Post("/v1/agents/register", registration.dump());
  ASSERT_EQ(sr, 200) << reg.dump();
  const std::string credential = reg.value("node_credential", "");
  ASSERT_FALSE(credential.empty()) << reg.dump();
  auto cert = key.Identity(reg);
  auto [s2, b2] = PostRaw(*cluster_, "/v1/agents/node-a/heartbeat", R"({"incarnation": "i1", "tasks": []})", credential,
                          cert);
  EXPECT_EQ(s2, 403) << b2.dump();
  auto [s2a, b2a] = PostRaw(*cluster_, "/v1/agents/stranger/heartbeat", R"({"incarnation": "i1", "tasks": []})",
                            credential);
  EXPECT_EQ(s2a, 401) << b2a.dump();
  auto [s2b, b2b] = PostRaw(*cluster_, "/v1/agents/stranger/heartbeat", R"({"incarnation": "wrong", "tasks": []})",
                            credential, cert);
  EXPECT_EQ(s2b, 409) << b2b.dump();
  auto [s3, b3] = Post("/v1/agents/register", R"({"name": "x y", "address": "1.2.3.4", "incarnation": "i1"})");
  EXPECT_EQ(s3, 400);
  EXPECT_EQ(Field(b3), "name");
  auto [s4, b4] = Post("/v1/agents/register", R"({"name": "n", "address": "1.2.3.4", "incarnation": "i1", "gpus": [{"index": 5}]})");
  EXPECT_EQ(s4, 400);
  // The live nodes are untouched.
  EXPECT_EQ(cluster_->Node("node-a")["state"], "UP");
}

}  // namespace
}  // namespace cohort::testing
