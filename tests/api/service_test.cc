// Inference services on the wire: the service spec (`cohort serve deploy`), replica job
// specs (kind: service), the status view, and node topology labels.
#include <gtest/gtest.h>

#include "api/service.h"
#include "api/types.h"

namespace cohort::api {
namespace {

json ValidService() {
  return json{{"kind", "service"}, {"name", "chat"}, {"model", "/models/tiny"}, {"replicas", 2},
              {"command", {"/usr/bin/cohort", "serve"}}, {"args", {"--kv-cache-mb", "64"}}};
}

TEST(ServiceSpecTest, ReadsAServiceAndMakesItsReplicaSpec) {
  auto s = ServiceSpecFromJson(ValidService());
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->model_name, "chat");
  EXPECT_EQ(s->device, "cpu");
  EXPECT_EQ(s->placement, Placement::kSpread);
  JobSpec r = ReplicaJobSpec(*s);
  EXPECT_TRUE(r.is_service());
  EXPECT_EQ(r.service, "chat");
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.command, (std::vector<std::string>{"/usr/bin/cohort", "serve", "--model", "/models/tiny", "--name",
                                                 "chat", "--device", "cpu", "--kv-cache-mb", "64"}));
  // The replica's job spec survives the job codec (kind: service on the wire).
  json wire = ToJson(r);
  EXPECT_EQ(wire["kind"], "service");
  auto back = JobSpecFromJson(wire);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->service, "chat");
  EXPECT_EQ(back->service_model, "chat");
  // A batch job's JSON is unchanged: no kind.
  JobSpec batch;
  batch.command = {"true"};
  EXPECT_FALSE(ToJson(batch).contains("kind"));
}

TEST(ServiceSpecTest, BadFieldsAreNamed) {
  struct Case {
    const char* field;
    json value;
  };
  const Case cases[] = {{"kind", "batch"},     {"replicas", 0},          {"replicas", 5000},
                        {"name", "no spaces"}, {"device", "tpu"},        {"model", ""},
                        {"gpus_per_replica", -1}, {"placement", "random"}, {"replica", 2}};
  for (const auto& c : cases) {
    json j = ValidService();
    j[c.field] = c.value;
    auto s = ServiceSpecFromJson(j);
    ASSERT_FALSE(s.has_value()) << c.field;
    EXPECT_NE(s.error().message.find(c.field), std::string::npos) << s.error().message;
  }
  json cuda = ValidService();
  cuda["device"] = "cuda";
  EXPECT_EQ(ServiceSpecFromJson(cuda).error().field, "device");  // cuda needs GPUs
  json args = ValidService();
  args["args"] = {"--port", "80"};
  EXPECT_EQ(ServiceSpecFromJson(args).error().field, "args[0]");
  json gpus = ValidService();
  gpus["gpus_per_replica"] = 1;
  EXPECT_EQ(ServiceSpecFromJson(gpus)->device, "cuda");
}

TEST(ServiceSpecTest, AReplicaJobIsOneTaskWithoutTimeLimit) {
  JobSpec r = ReplicaJobSpec(*ServiceSpecFromJson(ValidService()));
  json wire = ToJson(r);
  wire["nodes"] = 2;
  EXPECT_EQ(JobSpecFromJson(wire).error().field, "nodes");
  wire = ToJson(r);
  wire["time_limit_s"] = 60;
  EXPECT_EQ(JobSpecFromJson(wire).error().field, "time_limit_s");
  wire = ToJson(r);
  wire["kind"] = "daemon";
  EXPECT_EQ(JobSpecFromJson(wire).error().field, "kind");
}

TEST(ServiceStatusTest, RoundTrips) {
  ServiceStatus s;
  s.name = "chat";
  s.model_name = "tiny";
  s.replicas = 2;
  s.healthy = 1;
  ReplicaStatus r;
  r.job = 7;
  r.state = "RUNNING";
  r.node = "n1";
  r.site = "eu";
  r.healthy = true;
  r.health = "ok";
  r.tokens_per_second = 12.5;
  r.kv_blocks_used = 3;
  r.kv_blocks_total = 10;
  s.replica_status = {r};
  auto back = ServiceStatusFromJson(ToJson(s));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ASSERT_EQ(back->replica_status.size(), 1u);
  EXPECT_EQ(back->replica_status[0].site, "eu");
  EXPECT_EQ(back->replica_status[0].tokens_per_second, 12.5);
  json bad = ToJson(s);
  bad["replica_status"][0]["job"] = "seven";
  EXPECT_NE(ServiceStatusFromJson(bad).error().message.find("replica_status[0].job"), std::string::npos);
}

TEST(NodeLabelsTest, AreCheckedAndKeptWithTheNode) {
  EXPECT_TRUE(ValidateNodeLabels({{"site", "eu-west"}, {"rack", "r12"}}, "labels").has_value());
  EXPECT_EQ(ValidateNodeLabels({{"Site", "x"}}, "labels").error().field, "labels.Site");
  EXPECT_EQ(ValidateNodeLabels({{"site", "a b"}}, "labels").error().field, "labels.site");
  EXPECT_EQ(ValidateNodeLabels({{"site", ""}}, "labels").error().field, "labels.site");
  Node n;
  n.name = "n1";
  n.labels = {{"site", "edge-3"}};
  auto back = NodeFromJson(ToJson(n));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->labels.at("site"), "edge-3");
}

}  // namespace
}  // namespace cohort::api
