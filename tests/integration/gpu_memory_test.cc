// Issue 18: a task's GPU memory on a shared GPU, against real head and agent processes
// with simulated GPUs. Each task registers the device memory it "uses" in the agent's
// simulated-device directory (COHORT_SIMULATED_GPU_MEMORY_DIR, agent/gpu/gpu.h), which the
// agent samples through the same path as NVML's per-process memory. A half-GPU task over
// its 40 GiB is reported and keeps running; with gpu_memory_enforce: kill it is stopped
// and its job fails with the reason; a task within its share is untouched. Issue 17: a
// team's quarter-GPU jobs stop at its quota on a running head.
#include <gmock/gmock.h>

#include "harness.h"

namespace cohort::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

// A half-GPU job whose task registers `bytes` of device memory on its GPU, then sleeps.
json HalfGpuJob(const std::string& name, int64_t bytes, const std::string& enforce) {
  json spec = {{"name", name},
               {"command", {"sh", "-c",
                            "echo \"$CUDA_VISIBLE_DEVICES $BYTES\" > \"$COHORT_SIMULATED_GPU_MEMORY_DIR/$$\"; "
                            "exec sleep 60"}},
               {"gpus_per_task", 0.5},
               {"env", {{"BYTES", std::to_string(bytes)}}}};
  if (!enforce.empty()) spec["gpu_memory_enforce"] = enforce;
  return spec;
}

json TaskUsage(const json& job) {
  return job.contains("tasks_usage") && job["tasks_usage"].size() == 1 ? job["tasks_usage"][0] : json();
}

TEST(GpuMemory, OverTheShareIsReportedAndWithKillStoppedWithTheReason) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("n1", 2);
  c.WaitForNodes(1);
  const int64_t over = 50 * kGiB;
  const int64_t killed_bytes = static_cast<int64_t>(46.2 * double(kGiB));
  const int64_t within = 10 * kGiB;
  const int64_t report = c.Submit(HalfGpuJob("report", over, ""))["id"];
  const int64_t kill = c.Submit(HalfGpuJob("kill", killed_bytes, "kill"))["id"];
  const int64_t fine = c.Submit(HalfGpuJob("fine", within, "kill"))["id"];

  // Reported: the warning and the memory, and the task keeps running.
  json j, t;
  EXPECT_TRUE(WaitUntil([&] {
    j = c.Job(report);
    t = TaskUsage(j);
    return t.is_object() && !t.value("gpu_memory_warning", "").empty();
  }, std::chrono::seconds(20))) << j.dump(2);
  const int report_gpu = j["allocation"]["nodes"][0]["tasks"][0]["gpus"][0];
  EXPECT_EQ(t["gpu_memory_bytes"].get<int64_t>(), over);
  EXPECT_EQ(t["gpu_memory_warning"],
            "task 0 used 50 GiB of GPU " + std::to_string(report_gpu) +
                ", over its share of 40 GiB (gpu_memory_enforce: report)");
  EXPECT_EQ(j["state"], "RUNNING");

  // Killed: the job fails with the reason (no restarts asked).
  json k = c.WaitForState(kill, "FAILED");
  const int kill_gpu = k["allocation"]["nodes"][0]["tasks"][0]["gpus"][0];
  EXPECT_THAT(k.value("reason", ""),
              HasSubstr("task 0 used 46.2 GiB of GPU " + std::to_string(kill_gpu) +
                        ", over its share of 40 GiB (gpu_memory_enforce: kill)"));
  ASSERT_EQ(k["exits"].size(), 1u);
  EXPECT_EQ(k["exits"][0]["signal"], 9);

  // Within its share: measured, no warning, still running.
  json f;
  EXPECT_TRUE(WaitUntil([&] {
    f = c.Job(fine);
    return TaskUsage(f).is_object() && TaskUsage(f)["gpu_memory_bytes"].get<int64_t>() == within;
  }, std::chrono::seconds(20))) << f.dump(2);
  EXPECT_FALSE(TaskUsage(f).contains("gpu_memory_warning"));
  EXPECT_EQ(c.Job(fine)["state"], "RUNNING");
  EXPECT_EQ(c.Job(report)["state"], "RUNNING");

  // `cohort show` prints the warning; the agent's metrics count the memory and the over.
  CliResult show = Cohort(c, {"show", std::to_string(report)});
  EXPECT_TRUE(show.status.Success()) << show.errors;
  EXPECT_THAT(show.output, HasSubstr("tasks (running):"));
  EXPECT_THAT(show.output, HasSubstr("50.0 GiB"));
  EXPECT_THAT(show.output, HasSubstr("over its share of 40 GiB (gpu_memory_enforce: report)"));
  auto metrics = AdminClient(c.Node("n1").value("agent_url", "")).GetRaw("/metrics");
  ASSERT_TRUE(metrics.has_value() && metrics->status == 200);
  const std::string labels = "{node=\"n1\",job=\"" + std::to_string(report) + "\",attempt=\"0\",rank=\"0\"}";
  EXPECT_THAT(metrics->body, HasSubstr("cohort_task_gpu_memory_bytes" + labels + " 53687091200\n"));
  EXPECT_THAT(metrics->body, HasSubstr("cohort_task_gpu_memory_over_share" + labels + " 1\n"));
  // A half-GPU task holds half a GPU: summing cohort_task_gpus must not count it whole.
  EXPECT_THAT(metrics->body, HasSubstr("cohort_task_gpus" + labels + " 0.5\n"));
}


TEST(GpuMemory, ATeamsQuarterGpuJobsStopAtItsQuota) {
  LocalCluster c;
  c.StartHead();
  c.StartAgent("n1", 2);
  c.WaitForNodes(1);
  auto team = c.client().Post("/v1/teams", json{{"name", "ml"}, {"quota", {{"gpus", 1}}},
                                                {"borrow_limit", {{"gpus", 0}}}});
  ASSERT_TRUE(team.has_value()) << team.error().message;
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(c.Submit({{"name", "q" + std::to_string(i)},
                            {"command", {"sleep", "60"}},
                            {"gpus_per_task", 0.25},
                            {"team", "ml"}})["id"]);
  }
  // Four quarters are the team's one GPU; the fifth waits at its limit, though the node
  // has a whole GPU free.
  json last;
  EXPECT_TRUE(WaitUntil([&] {
    int running = 0;
    for (size_t i = 0; i < 4; ++i) running += c.Job(ids[i]).value("state", "") == "RUNNING";
    last = c.Job(ids[4]);
    // A job's reason until a scheduling pass has looked at it is "waiting for the
    // scheduler": on a loaded machine the pass may come after the four have started.
    const std::string reason = last.value("reason", "");
    return running == 4 && !reason.empty() && reason != "waiting for the scheduler";
  }, std::chrono::seconds(20))) << last.dump(2);
  EXPECT_EQ(last["state"], "PENDING");
  EXPECT_EQ(last.value("reason", ""),
            "team ml is at its limit: 1 of 1 GPUs in use (quota 1 + borrow limit 0); this job needs 0.25");
  auto shares = c.client().Get("/v1/shares");
  ASSERT_TRUE(shares.has_value()) << shares.error().message;
  bool listed = false;
  for (const json& t : (*shares)["teams"]) {
    if (t.value("name", "") != "ml") continue;
    listed = true;
    EXPECT_DOUBLE_EQ(t["gpus_in_use"].get<double>(), 1.0) << t.dump();
    EXPECT_DOUBLE_EQ(t["borrowed_gpus"].get<double>(), 0.0) << t.dump();
  }
  EXPECT_TRUE(listed) << shares->dump(2);
  for (int64_t id : ids) {
    auto r = c.client().Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
    EXPECT_TRUE(r.has_value()) << r.error().message;
  }
}

}  // namespace
}  // namespace cohort::testing
