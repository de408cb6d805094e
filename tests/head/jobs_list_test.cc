// GET /v1/jobs against an in-process head: the list is sent from each job's JSON as the
// Cluster keeps it between requests (Cluster::ListJobsSerialized), so it must be the same
// object, field for field, as the projected list (?fields=..., built from api::ToJson of
// the JobStatus view), and show every change of a job at once.
#include <gtest/gtest.h>

#include "api/views.h"
#include "head/cluster.h"
#include "head/head.h"
#include "head_server_fixture.h"

namespace cohort::head {
namespace {

class JobsListTest : public HeadServerTest {
 protected:
  api::Job Submit(const std::string& name, int gpus) {
    api::JobSpec spec;
    spec.name = name;
    spec.user = "alice";
    spec.command = {"/bin/true", "caf\xc3\xa9 \"quoted\"\n"};
    spec.nodes = 1;
    spec.gpus_per_node = gpus;
    auto j = cluster().Submit(spec);
    EXPECT_TRUE(j.has_value()) << j.error().message;
    return j ? *j : api::Job{};
  }

  // Both forms of the list, gpu_seconds aside (it grows between the two requests).
  void ExpectListsAgree(const std::string& query) {
    static const std::string all =
        "allocation,attempt,end_ms,exit_code,exits,gpu_seconds,held,held_by,history,id,moves,reason,spec,start_ms,state,"
        "submit_ms,tasks_usage";
    json whole = GetJson("/v1/jobs?" + query);
    json projected = GetJson("/v1/jobs?" + query + "&fields=" + all);
    ASSERT_EQ(whole["jobs"].size(), projected["jobs"].size()) << query;
    EXPECT_EQ(whole.value("next_cursor", ""), projected.value("next_cursor", "")) << query;
    for (size_t i = 0; i < whole["jobs"].size(); ++i) {
      json a = whole["jobs"][i];
      json b = projected["jobs"][i];
      EXPECT_GE(a["gpu_seconds"].get<double>(), 0);
      a.erase("gpu_seconds");
      b.erase("gpu_seconds");
      EXPECT_EQ(a, b) << query << " item " << i;
      EXPECT_TRUE(api::JobStatusFromJson(whole["jobs"][i], "jobs[i]").has_value());
    }
  }

};

TEST_F(JobsListTest, TheWholeListIsTheProjectedListFieldForField) {
  AddNode("n1", 4);
  api::Job a = Submit("a", 4);
  cluster().Schedule();
  Submit("b", 2);  // waits: n1 is full
  api::Job c = Submit("c", 1);
  ASSERT_TRUE(cluster().Cancel(c.id).has_value());
  cluster().Schedule();
  // n1 reports a's task with its resource use.
  api::Heartbeat hb;
  hb.incarnation = "inc-n1";
  api::TaskReport t;
  t.job = a.id;
  t.rank = 0;
  t.running = true;
  t.gpus = {0, 1, 2, 3};
  t.cpu_seconds = 12.5;
  t.rss_bytes = 1 << 30;
  hb.tasks = {t};
  ASSERT_TRUE(cluster().Heartbeat("n1", hb).has_value());

  for (int round = 0; round < 2; ++round) {  // the second from the kept texts
    ExpectListsAgree("state=all");
    ExpectListsAgree("state=PENDING,RUNNING");
    ExpectListsAgree("state=all&limit=1");
    ExpectListsAgree("state=all&limit=2&cursor=" + std::to_string(c.id));
  }
  json active = GetJson("/v1/jobs");
  ASSERT_EQ(active["jobs"].size(), 2u);
  EXPECT_EQ(active["jobs"][0]["state"], "RUNNING");
  ASSERT_EQ(active["jobs"][0]["tasks_usage"].size(), 1u);
  EXPECT_EQ(active["jobs"][0]["tasks_usage"][0]["rss_bytes"], 1 << 30);
  EXPECT_EQ(active["jobs"][1]["state"], "PENDING");
  EXPECT_FALSE(active["jobs"][1]["reason"].get<std::string>().empty()) << "the last pass's pending reason";
}

// ?jobs= (squeue/sacct -j): those jobs only, however many newer ones there are, and a bad
// id is a 400 naming the parameter.
TEST_F(JobsListTest, TheJobsParameterPicksJobsWhateverTheirAge) {
  AddNode("n1", 2);
  const api::Job first = Submit("first", 1);
  for (int i = 0; i < 5; ++i) Submit("later", 1);
  json picked = GetJson("/v1/jobs?state=all&limit=2&jobs=" + std::to_string(first.id));
  ASSERT_EQ(picked["jobs"].size(), 1u) << picked.dump();
  EXPECT_EQ(picked["jobs"][0]["id"], first.id) << "older than the newest 2, still found";
  ExpectListsAgree("state=all&jobs=" + std::to_string(first.id));
  for (const char* bad : {"x", "0", "1,,2", "-3"}) {
    auto r = http_->Get("/v1/jobs?jobs=" + std::string(bad));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_NE(r->body.find("jobs: "), std::string::npos) << r->body;
  }
}

TEST_F(JobsListTest, AChangedJobIsListedAsItIsNow) {
  AddNode("n1", 4);
  api::Job a = Submit("a", 4);
  api::Job b = Submit("b", 4);
  cluster().Schedule();
  json before = GetJson("/v1/jobs");
  ASSERT_EQ(before["jobs"].size(), 2u);
  EXPECT_EQ(before["jobs"][0]["state"], "RUNNING");
  EXPECT_EQ(before["jobs"][1]["state"], "PENDING");
  // a is cancelled: it leaves the active list; b's reason changes with the next pass.
  ASSERT_TRUE(cluster().Cancel(a.id).has_value());
  json after = GetJson("/v1/jobs?state=all");
  ASSERT_EQ(after["jobs"].size(), 2u);
  EXPECT_EQ(after["jobs"][0]["state"], "CANCELLED");
  json active = GetJson("/v1/jobs");
  ASSERT_EQ(active["jobs"].size(), 1u);
  EXPECT_EQ(active["jobs"][0]["id"], b.id);
  ExpectListsAgree("state=all");
}

// A spec that declares its tensor groups stay inside one node (tensor_group_size) is refused
// with 422 and the reason when tasks_per_node cannot hold one; accepted when it can.
TEST_F(JobsListTest, ASpecWhoseNodesCannotHoldATensorGroupIsUnprocessable) {
  AddNode("n1", 8);
  AddNode("n2", 8);
  json spec = {{"command", {"/bin/true"}}, {"nodes", 2}, {"tasks_per_node", 6},
               {"tensor_group_size", 4}};
  auto refused = http_->Post("/v1/jobs", spec.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 422) << refused->body;
  EXPECT_NE(refused->body.find("tasks_per_node 6 is not a multiple of 4"), std::string::npos)
      << refused->body;
  spec["tasks_per_node"] = 8;
  auto accepted = http_->Post("/v1/jobs", spec.dump(), "application/json");
  ASSERT_TRUE(accepted);
  EXPECT_EQ(accepted->status, 201) << accepted->body;
  EXPECT_EQ(json::parse(accepted->body)["spec"]["tensor_group_size"], 4) << accepted->body;
}

}  // namespace
}  // namespace cohort::head
