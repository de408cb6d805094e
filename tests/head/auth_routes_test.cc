// Every route the head registered (read from its Router, so a new route cannot be left
// out) against no token, each role's token and a node's credential: 401 without valid
// credentials, 403 when they are not enough, and past the check otherwise. Then what the
// handlers add: owners and admins, the submitting user, revocation, same-origin and JSON
// bodies for state changes, and --insecure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <regex>
#include <string>
#include <thread>

#include "api/routes.h"
#include "common/client_config.h"
#include "head/router.h"
#include "head_server_fixture.h"

namespace cohort::head {
namespace {

// A concrete path for a registered pattern: "n1" for a name or id segment, "k" for a key.
std::string SamplePath(std::string pattern) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"([^/]+)", "n1"}, {"([0-9a-f]+)", "0af3"}, {R"(([\s\S]+))", "k"}, {"[A-Za-z0-9._-]+", "index.html"}}) {
    for (size_t at; (at = pattern.find(from)) != std::string::npos;) pattern.replace(at, from.size(), to);
  }
  return pattern;
}

class AuthRoutesTest : public HeadServerTest {
 protected:
  // The status of `method path` with `token` ("": none) and a JSON body for changes.
  int Status(const std::string& method, const std::string& path, const std::string& token,
             const std::string& body = "{}", httplib::Headers extra = {}) {
    httplib::Result r = Send(method, path, token, body, std::move(extra));
    EXPECT_TRUE(r) << method << " " << path;
    return r ? r->status : 0;
  }
};

TEST_F(AuthRoutesTest, EveryRouteAsksForItsAccessAndNoMore) {
  const auto& routes = head_->router().routes();
  ASSERT_GE(routes.size(), 20u) << "the Router lists every route the head serves";
  const std::map<std::string, std::string> tokens = {
      {"anonymous", ""},
      {"viewer", MakeToken("vera", "viewer")},
      {"user", MakeToken("ulla", "user")},
      {"admin", admin_token_},
      {"agent", MakeToken("agents2", "agent")},
  };
  // A node registered by the admin: its credential comes with the reply.
  auto reg = http_->Post("/v1/agents/register",
                         json{{"name", "n1"}, {"address", "127.0.0.1"}, {"incarnation", "i1"}, {"cpus", 1}}.dump(),
                         "application/json");
  ASSERT_TRUE(reg && reg->status == 200) << (reg ? reg->body : "no reply");
  const std::string node = json::parse(reg->body).value("node_credential", "");
  ASSERT_FALSE(node.empty());
  // A running job and its own token (COHORT_JOB_TOKEN).
  AddNode("gpu-1", 1);
  auto submitted = Send("POST", "/v1/jobs", admin_token_, json{{"command", {"sleep", "100"}}, {"gpus_per_node", 1}}.dump());
  ASSERT_TRUE(submitted && submitted->status == 201) << (submitted ? submitted->body : "no reply");
  const int64_t job_id = json::parse(submitted->body).value("id", int64_t{0});
  auto job = cluster().GetJob(job_id);
  for (int i = 0; i < 200 && job.has_value() && job->state != api::JobState::kRunning; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the next scheduling pass places it
    job = cluster().GetJob(job_id);
  }
  ASSERT_TRUE(job.has_value() && job->state == api::JobState::kRunning) << "placed on the free node";
  const std::string job_token = cluster().rendezvous().JobToken(job_id, job->attempt);

  // Who may call what (auth.h): the same table Authorize has, checked over HTTP.
  const std::map<Access, std::set<std::string>> allowed = {
      {Access::kPublic, {"anonymous", "viewer", "user", "admin", "agent", "node"}},
      {Access::kTask, {"anonymous", "viewer", "user", "admin", "agent", "node"}},
      {Access::kViewer, {"viewer", "user", "admin"}},
      {Access::kUser, {"user", "admin"}},
      {Access::kAdmin, {"admin"}},
      {Access::kAgentJoin, {"agent", "admin"}},
      {Access::kNode, {"node"}},
  };
  for (const auto& route : routes) {
    const std::string path = SamplePath(route.pattern);
    std::map<std::string, std::string> callers = tokens;
    callers["node"] = node;
    callers["job"] = job_token;
    for (const auto& [who, token] : callers) {
      const int status = Status(route.method, path, token);
      // A job's token passes only the public and task routes here: the sample path's job
      // ("n1") is not its own.
      const bool may = who == "job" ? route.access == Access::kPublic || route.access == Access::kTask
                                    : allowed.at(route.access).contains(who);
      SCOPED_TRACE(route.method + " " + route.pattern + " (" + std::string(AccessName(route.access)) + ") as " + who);
      if (may) {
        EXPECT_NE(status, 401);
        EXPECT_NE(status, 403);
      } else {
        EXPECT_EQ(status, who == "anonymous" ? 401 : 403);
      }
    }
    // Its own job, on the routes that let a job's token read it: past the check (or, for
    // a route it may not call, still refused); another job's id: refused.
    if (route.pattern.find("/v1/jobs/([^/]+)") != 0) continue;
    const std::string own_path =
        SamplePath("/v1/jobs/" + std::to_string(job_id) + route.pattern.substr(std::string("/v1/jobs/([^/]+)").size()));
    SCOPED_TRACE(route.method + " " + own_path + " as the job's own token");
    // The one change a job's token may make, requeueing its own job, ends its attempt (and
    // the token with it): checked last, below.
    if (route.pattern == api::routes::kJobRequeuePattern) {
      EXPECT_EQ(route.job_scope, JobScope::kOwnJob);
      continue;
    }
    const int own_status = Status(route.method, own_path, job_token);
    if (route.job_scope == JobScope::kOwnJob) {
      EXPECT_NE(own_status, 401);
      EXPECT_NE(own_status, 403);
      // Beyond reads: the steps a batch script's `cohort run` starts in its own job, and
      // the input (the close) of their sessions.
      EXPECT_TRUE(route.method == "GET" || route.pattern == api::routes::kJobStepsPattern ||
                  route.pattern == api::routes::kJobExecInputPattern)
          << "a job's token reads its own job, requeues it and runs steps in it";
    } else {
      EXPECT_EQ(own_status, 403);
    }
  }
  EXPECT_EQ(cluster().GetJob(job_id)->state, api::JobState::kRunning) << "nothing the job's token did changed it";
  const std::string own = "/v1/jobs/" + std::to_string(job_id);
  EXPECT_EQ(Status("POST", own + "/requeue", job_token), 200) << "a job may requeue itself";
  EXPECT_EQ(cluster().GetJob(job_id)->state, api::JobState::kPending);
  EXPECT_EQ(Status("GET", own, job_token), 401) << "the attempt, and its token, ended";
}

TEST_F(AuthRoutesTest, UsersActOnTheirOwnJobsAndAdminsOnAll) {
  AddNode("gpu-1", 2);
  const std::string alice = MakeToken("alice", "user");
  const std::string bob = MakeToken("bob", "user");
  httplib::Client c("127.0.0.1", head_->port());
  auto submit = [&](const std::string& token, json spec) {
    return c.Post("/v1/jobs", {{"Authorization", "Bearer " + token}}, spec.dump(), "application/json");
  };
  const json spec = {{"command", {"sleep", "100"}}, {"gpus_per_node", 1}};
  auto mine = submit(alice, spec);
  ASSERT_TRUE(mine && mine->status == 201) << (mine ? mine->body : "");
  const json job = json::parse(mine->body);
  EXPECT_EQ(job["spec"].value("user", ""), "alice") << "the job belongs to the token's user";
  const std::string id = std::to_string(job.value("id", 0));

  json as_bob = spec;
  as_bob["user"] = "bob";
  auto forged = submit(alice, as_bob);
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 403) << forged->body;
  auto for_bob = submit(admin_token_, as_bob);
  ASSERT_TRUE(for_bob && for_bob->status == 201) << (for_bob ? for_bob->body : "");
  EXPECT_EQ(json::parse(for_bob->body)["spec"].value("user", ""), "bob") << "an admin may submit for another user";

  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/cancel", bob), 403);
  EXPECT_EQ(Status("GET", "/v1/jobs/" + id + "/logs", bob), 403);
  EXPECT_NE(cluster().GetJob(job.value("id", int64_t{0}))->state, api::JobState::kCancelled);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/cancel", alice), 200);
  auto other = submit(alice, spec);
  ASSERT_TRUE(other && other->status == 201);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + std::to_string(json::parse(other->body).value("id", 0)) + "/cancel",
                   admin_token_),
            200);
}

// The gateway sends a model's requests to every running job naming it as service_model:
// a "kind: service" job submitted through /v1/jobs joined another user's service (and
// read its clients' prompts). Replicas are made by /v1/services only.
TEST_F(AuthRoutesTest, AJobCannotJoinAnotherUsersService) {
  AddNode("gpu-1", 2);
  const std::string alice = MakeToken("alice", "user");
  const std::string bob = MakeToken("bob", "user");
  auto deployed = Send("POST", "/v1/services", bob,
                       json{{"kind", "service"}, {"name", "chat"}, {"model", "/models/tiny"},
                            {"command", {"/bin/cohort", "serve"}}}.dump());
  ASSERT_TRUE(deployed && deployed->status == 201) << (deployed ? deployed->body : "no reply");
  for (const std::string& token : {alice, bob, admin_token_}) {
    auto joined = Send("POST", "/v1/jobs", token,
                       json{{"kind", "service"}, {"service", "chat"}, {"service_model", "chat"},
                            {"command", {"sleep", "100"}}}.dump());
    ASSERT_TRUE(joined);
    EXPECT_EQ(joined->status, 400) << joined->body;
    EXPECT_THAT(joined->body, ::testing::HasSubstr("\"field\":\"kind\""));
    EXPECT_THAT(joined->body, ::testing::HasSubstr("cohort serve deploy"));
  }
  const json chat = GetJson("/v1/services/chat");
  EXPECT_EQ(chat.value("replicas", 0), 1) << chat.dump();
  EXPECT_EQ(chat.value("user", ""), "bob");
}

// A user may lower their jobs' priority but not raise one above 0: a job's own priority goes
// before fair share, so any user's -p 1000 jumped every other team's queue (and could
// preempt teammates). Slurm lets only operators raise a priority. Admins may.
TEST_F(AuthRoutesTest, OnlyAnAdminRaisesAPriorityAboveZero) {
  AddNode("gpu-1", 1);
  const std::string alice = MakeToken("alice", "user");
  httplib::Client c("127.0.0.1", head_->port());
  auto submit = [&](const std::string& token, int priority) {
    auto r = c.Post("/v1/jobs", {{"Authorization", "Bearer " + token}},
                    json{{"command", {"sleep", "100"}}, {"gpus_per_node", 1}, {"priority", priority}}.dump(),
                    "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  };
  auto [raised, body] = submit(alice, 10);
  EXPECT_EQ(raised, 403) << body;
  EXPECT_THAT(body, ::testing::HasSubstr("may not raise a job's priority above 0 (got 10)"));
  EXPECT_THAT(body, ::testing::HasSubstr("\"field\":\"priority\""));
  EXPECT_EQ(submit(alice, 0).first, 201);  // takes the GPU
  auto [lowered, job] = submit(alice, -10);
  ASSERT_EQ(lowered, 201) << job;
  const std::string id = std::to_string(json::parse(job).value("id", 0));
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/update", alice, R"({"priority": -3})"), 200);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/update", alice, R"({"priority": 1})"), 403);
  EXPECT_EQ(cluster().GetJob(std::stoll(id))->spec.priority, -3);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/update", admin_token_, R"({"priority": 50})"), 200);
  EXPECT_EQ(cluster().GetJob(std::stoll(id))->spec.priority, 50);
  EXPECT_EQ(submit(admin_token_, 1000).first, 201);
}

// A running job's time limit: its user may shorten it, only an admin lengthen it or lift it.
TEST_F(AuthRoutesTest, ARunningJobsTimeLimitIsShortenedByItsUserAndLengthenedByAnAdmin) {
  AddNode("gpu-1", 1);
  const std::string alice = MakeToken("alice", "user");
  httplib::Client c("127.0.0.1", head_->port());
  auto r = c.Post("/v1/jobs", {{"Authorization", "Bearer " + alice}},
                  json{{"command", {"sleep", "100"}}, {"gpus_per_node", 1}, {"time_limit_s", 600}}.dump(),
                  "application/json");
  ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "");
  const api::JobId job = json::parse(r->body).value("id", int64_t{0});
  const std::string path = "/v1/jobs/" + std::to_string(job) + "/update";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (cluster().GetJob(job)->state != api::JobState::kRunning && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(cluster().GetJob(job)->state, api::JobState::kRunning);
  EXPECT_EQ(Status("POST", path, alice, R"({"time_limit_s": 300})"), 200);
  EXPECT_EQ(Status("POST", path, alice, R"({"time_limit_s": 900})"), 403);
  EXPECT_EQ(Status("POST", path, alice, R"({"time_limit_s": 0})"), 403);
  EXPECT_EQ(Status("POST", path, alice, R"({"priority": -1})"), 409) << "priority only while pending";
  EXPECT_EQ(cluster().GetJob(job)->spec.time_limit_s, 300);
  EXPECT_EQ(Status("POST", path, admin_token_, R"({"time_limit_s": 7200})"), 200);
  EXPECT_EQ(cluster().GetJob(job)->spec.time_limit_s, 7200);
  EXPECT_EQ(cluster().GetJob(job)->state, api::JobState::kRunning);
}

TEST_F(AuthRoutesTest, JobControlIsTheOwnersAndAnAdminsHoldOnlyAnAdminReleases) {
  AddNode("gpu-1", 1);
  const std::string alice = MakeToken("alice", "user");
  const std::string bob = MakeToken("bob", "user");
  httplib::Client c("127.0.0.1", head_->port());
  auto submit = [&](const std::string& token) {
    auto r = c.Post("/v1/jobs", {{"Authorization", "Bearer " + token}},
                    json{{"command", {"sleep", "100"}}, {"gpus_per_node", 1}}.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 201) << (r ? r->body : "");
    return r ? std::to_string(json::parse(r->body).value("id", 0)) : std::string("0");
  };
  submit(alice);  // takes the GPU
  const std::string id = submit(alice);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/hold", bob), 403);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/update", bob, R"({"priority": 5})"), 403);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/hold", alice), 200);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/update", alice, R"({"priority": -5})"), 200);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/update", alice, R"({"priority": 5000})"), 400);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/update", alice, R"({"nodes": 2})"), 400) << "only what update may change";
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/release", alice), 200);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/hold", admin_token_), 200);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/release", alice), 403) << "an admin's hold is not the user's to lift";
  EXPECT_TRUE(cluster().GetJob(std::stoll(id))->held);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + id + "/release", admin_token_), 200);
  EXPECT_EQ(Status("GET", "/v1/jobs?state=all&since=yesterday", alice), 400);
}

TEST_F(AuthRoutesTest, AJobSubmittedHeldWaitsForItsSubmittersRelease) {
  AddNode("gpu-1", 1);
  const std::string alice = MakeToken("alice", "user");
  const std::string bob = MakeToken("bob", "user");
  const std::string spec = json{{"command", {"true"}}, {"gpus_per_node", 1}}.dump();
  const int64_t jobs_before = static_cast<int64_t>(cluster().ListJobs({}).size());
  EXPECT_EQ(Status("POST", "/v1/jobs?hold=yes", alice, spec), 400) << "hold is true or false";
  EXPECT_EQ(static_cast<int64_t>(cluster().ListJobs({}).size()), jobs_before) << "a refused submission stores nothing";
  auto r = Send("POST", "/v1/jobs?hold=true", alice, spec);
  ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "");
  const api::JobId id = json::parse(r->body).value("id", int64_t{0});
  EXPECT_TRUE(json::parse(r->body).value("held", false)) << r->body;
  // Passes go by (the node is free) and the job waits.
  for (int i = 0; i < 3; ++i) cluster().Schedule();
  auto job = cluster().GetJob(id);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->state, api::JobState::kPending);
  EXPECT_EQ(job->held_by, "alice");
  EXPECT_EQ(job->reason, "held by alice (cohort release " + std::to_string(id) + ")");
  EXPECT_EQ(Status("POST", "/v1/jobs/" + std::to_string(id) + "/release", bob), 403);
  EXPECT_EQ(Status("POST", "/v1/jobs/" + std::to_string(id) + "/release", alice), 200);
  cluster().Schedule();
  EXPECT_EQ(cluster().GetJob(id)->state, api::JobState::kRunning);
  auto plain = Send("POST", "/v1/jobs?hold=false", alice, spec);
  ASSERT_TRUE(plain && plain->status == 201) << (plain ? plain->body : "");
  EXPECT_FALSE(json::parse(plain->body).value("held", false));
}

TEST_F(AuthRoutesTest, OthersSeeAJobsEnvironmentNamesButNotItsValues) {
  AddNode("gpu-1", 1);
  const std::string alice = MakeToken("alice", "user");
  const std::string viewer = MakeToken("vic", "viewer");
  httplib::Client c("127.0.0.1", head_->port());
  auto r = c.Post("/v1/jobs", {{"Authorization", "Bearer " + alice}},
                  json{{"command", {"true"}}, {"env", {{"API_KEY", "s3cr3t-value"}}}}.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "");
  const std::string id = std::to_string(json::parse(r->body).value("id", 0));
  auto get = [&](const std::string& token, const std::string& path) {
    auto res = c.Get(path, {{"Authorization", "Bearer " + token}});
    EXPECT_TRUE(res && res->status == 200) << path;
    return res ? res->body : std::string();
  };
  for (const std::string& path : std::vector<std::string>{"/v1/jobs?state=all", "/v1/jobs/" + id,
                                                           "/v1/jobs?state=all&fields=id,spec"}) {
    const std::string seen = get(viewer, path);
    EXPECT_EQ(seen.find("s3cr3t-value"), std::string::npos) << path << ": " << seen;
    EXPECT_NE(seen.find("API_KEY"), std::string::npos) << path;
    EXPECT_NE(get(alice, path).find("s3cr3t-value"), std::string::npos) << "the owner sees it: " << path;
    EXPECT_NE(get(admin_token_, path).find("s3cr3t-value"), std::string::npos) << "an admin sees it: " << path;
  }
}

TEST_F(AuthRoutesTest, ARevokedTokenStopsWorkingOnTheNextRequest) {
  auto res = http_->Post("/v1/tokens", json{{"user", "carol"}, {"role", "user"}}.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 201);
  const json made = json::parse(res->body);
  const std::string token = made.value("token", "");
  EXPECT_EQ(Status("GET", "/v1/jobs", token), 200);
  auto listed = http_->Get("/v1/tokens");
  ASSERT_TRUE(listed && listed->status == 200);
  EXPECT_EQ(listed->body.find(token.substr(20)), std::string::npos) << "a listing never shows a secret";
  EXPECT_EQ(Status("POST", "/v1/tokens/" + made.value("id", "") + "/revoke", admin_token_), 200);
  EXPECT_EQ(Status("GET", "/v1/jobs", token), 401);
  // A user may not make or revoke tokens.
  const std::string dave = MakeToken("dave", "user");
  EXPECT_EQ(Status("POST", "/v1/tokens", dave, json{{"user", "dave"}, {"role", "admin"}}.dump()), 403);
}

TEST_F(AuthRoutesTest, NewAdminAndJoinTokensRecoverLostOnesAndTheOldStayUntilRevoked) {
  auto read = [&](const std::string& name) {
    std::string token;
    std::ifstream(config_.state_dir + "/" + name) >> token;
    return token;
  };
  const std::string old_admin = admin_token_;
  const std::string old_join = read("join.token");
  const size_t before = head_->router().tokens()->List().size();

  config_.new_admin_token = true;
  Restart();  // the fixture reads admin.token again
  EXPECT_NE(admin_token_, old_admin);
  EXPECT_EQ(read("join.token"), old_join) << "only the admin token was asked for";
  EXPECT_EQ(head_->router().tokens()->List().size(), before + 1);
  EXPECT_EQ(Status("GET", "/v1/tokens", admin_token_), 200);
  EXPECT_EQ(Status("GET", "/v1/tokens", old_admin), 200) << "the old one works until it is revoked";
  const std::string old_id = old_admin.substr(std::string("cohort_").size(), 12);
  EXPECT_EQ(Status("POST", "/v1/tokens/" + old_id + "/revoke", admin_token_), 200);
  EXPECT_EQ(Status("GET", "/v1/tokens", old_admin), 401);

  const std::string new_admin = admin_token_;
  config_.new_admin_token = false;
  config_.new_join_token = true;
  Restart();
  EXPECT_EQ(admin_token_, new_admin);
  EXPECT_NE(read("join.token"), old_join);
  config_.new_join_token = false;
  Restart();
  EXPECT_EQ(head_->router().tokens()->List().size(), before + 2) << "a start without the flags makes none";

  // --insecure has no tokens to make.
  HeadConfig insecure = config_;
  insecure.state_dir = dir_ + "/insecure";
  insecure.insecure = true;
  insecure.new_admin_token = true;
  auto refused = HeadServer::Start(insecure);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("--new-admin-token"), std::string::npos) << refused.error().message;
}

TEST_F(AuthRoutesTest, StateChangesMustBeJsonAndSameOrigin) {
  AddNode("gpu-1", 1);
  const std::string body = json{{"command", {"true"}}}.dump();
  const std::string port = std::to_string(head_->port());
  // A page of another site posting with the user's credentials.
  EXPECT_EQ(Status("POST", "/v1/jobs", admin_token_, body, {{"Origin", "http://evil.example"}}), 403);
  EXPECT_EQ(Status("POST", "/v1/jobs", admin_token_, body, {{"Origin", "http://127.0.0.1:" + port}}), 201);
  // A form's text/plain body.
  httplib::Client c("127.0.0.1", head_->port());
  auto r = c.Post("/v1/jobs", {{"Authorization", "Bearer " + admin_token_}}, body, "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("application/json"), std::string::npos) << r->body;
  EXPECT_EQ(cluster().ListJobs({}).size(), 1u) << "only the same-origin JSON submission was taken";
}

TEST(AuthInsecureTest, InsecureAsksNoOneAndWritesNoTokens) {
  char tmpl[] = "/tmp/cohort-head-insecure-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  HeadConfig config;
  config.port = 0;
  config.state_dir = dir + "/head";
  config.insecure = true;
  config.client_config_path = "";
  auto h = HeadServer::Start(config);
  ASSERT_TRUE(h.has_value()) << h.error().message;
  httplib::Client c("127.0.0.1", (*h)->port());
  auto r = c.Post("/v1/nodes/none/drain", "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << "past the access check: " << r->body;
  EXPECT_FALSE(std::filesystem::exists(config.state_dir + "/admin.token"));
  h->reset();
  std::filesystem::remove_all(dir);
}

// The client config a head's first start writes (MakeLocalAdminToken): `prior` is what the
// file held before (nullopt: no file); returns what it holds once the head has started.
class HeadClientConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-head-client-config-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ClientConfig StartWith(const std::optional<ClientConfig>& prior) {
    const std::string path = dir_ + "/config/cohort/config";
    if (prior) {
      EXPECT_TRUE(WriteClientConfig(path, *prior).has_value());
    }
    HeadConfig config;
    config.port = 0;
    config.state_dir = dir_ + "/head";
    config.http_threads = 2;
    config.client_config_path = path;
    auto h = HeadServer::Start(config);
    EXPECT_TRUE(h.has_value()) << h.error().message;
    if (!h) return {};
    url_ = (*h)->url();
    h->reset();
    auto after = ReadClientConfig(path);
    EXPECT_TRUE(after.has_value() && after->has_value());
    return after && *after ? **after : ClientConfig{};
  }
  std::string AdminToken() const {
    std::ifstream in(dir_ + "/head/admin.token");
    std::string token;
    std::getline(in, token);
    return token;
  }

  std::string dir_;
  std::string url_;
};

TEST_F(HeadClientConfigTest, FirstStartWritesTheHeadTheAdminTokenAndTheAuthority) {
  ClientConfig c = StartWith(std::nullopt);
  EXPECT_EQ(c.head, url_);
  EXPECT_EQ(c.token, AdminToken());
  EXPECT_EQ(c.ca, dir_ + "/head/tls/ca.crt");
}

// What a local cluster that is gone left behind (an old quickstart's, or `cohort up
// --state-dir DIR` after DIR was removed) is replaced: it could reach nothing, and the
// user's next `cohort up` would otherwise need three variables in every shell.
TEST_F(HeadClientConfigTest, ALeftoverOfALocalHeadWhoseAuthorityIsGoneIsReplaced) {
  ClientConfig c = StartWith(ClientConfig{"https://127.0.0.1:34511", "cohort_old_token",
                                          dir_ + "/gone/head/tls/ca.crt"});
  EXPECT_EQ(c.head, url_);
  EXPECT_EQ(c.token, AdminToken());
}

TEST_F(HeadClientConfigTest, AnotherHeadsConfigStays) {
  // A login to another machine's head, even with its authority file gone: its token may be
  // the user's only copy.
  ClientConfig remote{"https://10.0.0.1:8470", "cohort_remote_token", dir_ + "/gone/ca.crt"};
  ClientConfig c = StartWith(remote);
  EXPECT_EQ(c.head, remote.head);
  EXPECT_EQ(c.token, remote.token);
}

TEST_F(HeadClientConfigTest, ALocalHeadWhoseAuthorityIsThereStays) {
  // Another local cluster, perhaps still up: its authority exists.
  std::filesystem::create_directories(dir_ + "/other");
  std::ofstream(dir_ + "/other/ca.crt") << "-----BEGIN CERTIFICATE-----\n";
  ClientConfig local{"https://127.0.0.1:34511", "cohort_local_token", dir_ + "/other/ca.crt"};
  ClientConfig c = StartWith(local);
  EXPECT_EQ(c.head, local.head);
  EXPECT_EQ(c.token, local.token);
}

}  // namespace
}  // namespace cohort::head
