// GPU-hours arithmetic (usage.h).
#include "head/usage.h"

#include <gtest/gtest.h>

namespace cohort::head {
namespace {

api::Job MakeJob(api::JobId id, const std::string& user, int nodes, int gpus_per_node) {
  api::Job j;
  j.id = id;
  j.spec.name = "job" + std::to_string(id);
  j.spec.user = user;
  j.spec.command = {"x"};
  j.spec.nodes = nodes;
  j.spec.gpus_per_node = gpus_per_node;
  return j;
}

api::AttemptRecord Attempt(int n, int64_t start, int64_t end, int gpus) {
  api::AttemptRecord a;
  a.attempt = n;
  a.start_ms = start;
  a.end_ms = end;
  a.gpus = gpus;
  return a;
}

TEST(UsageTest, GpusTimesWallTimeOfEachAttempt) {
  api::Job j = MakeJob(1, "alice", 2, 4);
  j.history = {Attempt(0, 1'000, 11'000, 8), Attempt(1, 20'000, 0, 8)};  // second still running
  j.state = api::JobState::kRunning;
  // 8 GPUs x 10 s + 8 GPUs x (now - 20 s).
  EXPECT_DOUBLE_EQ(JobGpuSeconds(j, 30'000), 80 + 80);
  // Windows cut attempts.
  EXPECT_DOUBLE_EQ(JobGpuSeconds(j, 30'000, {6'000, 25'000}), 8 * 5 + 8 * 5);
  EXPECT_DOUBLE_EQ(JobGpuSeconds(j, 30'000, {12'000, 19'000}), 0);
  // A record from before the GPU count was kept: nodes x gpus_per_node.
  j.history[0].gpus = -1;
  EXPECT_EQ(AttemptGpus(j, j.history[0]), 8);
  // A job that never started, and a CPU-only job, use nothing.
  EXPECT_DOUBLE_EQ(JobGpuSeconds(MakeJob(2, "bob", 1, 8), 30'000), 0);
  api::Job cpu = MakeJob(3, "bob", 1, 0);
  cpu.history = {Attempt(0, 1'000, 5'000, 0)};
  EXPECT_DOUBLE_EQ(JobGpuSeconds(cpu, 30'000), 0);
}

TEST(UsageTest, FractionsCountTheirPartOfAGpu) {
  // A half-GPU job for an hour is half a GPU-hour; its usage row says 0.5 GPU.
  api::Job half = MakeJob(1, "alice", 1, 0);
  half.state = api::JobState::kSucceeded;
  half.history = {Attempt(0, 1, 3'600'001, 0)};
  half.history[0].gpu_share_units = 2;
  EXPECT_DOUBLE_EQ(JobGpuSeconds(half, 4'000'000), 1800);
  api::Job quarters = MakeJob(2, "bob", 1, 0);  // three tasks of a quarter each
  quarters.state = api::JobState::kSucceeded;
  quarters.history = {Attempt(0, 1, 3'600'001, 0)};
  quarters.history[0].gpu_share_units = 3;
  UsageReport r = ComputeUsage({half, quarters}, 4'000'000, {0, 4'000'000});
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_DOUBLE_EQ(r.jobs[0].gpus, 0.5);
  EXPECT_DOUBLE_EQ(r.jobs[0].gpu_seconds, 1800);
  EXPECT_DOUBLE_EQ(r.jobs[1].gpus, 0.75);
  EXPECT_DOUBLE_EQ(r.total_gpu_seconds, 1800 + 2700);
}

// Per team, as sreport by account: each job counts against its spec's team ("default"
// when it names none), and the teams add up to the total as the users do.
TEST(UsageTest, PerTeamAddsUpToTheTotal) {
  api::Job a = MakeJob(1, "alice", 1, 2);
  a.spec.team = "ml";
  a.state = api::JobState::kSucceeded;
  a.history = {Attempt(0, 1, 3'600'001, 2)};  // 2 GPU-hours
  api::Job b = MakeJob(2, "bob", 1, 1);
  b.spec.team = "ml";
  b.state = api::JobState::kSucceeded;
  b.history = {Attempt(0, 1, 1'800'001, 1)};  // 0.5
  api::Job c = MakeJob(3, "carol", 1, 4);  // no team: default
  c.state = api::JobState::kSucceeded;
  c.history = {Attempt(0, 1, 3'600'001, 4)};  // 4
  UsageReport r = ComputeUsage({a, b, c}, 4'000'000, {});
  ASSERT_EQ(r.teams.size(), 2u);
  EXPECT_EQ(r.teams[0].team, "default");
  EXPECT_DOUBLE_EQ(r.teams[0].gpu_seconds, 4 * 3600);
  EXPECT_EQ(r.teams[0].jobs, 1);
  EXPECT_EQ(r.teams[1].team, "ml");
  EXPECT_DOUBLE_EQ(r.teams[1].gpu_seconds, 2 * 3600 + 1800);
  EXPECT_EQ(r.teams[1].jobs, 2);
  EXPECT_DOUBLE_EQ(r.teams[0].gpu_seconds + r.teams[1].gpu_seconds, r.total_gpu_seconds);
  EXPECT_EQ(r.jobs[0].team, "ml");
  EXPECT_EQ(r.jobs[2].team, "default");
  // Through the wire and back.
  auto back = api::UsageReportFromJson(api::ToJson(r));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ASSERT_EQ(back->teams.size(), 2u);
  EXPECT_EQ(back->teams[1].team, "ml");
  EXPECT_DOUBLE_EQ(back->teams[1].gpu_seconds, 2 * 3600 + 1800);
  EXPECT_EQ(back->jobs[0].team, "ml");
}

TEST(UsageTest, PerUserAndPerJob) {
  api::Job a = MakeJob(1, "alice", 1, 2);
  a.state = api::JobState::kSucceeded;
  a.history = {Attempt(0, 0 + 1, 3'600'001, 2)};  // 2 GPU-hours
  api::Job b = MakeJob(2, "bob", 1, 1);
  b.state = api::JobState::kFailed;
  b.history = {Attempt(0, 1'000, 1'801'000, 1)};  // 0.5 GPU-hour
  api::Job c = MakeJob(3, "alice", 1, 4);
  c.state = api::JobState::kRunning;
  c.history = {Attempt(0, 3'600'001, 0, 4)};  // running: 4 GPUs x 0.25 h to now
  api::Job never = MakeJob(4, "carol", 1, 1);  // pending: not listed
  int64_t now = 3'600'001 + 900'000;
  UsageReport r = ComputeUsage({a, b, c, never}, now, {});
  ASSERT_EQ(r.users.size(), 2u);
  EXPECT_EQ(r.users[0].user, "alice");
  EXPECT_DOUBLE_EQ(r.users[0].gpu_seconds, 2 * 3600 + 4 * 900);
  EXPECT_EQ(r.users[0].jobs, 2);
  EXPECT_EQ(r.users[1].user, "bob");
  EXPECT_DOUBLE_EQ(r.users[1].gpu_seconds, 1800);
  ASSERT_EQ(r.jobs.size(), 3u);
  EXPECT_EQ(r.jobs[2].id, 3);
  EXPECT_EQ(r.jobs[2].gpus, 4);
  EXPECT_DOUBLE_EQ(r.total_gpu_seconds, 7200 + 3600 + 1800);

  json j = api::ToJson(r);
  EXPECT_DOUBLE_EQ(j["total_gpu_hours"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(j["users"][1]["gpu_hours"].get<double>(), 0.5);
  EXPECT_TRUE(j["until_ms"].is_null());

  UsageReport bob = ComputeUsage({a, b, c}, now, {}, "bob");
  ASSERT_EQ(bob.users.size(), 1u);
  ASSERT_EQ(bob.jobs.size(), 1u);
  EXPECT_EQ(bob.jobs[0].id, 2);

  std::vector<api::TaskUsage> tasks = {{0, "n1", 1.5, 100, {}, 0, "", ""}};
  json job_json = api::ToJson(JobStatusAt(c, now, &tasks));
  EXPECT_DOUBLE_EQ(job_json["gpu_seconds"].get<double>(), 3600);
  EXPECT_EQ(job_json["tasks_usage"][0]["node"], "n1");
  EXPECT_EQ(job_json["id"], 3);
  // Running with nothing reported yet: an empty list; not running: none at all.
  EXPECT_EQ(api::ToJson(JobStatusAt(c, now, nullptr))["tasks_usage"], json::array());
  json done_json = api::ToJson(JobStatusAt(a, now, nullptr));
  EXPECT_DOUBLE_EQ(done_json["gpu_seconds"].get<double>(), 7200);
  EXPECT_FALSE(done_json.contains("tasks_usage"));
}

}  // namespace
}  // namespace cohort::head
