// End-to-end job behaviour with a real head and agents on loopback.
#include <set>

#include "harness.h"

namespace cohort::testing {
namespace {

const char* kPrintEnv =
    "for v in RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK MASTER_ADDR MASTER_PORT "
    "CUDA_VISIBLE_DEVICES COHORT_JOB_ID COHORT_ATTEMPT TORCHELASTIC_RESTART_COUNT COHORT_NODE "
    "COHORT_RENDEZVOUS COHORT_CHECKPOINT_DIR COHORT_REPORT MY_VAR; do eval echo $v=\\$$v; done; "
    "test -d \"$COHORT_CHECKPOINT_DIR\" && echo CKPT_EXISTS=1";

TEST(Jobs, MultiNodeGangGetsDistinctRanksAndDisjointGpus) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 4);
  c.StartAgent("node-b", 4);
  c.WaitForNodes(2);
  json job = c.Submit({{"command", {"sh", "-c", kPrintEnv}}, {"nodes", 2}, {"tasks_per_node", 4},
                       {"gpus_per_node", 4}, {"env", {{"MY_VAR", "hello"}}}});
  int64_t id = job["id"];
  json done = c.WaitForState(id, "SUCCEEDED");
  EXPECT_EQ(done["exit_code"], 0);
  EXPECT_EQ(done["exits"].size(), 8u);

  std::set<int> ranks;
  std::map<std::string, std::set<std::string>> gpus_by_node;
  std::set<std::string> masters;
  for (int r = 0; r < 8; ++r) {
    auto env = ParseEnvLines(c.Logs(id, r));
    ASSERT_EQ(env["RANK"], std::to_string(r)) << c.Logs(id, r);
    ranks.insert(std::stoi(env["RANK"]));
    EXPECT_EQ(env["WORLD_SIZE"], "8");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r % 4));
    EXPECT_EQ(env["NODE_RANK"], std::to_string(r / 4));
    EXPECT_EQ(env["GROUP_RANK"], env["NODE_RANK"]);
    EXPECT_EQ(env["COHORT_JOB_ID"], std::to_string(id));
    EXPECT_EQ(env["COHORT_ATTEMPT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["MY_VAR"], "hello");
    EXPECT_EQ(env["CKPT_EXISTS"], "1");
    EXPECT_EQ(env["COHORT_RENDEZVOUS"].rfind(c.url() + "/v1/rendezvous/" + std::to_string(id) + "-0-", 0), 0u)
        << env["COHORT_RENDEZVOUS"];
    // Exactly one GPU per task, never shared on a node.
    const std::string& g = env["CUDA_VISIBLE_DEVICES"];
    EXPECT_EQ(g.find(','), std::string::npos) << g;
    EXPECT_TRUE(gpus_by_node[env["COHORT_NODE"]].insert(g).second) << "GPU " << g << " given twice on " << env["COHORT_NODE"];
    masters.insert(env["MASTER_ADDR"] + ":" + env["MASTER_PORT"]);
  }
  EXPECT_EQ(ranks.size(), 8u);
  EXPECT_EQ(gpus_by_node.size(), 2u);
  for (auto& [node, gpus] : gpus_by_node) EXPECT_EQ(gpus.size(), 4u) << node;
  EXPECT_EQ(masters.size(), 1u) << "every rank must see the same MASTER_ADDR:MASTER_PORT";
}

TEST(Jobs, FailingRankFailsTheGangWithItsExitCode) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.StartAgent("node-b", 2);
  c.WaitForNodes(2);
  // Rank 1 fails fast; rank 0 would sleep for minutes: the gang must be stopped.
  json job = c.Submit({{"command", {"sh", "-c", "if [ $RANK = 1 ]; then exit 7; fi; exec sleep 300"}},
                       {"nodes", 2}, {"gpus_per_node", 1}});
  json done = c.WaitForState(job["id"], "FAILED");
  EXPECT_EQ(done["exit_code"], 7);
  EXPECT_NE(done["reason"].get<std::string>().find("rank 1"), std::string::npos) << done["reason"];
  // Both nodes' GPUs come back.
  ASSERT_TRUE(WaitUntil([&] {
    return c.Node("node-a")["gpus_allocated"] == 0 && c.Node("node-b")["gpus_allocated"] == 0;
  }, std::chrono::seconds(5)));
}

TEST(Jobs, CancelKillsEveryProcessOfTheGangIncludingGrandchildren) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.StartAgent("node-b", 2);
  c.WaitForNodes(2);
  std::string pidfile = c.dir() + "/pids";
  std::string script = "sleep 300 & echo $! >> " + pidfile + "; (sleep 300 & echo $! >> " + pidfile +
                       "; wait) & echo $$ >> " + pidfile + "; wait";
  json job = c.Submit({{"command", {"sh", "-c", script}}, {"nodes", 2}, {"tasks_per_node", 1}, {"gpus_per_node", 2}});
  int64_t id = job["id"];
  c.WaitForState(id, "RUNNING");
  std::vector<int> pids;
  ASSERT_TRUE(WaitUntil([&] {
    pids.clear();
    std::ifstream in(pidfile);
    int p;
    while (in >> p) pids.push_back(p);
    return pids.size() == 6;  // per rank: the shell, a sleep, a grandchild sleep
  }, std::chrono::seconds(10))) << "got " << pids.size() << " pids";
  for (int p : pids) ASSERT_TRUE(ProcessAlive(p)) << p;

  auto r = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ((*r)["state"], "CANCELLED");
  for (int p : pids) {
    EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(p); }, std::chrono::seconds(5))) << "pid " << p << " survived";
  }
  // Cancelling again is a clear conflict.
  auto again = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kFailedPrecondition);
}

TEST(Jobs, DrainedNodeFinishesItsJobButTakesNoNewOnes) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.StartAgent("node-b", 1);
  c.WaitForNodes(2);
  std::string gate = c.dir() + "/gate";
  json running = c.Submit({{"command", {"sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.05; done"}},
                           {"gpus_per_node", 1}});
  json r1 = c.WaitForState(running["id"], "RUNNING");
  std::string busy_node = r1["allocation"]["nodes"][0]["node"];
  std::string other = busy_node == "node-a" ? "node-b" : "node-a";
  ASSERT_TRUE(c.client().Post("/v1/nodes/" + busy_node + "/drain", {{"reason", "maintenance"}}).has_value());
  ASSERT_TRUE(c.client().Post("/v1/nodes/" + other + "/drain", json::object()).has_value());
  EXPECT_EQ(c.Node(busy_node)["display_state"], "DRAINING");
  EXPECT_EQ(c.Node(other)["display_state"], "DRAINED");

  json waiting = c.Submit({{"command", {"true"}}, {"gpus_per_node", 1}});
  ASSERT_TRUE(WaitUntil([&] {
    return c.Job(waiting["id"])["reason"].get<std::string>().find("draining") != std::string::npos;
  }, std::chrono::seconds(5))) << c.Job(waiting["id"]).dump();
  EXPECT_EQ(c.Job(waiting["id"])["state"], "PENDING");

  std::ofstream(gate) << "go";
  c.WaitForState(running["id"], "SUCCEEDED");
  EXPECT_EQ(c.Node(busy_node)["display_state"], "DRAINED");
  EXPECT_EQ(c.Job(waiting["id"])["state"], "PENDING");

  ASSERT_TRUE(c.client().Post("/v1/nodes/" + other + "/resume", json::object()).has_value());
  json done = c.WaitForState(waiting["id"], "SUCCEEDED");
  EXPECT_EQ(done["allocation"]["nodes"][0]["node"], other);
}

TEST(Jobs, TimeLimitEndsTheJob) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  json job = c.Submit({{"command", {"sleep", "300"}}, {"time_limit_s", 1}});
  json done = c.WaitForState(job["id"], "TIMEOUT", std::chrono::seconds(10));
  EXPECT_NE(done["reason"].get<std::string>().find("time limit"), std::string::npos) << done["reason"];
}

TEST(Jobs, ProgramThatCannotStartFailsWithTheReason) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  json job = c.Submit({{"command", {"/nonexistent/program"}}});
  json done = c.WaitForState(job["id"], "FAILED");
  EXPECT_EQ(done["exit_code"], 127);
  EXPECT_NE(c.Logs(job["id"], 0).find("/nonexistent/program"), std::string::npos) << c.Logs(job["id"], 0);
}

TEST(Jobs, HigherPriorityRunsFirst) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  std::string gate = c.dir() + "/gate";
  std::string order = c.dir() + "/order";
  json blocker = c.Submit({{"command", {"sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.05; done"}},
                           {"gpus_per_node", 1}});
  c.WaitForState(blocker["id"], "RUNNING");
  json low = c.Submit({{"command", {"sh", "-c", "echo low >> " + order}}, {"gpus_per_node", 1}, {"priority", 1}});
  json high = c.Submit({{"command", {"sh", "-c", "echo high >> " + order}}, {"gpus_per_node", 1}, {"priority", 5}});
  std::ofstream(gate) << "go";
  c.WaitForState(low["id"], "SUCCEEDED");
  c.WaitForState(high["id"], "SUCCEEDED");
  EXPECT_EQ(ReadFile(order), "high\nlow\n");
}

}  // namespace
}  // namespace cohort::testing
