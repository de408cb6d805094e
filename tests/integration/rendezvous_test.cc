// The head's per-job key-value store at COHORT_RENDEZVOUS.
#include <httplib.h>

#include "harness.h"

namespace cohort::testing {
namespace {

struct Raw {
  int status = 0;
  std::string body;
};

// Raw HTTP against a full URL (the rendezvous base comes from a task's environment).
Raw Call(const std::string& method, const std::string& url, const std::string& body = "") {
  auto slash = url.find('/', url.find("://") + 3);
  auto cli = RawClient(url.substr(0, slash));
  std::string path = url.substr(slash);
  httplib::Result r = method == "GET"    ? cli->Get(path)
                      : method == "PUT"  ? cli->Put(path, body, "application/octet-stream")
                                         : cli->Post(path, body, "application/json");
  if (!r) return {};
  return {r->status, r->body};
}

std::string RendezvousOf(LocalCluster& c, int64_t job, int rank) {
  std::string url;
  EXPECT_TRUE(WaitUntil([&] {
    url = ParseEnvLines(c.Logs(job, rank))["COHORT_RENDEZVOUS"];
    return !url.empty();
  }, std::chrono::seconds(10)));
  return url;
}

TEST(Rendezvous, RanksExchangeValuesThroughTheHead) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.StartAgent("node-b", 2);
  c.WaitForNodes(2);
  // Rank 0 publishes; rank 1 waits for it (the way an NCCL unique id is shared).
  std::string script = std::string(kTaskCaFile) +
      "if [ $RANK = 0 ]; then curl -sf --cacert \"$ca\" -X PUT --data-binary \"hello from $COHORT_NODE\" \"$COHORT_RENDEZVOUS/keys/greeting\"; "
      "else for i in $(seq 1 50); do v=$(curl -sf --cacert \"$ca\" \"$COHORT_RENDEZVOUS/keys/greeting?wait_ms=1000\") && break; done; "
      "echo \"got: $v\"; test -n \"$v\"; fi";
  json job = c.Submit({{"command", {"sh", "-c", script}}, {"nodes", 2}, {"gpus_per_node", 1}, {"placement", "spread"}});
  c.WaitForState(job["id"], "SUCCEEDED");
  std::string rank0_node = c.Job(job["id"])["allocation"]["nodes"][0]["node"];
  EXPECT_NE(c.Logs(job["id"], 1).find("got: hello from " + rank0_node), std::string::npos) << c.Logs(job["id"], 1);
}

TEST(Rendezvous, KeysAreIsolatedPerJobAndGoneWhenTheJobEnds) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 2);
  c.WaitForNodes(1);
  std::string gate = c.dir() + "/gate";
  json spec = {{"command", {"sh", "-c", "echo COHORT_RENDEZVOUS=$COHORT_RENDEZVOUS; while [ ! -e " + gate + " ]; do sleep 0.05; done"}},
               {"gpus_per_node", 1}};
  json a = c.Submit(spec), b = c.Submit(spec);
  c.WaitForState(a["id"], "RUNNING");
  c.WaitForState(b["id"], "RUNNING");
  std::string ua = RendezvousOf(c, a["id"], 0), ub = RendezvousOf(c, b["id"], 0);
  ASSERT_NE(ua, ub);
  EXPECT_EQ(ua.rfind(c.url() + "/v1/rendezvous/" + std::to_string(a["id"].get<int64_t>()) + "-0-", 0), 0u) << ua;

  EXPECT_EQ(Call("PUT", ua + "/keys/x", "a-value").status, 200);
  Raw got = Call("GET", ua + "/keys/x");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, "a-value");
  EXPECT_EQ(Call("GET", ub + "/keys/x").status, 404) << "job B read job A's key";

  // Forged tokens: a changed MAC, and job B's id with job A's MAC.
  std::string forged = ua;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(Call("GET", forged + "/keys/x").status, 404);
  std::string mac_a = ua.substr(ua.rfind('-') + 1);
  std::string prefix_b = ub.substr(0, ub.rfind('-') + 1);
  EXPECT_EQ(Call("GET", prefix_b + mac_a + "/keys/x").status, 404);

  // Binary values, encoded keys, waits and atomic adds.
  std::string binary("a\0b\xff", 4);
  EXPECT_EQ(Call("PUT", ua + "/keys/dir%2Fsub%20key", binary).status, 200);
  EXPECT_EQ(Call("GET", ua + "/keys/dir%2Fsub%20key").body, binary);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Call("PUT", ua + "/keys/late", "arrived");
  });
  Raw waited = Call("GET", ua + "/keys/late?wait_ms=1000");
  late.join();
  EXPECT_EQ(waited.status, 200);
  EXPECT_EQ(waited.body, "arrived");
  EXPECT_EQ(Call("POST", ua + "/add/counter", R"({"delta": 2})").body, R"({"value":2})");
  EXPECT_EQ(Call("POST", ua + "/add/counter", R"({"delta": 3})").body, R"({"value":5})");
  EXPECT_EQ(Call("POST", ua + "/add/counter", R"({"delta": "x"})").status, 400);

  std::ofstream(gate) << "go";
  c.WaitForState(a["id"], "SUCCEEDED");
  Raw gone = Call("GET", ua + "/keys/x");
  EXPECT_EQ(gone.status, 404);
  EXPECT_NE(gone.body.find("not running"), std::string::npos) << gone.body;
}

TEST(Progress, TasksReportStepAndLossAtCohortReport) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("node-a", 1);
  c.WaitForNodes(1);
  std::string script = std::string(kTaskCaFile) +
      "for s in 1 2 3; do curl -sf --cacert \"$ca\" -X POST -d \"{\\\"step\\\": $s, \\\"loss\\\": 2.$s, \\\"tokens_per_s\\\": 1000}\" "
      "\"$COHORT_REPORT\" || exit 9; done; "
      "curl -s --cacert \"$ca\" -o /dev/null -w '%{http_code}\\n' -X POST -d '{\"step\": -1}' \"$COHORT_REPORT\"";
  json job = c.Submit({{"command", {"sh", "-c", script}}});
  c.WaitForState(job["id"], "SUCCEEDED");
  EXPECT_NE(c.Logs(job["id"], 0).find("400"), std::string::npos) << "a bad report must be refused: " << c.Logs(job["id"], 0);
  auto r = c.client().Get("/v1/jobs/" + std::to_string(job["id"].get<int64_t>()) + "/progress");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const json& points = (*r)["points"];
  ASSERT_EQ(points.size(), 3u) << r->dump();
  EXPECT_EQ(points[2]["step"], 3);
  EXPECT_DOUBLE_EQ(points[2]["loss"].get<double>(), 2.3);
  EXPECT_EQ(c.Job(job["id"])["progress"]["step"], 3);
  // After the job ended its token no longer accepts reports.
  auto bad = c.client().Post("/v1/report/" + std::to_string(job["id"].get<int64_t>()) + "-0-00", json{{"step", 1}});
  EXPECT_FALSE(bad.has_value());
}

}  // namespace
}  // namespace cohort::testing
