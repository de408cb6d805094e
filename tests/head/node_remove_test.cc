// DELETE /v1/nodes/{name} (`cohort node rm`) against an in-process head: an alive node is
// refused (409 failed_precondition, forced or not), parameters and access are checked; a
// node that went DOWN is removed for good (also across a restart), its old credential is
// refused from then on, and the name joins again with a join token, getting a new one.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "common/http.h"
#include "head_server_fixture.h"

namespace cohort::head {
namespace {

class NodeRemoveTest : public HeadServerTest {
 protected:
  // Registers `name` with the head's join token, as an agent does; its node credential.
  std::string Join(const std::string& name, const std::string& incarnation) {
    std::string join;
    std::ifstream(config_.state_dir + "/join.token") >> join;
    auto r = Send("POST", "/v1/agents/register",
                  join, json{{"name", name}, {"address", "127.0.0.1"}, {"incarnation", incarnation}, {"cpus", 1}}.dump());
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no reply");
    return r && r->status == 200 ? json::parse(r->body).value("node_credential", "") : "";
  }

  int Heartbeat(const std::string& name, const std::string& credential, const std::string& incarnation,
                std::string* error = nullptr) {
    auto r = Send("POST", "/v1/agents/" + name + "/heartbeat", credential, json{{"incarnation", incarnation}}.dump());
    EXPECT_TRUE(r);
    if (r && error) *error = ErrorFromResponse(r->status, r->body).message;
    return r ? r->status : 0;
  }

  // The error of DELETE `path` as admin: its status and code.
  std::pair<int, ErrorCode> DeleteError(const std::string& path) {
    auto r = http_->Delete(path);
    EXPECT_TRUE(r) << path;
    if (!r) return {0, ErrorCode::kInternal};
    return {r->status, ErrorFromResponse(r->status, r->body).code};
  }
};

TEST_F(NodeRemoveTest, AnAliveNodeIsRefusedAndParametersAndAccessAreChecked) {
  const std::string credential = Join("n1", "i1");
  ASSERT_EQ(Heartbeat("n1", credential, "i1"), 200);
  for (const char* path : {"/v1/nodes/n1", "/v1/nodes/n1?force=true"}) {
    auto r = http_->Delete(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 409) << path;
    const Error e = ErrorFromResponse(r->status, r->body);
    EXPECT_EQ(e.code, ErrorCode::kFailedPrecondition);
    EXPECT_NE(e.message.find("is alive"), std::string::npos) << e.message;
  }
  EXPECT_EQ(DeleteError("/v1/nodes/n1?force=yes"), std::make_pair(400, ErrorCode::kInvalidArgument));
  EXPECT_EQ(DeleteError("/v1/nodes/ghost"), std::make_pair(404, ErrorCode::kNotFound));
  EXPECT_EQ(Send("DELETE", "/v1/nodes/n1", MakeToken("ulla", "user"))->status, 403);
  EXPECT_EQ(Send("DELETE", "/v1/nodes/n1", "")->status, 401);
  EXPECT_EQ(Heartbeat("n1", credential, "i1"), 200) << "a refused removal retires nothing";
  EXPECT_EQ(GetJson("/v1/nodes/n1").value("name", ""), "n1");
}

// A head whose nodes are DOWN 300 ms after their last heartbeat.
class DeadNodeRemoveTest : public NodeRemoveTest {
 protected:
  void Configure(HeadConfig& c) override {
    c.timing.heartbeat_interval_ms = 100;
    c.timing.fence_timeout_ms = 200;
    c.timing.failure_timeout_ms = 300;
  }

  // Waits (up to 30 s) until the head shows `name` DOWN.
  bool WaitUntilDown(const std::string& name) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = http_->Get("/v1/nodes/" + name);
      if (r && r->status == 200 && json::parse(r->body).value("state", "") == "DOWN") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
};

TEST_F(DeadNodeRemoveTest, ADownNodeGoesForGoodAndItsOldCredentialWithIt) {
  const std::string old = Join("n1", "i1");
  ASSERT_EQ(Heartbeat("n1", old, "i1"), 200);
  ASSERT_TRUE(WaitUntilDown("n1"));
  auto removed = http_->Delete("/v1/nodes/n1");
  ASSERT_TRUE(removed);
  ASSERT_EQ(removed->status, 200) << removed->body;
  EXPECT_EQ(json::parse(removed->body).value("name", ""), "n1");
  EXPECT_EQ(http_->Get("/v1/nodes/n1")->status, 404);
  EXPECT_EQ(GetJson("/v1/nodes")["nodes"].size(), 0u);

  // The agent comes back with its old credential: refused, saying why.
  std::string why;
  EXPECT_EQ(Heartbeat("n1", old, "i1", &why), 401);
  EXPECT_NE(why.find("retired when the node was removed"), std::string::npos) << why;

  // Gone from the store too, and still refused after a restart.
  Restart();
  EXPECT_EQ(http_->Get("/v1/nodes/n1")->status, 404);
  EXPECT_EQ(Heartbeat("n1", old, "i1"), 401);

  // With a join token the name joins again, with a credential of its own.
  const std::string fresh = Join("n1", "i2");
  ASSERT_FALSE(fresh.empty());
  EXPECT_NE(fresh, old);
  EXPECT_EQ(Heartbeat("n1", fresh, "i2"), 200);
  EXPECT_EQ(Heartbeat("n1", old, "i2"), 401);

  // The removal is in the audit log.
  bool audited = false;
  const json audit = GetJson("/v1/audit");
  for (const auto& e : audit["entries"]) {
    audited = audited || (e.value("method", "") == "DELETE" && e.value("path", "") == "/v1/nodes/n1" &&
                          e.value("status", 0) == 200);
  }
  EXPECT_TRUE(audited) << audit.dump(1);
}

}  // namespace
}  // namespace cohort::head
