// Unbounded input at a running cluster: an endless chunked upload, a header line of
// 300 MiB, numbers beyond a double, deeply nested JSON, YAML alias bombs in spec files, an
// environment exec cannot take and working directories no node could have. Each gets a
// clear error; the head's memory stays bounded; and afterwards the jobs that were running
// still run, the node is still up and no job was added.
#include <gmock/gmock.h>

#include "../common/raw_http.h"
#include "harness.h"

namespace cohort::testing {
namespace {

using ::testing::HasSubstr;

class BoundedInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster();
    // Plain HTTP (tokens still asked for): these requests are written byte by byte on a raw
    // socket. The limits are HttpServer's, the same under TLS (tls_test covers the
    // handshake's own deadline).
    cluster_->StartHead(0, {"--no-tls"});
    cluster_->StartAgent("node-a", 2);
    cluster_->WaitForNodes(1);
    running_.clear();
    for (int i = 0; i < 2; ++i) {
      json job = cluster_->Submit({{"command", {"sleep", "600"}}, {"gpus_per_node", 1}});
      running_.push_back(job.value("id", int64_t(0)));
    }
    for (int64_t id : running_) cluster_->WaitForState(id, "RUNNING");
    jobs_ = running_.size();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // The jobs still run, the node is up, and the head holds the jobs it held.
  void TearDown() override {
    for (int64_t id : running_) EXPECT_EQ(State(cluster_->Job(id)), "RUNNING") << "job " << id;
    EXPECT_EQ(State(cluster_->Node("node-a")), "UP");
    auto jobs = cluster_->client().Get("/v1/jobs?state=all");
    ASSERT_TRUE(jobs.has_value()) << jobs.error().message;
    EXPECT_EQ((*jobs)["jobs"].size(), jobs_);
  }

  static std::pair<int, json> Post(const std::string& path, const std::string& body) {
    return PostRaw(*cluster_, path, body);
  }
  // A job's or node's "state"; "" when the head did not answer.
  static std::string State(const json& j) { return j.is_object() ? j.value("state", "") : ""; }
  static std::string Field(const json& j) { return ErrorPart(j, "field"); }
  static std::string Message(const json& j) { return ErrorPart(j, "message"); }
  static std::string ErrorPart(const json& j, const char* key) {
    bool error = j.is_object() && j.contains("error") && j["error"].is_object();
    return error ? j["error"].value(key, "") : "";
  }

  static std::string Write(const std::string& name, const std::string& text) {
    std::string path = cluster_->dir() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // `cohort submit FILE` with at most 1 GiB of address space, so that a spec that would
  // expand without bound fails the test instead of the machine.
  static CliResult SubmitFile(const std::string& path) {
    return RunCli(*cluster_, {"sh", "-c", fmt::format("ulimit -v 1048576 && exec '{}' --head '{}' submit '{}'",
                                                      COHORT_BINARY, cluster_->url(), path)});
  }

  static LocalCluster* cluster_;
  static std::vector<int64_t> running_;
  static size_t jobs_;
};
LocalCluster* BoundedInput::cluster_ = nullptr;
std::vector<int64_t> BoundedInput::running_;
size_t BoundedInput::jobs_ = 0;

TEST_F(BoundedInput, EndlessUploadsAre413AndTheHeadsMemoryStaysBounded) {
  MemoryWatch head_memory(cluster_->head().pid());
  // 300 MB offered to routes that read JSON.
  for (const char* path : {"/v1/jobs", "/v1/nodes/node-a/drain", "/v1/agents/register"}) {
    RawReply r = RawUpload(cluster_->port(), ChunkedPost(path), int64_t(300) << 20, /*chunked=*/true);
    EXPECT_EQ(r.status, 413) << path << ": " << r.text.substr(0, 300);
    EXPECT_EQ(ReplyErrorMessage(r.text), "request body is too large (at most 4 MiB)") << path;
    EXPECT_LT(r.sent, int64_t(300) << 20) << path << ": the head read the whole body";
  }
  // And to a route that does not exist: httplib reads such a body itself, HttpServer
  // stops it at the cap.
  RawReply nowhere = RawUpload(cluster_->port(), ChunkedPost("/v1/no/such/route"), int64_t(300) << 20, true);
  EXPECT_EQ(nowhere.status, 400) << nowhere.text.substr(0, 300);
  EXPECT_THAT(ReplyErrorMessage(nowhere.text), HasSubstr("its body past 4 MiB"));
  EXPECT_LT(nowhere.sent, int64_t(300) << 20);
  // A body declared too large is refused before it is read.
  RawReply declared = RawUpload(cluster_->port(),
                                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 314572800\r\n\r\n",
                                int64_t(300) << 20, /*chunked=*/false);
  EXPECT_EQ(declared.status, 413) << declared.text.substr(0, 300);
  // One header line of 300 MB.
  RawReply header = RawUpload(cluster_->port(), "GET /v1/nodes HTTP/1.1\r\nHost: x\r\nX-Big: ", int64_t(300) << 20,
                              /*chunked=*/false);
  EXPECT_EQ(header.status, 431) << header.text.substr(0, 300);
  EXPECT_EQ(ReplyErrorMessage(header.text), "request headers are too large (at most 64 KiB)");
  EXPECT_LT(head_memory.PeakGrowth(), int64_t(64) << 20);
}

TEST_F(BoundedInput, NumbersOutOfRangeAre400NamingTheField) {
  struct Case {
    std::string path, body, field;
  };
  const std::vector<Case> cases = {
      {"/v1/jobs", R"({"command": ["sleep", "1"], "nodes": 1e400})", "nodes"},
      {"/v1/jobs", R"({"command": ["sleep", "1"], "priority": -1e400})", "priority"},
      {"/v1/jobs", R"({"command": ["sleep", "1"], "nodes": 123456789012345678901234567890})", "nodes"},
      {"/v1/nodes/node-a/drain", R"({"reason": "x", "timeout_s": 1e400})", "timeout_s"},
      {"/v1/agents/register", R"({"name": "n9", "address": "127.0.0.1", "incarnation": "i9", "cpus": 1e400})", "cpus"},
  };
  for (const Case& c : cases) {
    auto [status, reply] = Post(c.path, c.body);
    EXPECT_EQ(status, 400) << c.path << " " << c.body << " → " << reply.dump();
    EXPECT_EQ(Field(reply), c.field) << c.body << " → " << reply.dump();
  }
  // A heartbeat, with the credential of a node registered for it (head/auth.h).
  auto [sr, reg] = Post("/v1/agents/register", R"({"name": "n8", "address": "127.0.0.8", "incarnation": "i8", "cpus": 1})");
  ASSERT_EQ(sr, 200) << reg.dump();
  auto [hs, hb] = PostRaw(*cluster_, "/v1/agents/n8/heartbeat",
                          R"({"incarnation": "i8", "tasks": [{"job": 1, "rss_bytes": 1e400}]})",
                          reg.value("node_credential", ""));
  EXPECT_EQ(hs, 400) << hb.dump();
  EXPECT_EQ(Field(hb), "tasks[0].rss_bytes") << hb.dump();
  // n8 never heartbeats: drained at once, so that no later test of this suite (one cluster
  // for all, when they run in one process) has a job placed on it that fails when the head
  // finds it down.
  auto [ds, dr] = Post("/v1/nodes/n8/drain", R"({"reason": "a node this test registered by hand"})");
  EXPECT_EQ(ds, 200) << dr.dump();
  auto [status, reply] = Post("/v1/jobs", "{\"command\": [\"true\"], \"nodes\": " + std::string(200'000, '[') +
                                              std::string(200'000, ']') + "}");
  EXPECT_EQ(status, 400) << "a deeply nested body must not reach a recursive walk";
  EXPECT_THAT(Message(reply), HasSubstr("nested more than 64 levels deep"));
}

TEST_F(BoundedInput, SpecFilesThatExpandWithoutBoundFailInTheCli) {
  std::string bomb = "command: [sleep, '1']\nx0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    std::string prev = fmt::format("*x{}", i - 1);
    bomb += fmt::format("x{0}: &x{0} [{1}, {1}, {1}, {1}, {1}, {1}, {1}, {1}, {1}, {1}]\n", i, prev);
  }
  struct Case {
    std::string file, text, error;
  };
  const std::vector<Case> cases = {
      {"bomb.yaml", bomb, "YAML alias expansion exceeds 100000 nodes (at alias *x"},
      {"cycle.yaml", "command: [sleep, '1']\nloop: &a [*a]\n", ":2:11: recursive alias *a"},
      {"number.json", R"({"command": ["sleep", "1"], "nodes": 1e400})", "nodes: number out of range: 1e400"},
  };
  for (const Case& c : cases) {
    CliResult r = SubmitFile(Write(c.file, c.text));
    EXPECT_EQ(r.status.Code(), 2) << c.file << ": " << r.status.ToString() << "\n" << r.errors;
    EXPECT_THAT(r.errors, HasSubstr(c.file)) << c.file;
    EXPECT_THAT(r.errors, HasSubstr(c.error)) << c.file;
  }
}

TEST_F(BoundedInput, EnvironmentsExecCannotTakeAreRefusedAtSubmit) {
  json env = json::object();
  for (int i = 0; i < 1024; ++i) env[fmt::format("VAR_{}", i)] = std::string(3 << 10, 'v');
  json spec = {{"command", {"sleep", "1"}}, {"env", env}};
  auto [status, reply] = Post("/v1/jobs", spec.dump());
  EXPECT_EQ(status, 400) << Message(reply);
  EXPECT_EQ(Field(reply), "env");
  EXPECT_THAT(Message(reply), HasSubstr("env: 3.0 MiB of environment and arguments; a task can be started with "
                                        "at most 1.9 MiB (Linux ARG_MAX"));
  for (const std::string& workdir : std::vector<std::string>{"/data/../etc", "/data/" + std::string(300, 'w')}) {
    auto [s, r] = Post("/v1/jobs", json{{"command", {"true"}}, {"workdir", workdir}}.dump());
    EXPECT_EQ(s, 400) << workdir;
    EXPECT_EQ(Field(r), "workdir") << Message(r);
  }
}

TEST_F(BoundedInput, AnEnvironmentJustUnderTheLimitStarts) {
  // 1.9 MiB less a few KiB: what the head lets through must start on a node, with the
  // contract's variables, the shim's arguments and the agent's environment on top.
  json env = json::object();
  size_t bytes = 0;
  for (int i = 0; bytes + (32 << 10) < (2 << 20) - (64 << 10) - (8 << 10); ++i) {
    env[fmt::format("VAR_{}", i)] = std::string(30 << 10, 'v');
    bytes += (30 << 10) + 16;
  }
  json job = cluster_->Submit({{"command", {"sh", "-c", "test ${#VAR_0} -eq 30720"}}, {"env", env}});
  ASSERT_TRUE(job.contains("id")) << job.dump().substr(0, 300);
  ++jobs_;
  json done = cluster_->WaitForState(job["id"].get<int64_t>(), "SUCCEEDED");
  EXPECT_EQ(done.value("state", ""), "SUCCEEDED") << cluster_->Logs(job["id"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace cohort::testing
