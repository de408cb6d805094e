// Inference services end to end: real head, agents and `cohort serve` replicas on
// loopback. Deploy, route, scale and remove through the CLI; the gateway's routing (site,
// session), errors and metrics; and kill -9 of the agent under a replica while 32 streams
// are in flight: every stream completes, equal to a run without the failure (its tokens,
// text and text offsets), and the service is back to full strength.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include "harness.h"

namespace cohort::testing {
namespace {

// A small random checkpoint made by `cohort train` (one step), in `dir`/ckpt. `big`: a
// model slow enough on one thread that streams last seconds (the failover test).
std::string MakeCheckpoint(const LocalCluster& c, bool big) {
  const std::string dir = c.dir() + (big ? "/big" : "/small");
  std::filesystem::create_directories(dir);
  const std::string config = dir + "/train.yaml";
  std::ofstream(config) << (big ? "model: {n_layer: 6, n_head: 4, n_embd: 256, seq_len: 512}\n"
                                : "model: {n_layer: 2, n_head: 4, n_embd: 64, seq_len: 64}\n")
                        << "tokenizer: {type: byte}\n"
                        << "data: {text: " << COHORT_SOURCE_DIR << "/README.md}\n"
                        << "train: {steps: 1, micro_batch: 1, threads: 1}\n"
                        << "checkpoint: {dir: " << dir << "/ckpt, every: 1}\n"
                        << "sample: {every: 0, tokens: 0}\n";
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "train", "--config", config};
  o.stdout_path = dir + "/train.log";
  o.unset_env = {"COHORT_JOB_ID", "RANK", "WORLD_SIZE"};
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.has_value());
  auto st = p->WaitFor(std::chrono::seconds(120));
  EXPECT_TRUE(st && st->Success()) << ReadFile(dir + "/train.log");
  return dir + "/ckpt";
}

std::string ServiceFile(const LocalCluster& c, const std::string& name, const std::string& model, int replicas,
                        const std::vector<std::string>& args = {"--kv-cache-mb", "16", "--threads", "1"}) {
  const std::string path = c.dir() + "/" + name + ".yaml";
  std::ofstream f(path);
  f << "kind: service\nname: " << name << "\nmodel: " << model << "\nmodel_name: " << name
    << "-model\nreplicas: " << replicas << "\ncpus_per_replica: 1\nargs: [";
  for (size_t i = 0; i < args.size(); ++i) f << (i ? ", " : "") << '"' << args[i] << '"';
  f << "]\n";
  return path;
}

json Services(const LocalCluster& c) {
  auto r = c.client().Get("/v1/services");
  return r ? *r : json();
}

json ServiceNamed(const LocalCluster& c, const std::string& name) {
  for (const auto& s : Services(c).value("services", json::array())) {
    if (s["name"] == name) return s;
  }
  return json();
}

// Waits until the service has `n` replicas and all of them healthy.
void WaitHealthy(const LocalCluster& c, const std::string& name, int n, std::chrono::seconds timeout) {
  json last;
  ASSERT_TRUE(WaitUntil([&] {
    last = ServiceNamed(c, name);
    return last.is_object() && last["replicas"] == n && last["healthy"] == n;
  }, timeout)) << "service " << name << " not healthy with " << n << " replicas: " << last.dump(2)
               << "\nhead log:\n" << ReadFile(c.dir() + "/head.log");
}

struct Reply {
  int status = 0;
  json body;
  std::string replica;  // X-Cohort-Replica
};

Reply Post(const LocalCluster& c, const std::string& path, const json& body, httplib::Headers headers = {},
           const std::string& token = TestToken()) {
  auto cli = RawClient(c.url());
  cli->set_read_timeout(120, 0);
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  auto r = cli->Post(path, headers, body.is_string() ? body.get<std::string>() : body.dump(), "application/json");
  if (!r) return {};
  return {r->status, json::parse(r->body, nullptr, false), r->get_header_value("X-Cohort-Replica")};
}

// One streamed completion through the gateway: the token ids and text it delivered, and
// whether it ended with [DONE] after a finish_reason.
struct Streamed {
  int status = 0;
  std::vector<int64_t> tokens;
  std::string text;
  std::vector<int64_t> offsets;  // logprobs.text_offset, when asked
  std::string finish;
  bool done = false;
  std::string error;
  std::string replica;  // X-Cohort-Replica: the replica it started on
};

Streamed Stream(const LocalCluster& c, const json& body, std::atomic<int>* first_tokens = nullptr) {
  Streamed out;
  auto cli = RawClient(c.url());
  cli->set_read_timeout(120, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Authorization", "Bearer " + TestToken()}, {"Content-Type", "application/json"}};
  req.body = body.dump();
  std::string buf;
  req.response_handler = [&](const httplib::Response& r) {
    out.status = r.status;
    out.replica = r.get_header_value("X-Cohort-Replica");
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    buf.append(d, n);
    size_t end;
    while ((end = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, end);
      buf.erase(0, end + 2);
      if (!ev.starts_with("data: ")) continue;
      ev.erase(0, 6);
      if (ev == "[DONE]") {
        out.done = true;
        continue;
      }
      json j = json::parse(ev, nullptr, false);
      if (j.contains("error")) {
        out.error = j.dump();
        continue;
      }
      const json& ch = j["choices"][0];
      out.text += ch.value("text", "");
      for (const auto& id : ch.value("token_ids", json::array())) out.tokens.push_back(id.get<int64_t>());
      if (ch["logprobs"].is_object()) {
        for (const auto& o : ch["logprobs"]["text_offset"]) out.offsets.push_back(o.get<int64_t>());
      }
      if (first_tokens && out.tokens.size() == 1) *first_tokens += 1;
      if (ch["finish_reason"].is_string()) out.finish = ch["finish_reason"];
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!cli->send(req, res, err)) out.error = httplib::to_string(err);
  return out;
}

double MetricValue(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(ServeIntegrationTest, DeployRouteScaleAndRemoveAService) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("east", 0, 4, {"--topology", "site=east"});
  c.StartAgent("west", 0, 4, {"--topology", "site=west"});
  c.WaitForNodes(2);
  const std::string model = MakeCheckpoint(c, false);
  auto deployed = Cohort(c, {"serve", "deploy", ServiceFile(c, "svc", model, 2)});
  ASSERT_EQ(deployed.status.Code(), 0) << deployed.errors;
  EXPECT_NE(deployed.output.find("Deployed service svc (2 replicas)"), std::string::npos) << deployed.output;
  ASSERT_NO_FATAL_FAILURE(WaitHealthy(c, "svc", 2, std::chrono::seconds(60)));

  // A second deploy of the same name is refused.
  auto again = Cohort(c, {"serve", "deploy", ServiceFile(c, "svc", model, 1)});
  EXPECT_NE(again.status.Code(), 0);
  EXPECT_NE(again.errors.find("exists"), std::string::npos) << again.errors;

  // The gateway's answer equals the replica's own (greedy).
  const json req = {{"model", "svc-model"}, {"prompt", "Hello"}, {"max_tokens", 8}, {"temperature", 0}};
  Reply through = Post(c, "/v1/completions", req);
  ASSERT_EQ(through.status, 200) << through.body.dump();
  EXPECT_EQ(through.body["usage"]["completion_tokens"], 8);
  const json svc = ServiceNamed(c, "svc");
  const std::string endpoint = svc["replica_status"][0]["endpoint"];
  auto direct = httplib::Client(endpoint).Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(direct);
  EXPECT_EQ(json::parse(direct->body)["choices"][0]["text"], through.body["choices"][0]["text"]);

  // logit_bias through the gateway: a ban of the greedy first token makes the stream start
  // with another, and the unstreamed reply is the replica's own to the same request; a
  // bad entry is the replica's 400 naming it, relayed.
  json streamed_req = req;
  streamed_req["stream"] = true;
  const Streamed plain = Stream(c, streamed_req);
  ASSERT_EQ(plain.tokens.size(), 8u) << plain.error;
  streamed_req["logit_bias"] = {{std::to_string(plain.tokens[0]), -100}};
  const Streamed banned = Stream(c, streamed_req);
  ASSERT_EQ(banned.tokens.size(), 8u) << banned.error;
  EXPECT_NE(banned.tokens[0], plain.tokens[0]);
  json biased = req;
  biased["logit_bias"] = streamed_req["logit_bias"];
  Reply biased_through = Post(c, "/v1/completions", biased);
  ASSERT_EQ(biased_through.status, 200) << biased_through.body.dump();
  auto biased_direct = httplib::Client(endpoint).Post("/v1/completions", biased.dump(), "application/json");
  ASSERT_TRUE(biased_direct);
  EXPECT_EQ(json::parse(biased_direct->body)["choices"][0]["text"], biased_through.body["choices"][0]["text"]);
  EXPECT_EQ(biased_through.body["choices"][0]["text"], banned.text);
  biased["logit_bias"] = {{"7", 250}};
  Reply out_of_range = Post(c, "/v1/completions", biased);
  EXPECT_EQ(out_of_range.status, 400) << out_of_range.body.dump();
  EXPECT_EQ(out_of_range.body["error"]["param"], "logit_bias.7") << out_of_range.body.dump();

  // Site preference: every request naming a site lands on that site's replica.
  std::map<std::string, std::string> node_of;  // replica key -> node
  for (const auto& r : svc["replica_status"]) {
    node_of[std::to_string(r["job"].get<int64_t>()) + "." + std::to_string(r["attempt"].get<int>())] = r["node"];
  }
  for (const std::string site : {"east", "west"}) {
    for (int i = 0; i < 4; ++i) {
      Reply r = Post(c, "/v1/completions", req, {{"X-Cohort-Site", site}});
      ASSERT_EQ(r.status, 200);
      EXPECT_EQ(node_of[r.replica], site) << "site " << site << " served by " << r.replica;
    }
  }
  // Session affinity: one session, one replica.
  std::set<std::string> seen;
  for (int i = 0; i < 6; ++i) seen.insert(Post(c, "/v1/completions", req, {{"X-Session-Id", "conv-42"}}).replica);
  EXPECT_EQ(seen.size(), 1u);
  // Without either, least-loaded routing uses both replicas.
  seen.clear();
  for (int i = 0; i < 8; ++i) seen.insert(Post(c, "/v1/completions", req).replica);
  EXPECT_EQ(seen.size(), 2u);

  // Errors in OpenAI's shape.
  Reply unknown = Post(c, "/v1/completions", json{{"model", "nope"}, {"prompt", "x"}});
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.body["error"]["param"], "model");
  Reply malformed = Post(c, "/v1/completions", json("{\"model\": "));
  EXPECT_EQ(malformed.status, 400);
  Reply too_many = Post(c, "/v1/completions", json{{"model", "svc-model"}, {"prompt", "x"}, {"max_tokens", 500}});
  EXPECT_EQ(too_many.status, 400) << too_many.body.dump();
  EXPECT_EQ(too_many.body["error"]["param"], "max_tokens");
  Reply anonymous = Post(c, "/v1/completions", req, {}, "");
  EXPECT_EQ(anonymous.status, 401);

  // Replicas are jobs: `queue` shows them; /metrics has the service's gauges.
  auto queue = Cohort(c, {"queue"});
  EXPECT_NE(queue.output.find("svc"), std::string::npos) << queue.output;
  auto metrics = c.client().GetRaw("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(MetricValue(metrics->body, "cohort_service_healthy_replicas{service=\"svc\"}"), 2) << metrics->body;
  EXPECT_GE(MetricValue(metrics->body, "cohort_gateway_requests_total"), 20);
  auto ls = Cohort(c, {"serve", "ls"});
  EXPECT_NE(ls.output.find("Service svc: model svc-model, 2 replica(s), 2 healthy"), std::string::npos) << ls.output;

  // One service by name, as kubectl get svc NAME; a name no service has is an error.
  auto one = Cohort(c, {"serve", "ls", "svc"});
  EXPECT_NE(one.output.find("Service svc: model svc-model"), std::string::npos) << one.output << one.errors;
  auto none = Cohort(c, {"serve", "ls", "nope"});
  EXPECT_EQ(none.status.Code(), 1);
  EXPECT_NE(none.errors.find("no service 'nope'"), std::string::npos) << none.errors;

  auto scaled = Cohort(c, {"serve", "scale", "svc", "1"});
  ASSERT_EQ(scaled.status.Code(), 0) << scaled.errors;
  EXPECT_NE(scaled.output.find("Service svc scaled to 1 replica\n"), std::string::npos) << scaled.output;
  ASSERT_NO_FATAL_FAILURE(WaitHealthy(c, "svc", 1, std::chrono::seconds(30)));
  EXPECT_EQ(Post(c, "/v1/completions", req).status, 200);

  // Scaled to 0, as kubectl scale --replicas=0 keeps a Deployment: the service stays, with
  // no replica, and its model answers 503 (not 404: it exists); scaled back, it serves.
  // This was refused: "replicas: must be between 1 and 64 (remove a service with rm)".
  auto zero = Cohort(c, {"serve", "scale", "svc", "0"});
  ASSERT_EQ(zero.status.Code(), 0) << zero.errors;
  EXPECT_NE(zero.output.find("Service svc scaled to 0 replicas\n"), std::string::npos) << zero.output;
  Reply idle;
  EXPECT_TRUE(WaitUntil([&] {
    idle = Post(c, "/v1/completions", req);
    return idle.status == 503 && idle.body["error"]["message"].get<std::string>().find("scaled to 0") != std::string::npos;
  }, std::chrono::seconds(30))) << idle.status << " " << idle.body.dump();
  EXPECT_EQ(idle.body["error"]["type"], "service_unavailable_error");
  const json parked = ServiceNamed(c, "svc");
  EXPECT_EQ(parked["replicas"], 0) << parked.dump();
  auto ls_zero = Cohort(c, {"serve", "ls", "svc"});
  EXPECT_EQ(ls_zero.status.Code(), 0) << ls_zero.errors;
  EXPECT_NE(ls_zero.output.find("Service svc: model svc-model, 0 replica(s)"), std::string::npos) << ls_zero.output;
  auto taken = Cohort(c, {"serve", "deploy", ServiceFile(c, "svc", model, 1)});
  EXPECT_NE(taken.status.Code(), 0) << "a service scaled to 0 still holds its name";
  auto back = Cohort(c, {"serve", "scale", "svc", "1"});
  ASSERT_EQ(back.status.Code(), 0) << back.errors;
  ASSERT_NO_FATAL_FAILURE(WaitHealthy(c, "svc", 1, std::chrono::seconds(60)));
  EXPECT_EQ(Post(c, "/v1/completions", req).status, 200);

  auto removed = Cohort(c, {"serve", "rm", "svc"});
  ASSERT_EQ(removed.status.Code(), 0) << removed.errors;
  EXPECT_TRUE(WaitUntil([&] { return Services(c)["services"].empty(); }, std::chrono::seconds(10)));
  Reply gone = Post(c, "/v1/completions", req);
  EXPECT_EQ(gone.status, 404);
}

// The official OpenAI SDK (npm "openai", installed by scripts/install-deps.sh) against the
// gateway, with a Cohort token as its apiKey: models, completions, chat, streams, errors.
TEST(ServeIntegrationTest, TheOpenAiSdkTalksToTheGateway) {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "node cannot run here (the OpenAI SDK is a Node package)";
  }
  const std::string sdk_dir = std::string(COHORT_SOURCE_DIR) + "/tests/integration/openai_sdk";
  ASSERT_TRUE(std::filesystem::exists(sdk_dir + "/node_modules/openai/package.json"))
      << "the OpenAI SDK is not installed: run scripts/install-deps.sh (or scripts/install-openai-sdk.sh)";
  LocalCluster c;
  c.StartHead();
  c.StartAgent("n1", 0, 4);
  c.WaitForNodes(1);
  const std::string model = MakeCheckpoint(c, false);
  auto deployed = Cohort(c, {"serve", "deploy", ServiceFile(c, "sdk", model, 1)});
  ASSERT_EQ(deployed.status.Code(), 0) << deployed.errors;
  ASSERT_NO_FATAL_FAILURE(WaitHealthy(c, "sdk", 1, std::chrono::seconds(60)));
  SpawnOptions o;
  o.argv = {"node", sdk_dir + "/sdk_test.mjs"};
  o.env = {{"COHORT_GATEWAY", c.url()},
           {"COHORT_TOKEN", TestToken()},
           {"COHORT_MODEL", "sdk-model"},
           {"NODE_EXTRA_CA_CERTS", c.dir() + "/head/tls/ca.crt"}};
  o.stdout_path = c.dir() + "/sdk.log";
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.has_value());
  auto st = p->WaitFor(std::chrono::seconds(120));
  ASSERT_TRUE(st.has_value()) << "the SDK test did not finish";
  const std::string log = ReadFile(c.dir() + "/sdk.log");
  EXPECT_TRUE(st->Success()) << st->ToString() << "\n" << log;
  for (const char* check : {"ok models.list", "ok completions.create stream", "ok completions.create logit_bias",
                            "ok completions.create echo",
                            "ok chat.completions.create stream",
                            "ok errors", "ok serving after errors"}) {
    EXPECT_NE(log.find(check), std::string::npos) << check << "\n" << log;
  }
}

// kill -9 of the agent under a replica while 32 streams are in flight.
TEST(ServeIntegrationTest, KillingAnAgentMidStreamLosesNoTokenAndTheServiceRecovers) {
  // Longer leases than the default test timing: 32 streams and two replicas keep both
  // cores busy, and an agent that cannot renew its lease in time has its tasks fenced.
  Timing timing;
  timing.heartbeat = "250ms";
  timing.fence = "2s";
  timing.failure = "3s";
  LocalCluster c(timing);
  c.StartHead();
  for (const char* n : {"n1", "n2", "n3"}) c.StartAgent(n, 0, 2);
  c.WaitForNodes(3);
  const std::string model = MakeCheckpoint(c, true);
  auto deployed = Cohort(c, {"serve", "deploy", ServiceFile(c, "big", model, 2,
                                                            {"--kv-cache-mb", "128", "--threads", "1"})});
  ASSERT_EQ(deployed.status.Code(), 0) << deployed.errors;
  ASSERT_NO_FATAL_FAILURE(WaitHealthy(c, "big", 2, std::chrono::seconds(90)));

  std::vector<json> requests;
  for (int i = 0; i < 32; ++i) {
    json r = {{"model", "big-model"}, {"prompt", "Stream " + std::to_string(i) + ": "}, {"max_tokens", 300},
              {"stream", true}};
    if (i % 2) {
      r["temperature"] = 0.8;
      r["seed"] = 1000 + i;
    } else {
      r["temperature"] = 0;
    }
    if (i % 4 < 2) r["logprobs"] = 1;  // a moved stream's text offsets are an unmoved one's
    requests.push_back(r);
  }
  // The run without a failure.
  std::vector<Streamed> reference(32);
  {
    std::vector<std::thread> t;
    for (int i = 0; i < 32; ++i) t.emplace_back([&, i] { reference[i] = Stream(c, requests[i]); });
    for (auto& th : t) th.join();
  }
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(reference[i].done && reference[i].finish == "length") << i << " " << reference[i].error;
    ASSERT_EQ(reference[i].tokens.size(), 300u);
  }

  // Again, and kill -9 the agent under a replica that carries streams once every stream
  // has tokens. (Killing replica_status[0]'s agent, whatever it carried, once moved no
  // stream: the gateway had sent the whole burst to the other replica.)
  auto metrics_before = c.client().GetRaw("/metrics");
  ASSERT_TRUE(metrics_before);
  const double failovers_before = MetricValue(metrics_before->body, "cohort_gateway_failovers_total");
  std::vector<Streamed> got(32);
  std::atomic<int> streaming{0};
  std::vector<std::thread> t;
  for (int i = 0; i < 32; ++i) t.emplace_back([&, i] { got[i] = Stream(c, requests[i], &streaming); });
  // Every stream has its first token (and about 300 to go, seconds of work): kill.
  const bool all_streaming = WaitUntil([&] { return streaming == 32; }, std::chrono::seconds(60));
  // The node of the replica with the most streams in progress, by the gateway's gauge.
  std::string victim;
  double most = 0;
  auto carried = c.client().GetRaw("/metrics");
  const json svc = ServiceNamed(c, "big");  // named: a range-for over a temporary's member dangles
  for (const auto& r : svc.value("replica_status", json::array())) {
    const std::string node = r["node"];
    if (!carried) break;
    const double n = MetricValue(carried->body, fmt::format("cohort_replica_gateway_inflight_requests{{service=\"big\","
                                                           "job=\"{}\",node=\"{}\"}}",
                                                           r["job"].get<int64_t>(), node));
    if (n > most) {
      most = n;
      victim = node;
    }
  }
  if (!victim.empty()) {
    c.agent(victim).Signal(SIGKILL);
    (void)c.agent(victim).Wait();
  }
  for (auto& th : t) th.join();
  ASSERT_FALSE(victim.empty()) << "no replica carries a stream:\n" << (carried ? carried->body : "no /metrics");
  ASSERT_TRUE(all_streaming) << "only " << streaming << " streams started";
  // The burst was spread: both replicas carried streams.
  std::map<std::string, int> per_replica;
  for (const auto& g : got) per_replica[g.replica] += 1;
  EXPECT_EQ(per_replica.size(), 2u) << "the 32 streams went to " << per_replica.size() << " replica(s)";

  for (int i = 0; i < 32; ++i) {
    EXPECT_TRUE(got[i].done) << "stream " << i << ": " << got[i].error;
    EXPECT_EQ(got[i].finish, "length") << i;
    const auto differ = std::mismatch(got[i].tokens.begin(), got[i].tokens.end(), reference[i].tokens.begin(),
                                      reference[i].tokens.end());
    EXPECT_EQ(got[i].tokens, reference[i].tokens)
        << "stream " << i << (i % 2 ? " (sampled)" : " (greedy)") << ": the first difference at token "
        << (differ.first - got[i].tokens.begin()) << " of " << got[i].tokens.size();
    EXPECT_EQ(got[i].text, reference[i].text) << "stream " << i;
    EXPECT_EQ(got[i].offsets, reference[i].offsets) << "stream " << i;
    EXPECT_EQ(got[i].offsets.size(), i % 4 < 2 ? 300u : 0u) << "stream " << i;
  }
  auto metrics = c.client().GetRaw("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_GT(MetricValue(metrics->body, "cohort_gateway_failovers_total"), failovers_before)
      << "no stream was moved: the kill came too late to test failover";
  // The replica comes back on the third node.
  ASSERT_NO_FATAL_FAILURE(WaitHealthy(c, "big", 2, std::chrono::seconds(90)));
  const json after = ServiceNamed(c, "big");
  for (const auto& r : after["replica_status"]) EXPECT_NE(r["node"], victim);
}

}  // namespace
}  // namespace cohort::testing
