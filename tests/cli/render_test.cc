// The renderers behind queue, show, nodes and drain, and the logs line prefixer: plain
// values in, text out.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/client.h"

namespace cohort::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kNow = 1'800'000'000'000;

api::Job RunningJob() {
  api::Job job;
  job.id = 12;
  job.spec.name = "ddp";
  job.spec.user = "alice";
  job.spec.command = {"python", "train.py", "--msg", "hello world"};
  job.spec.nodes = 2;
  job.spec.tasks_per_node = 2;
  job.spec.gpus_per_node = 4;
  job.spec.max_restarts = 3;
  job.spec.time_limit_s = 5400;
  job.spec.env = {{"A", "1"}};
  job.spec.workdir = "/work";
  job.state = api::JobState::kRunning;
  job.attempt = 1;
  job.submit_ms = kNow - 200'000;
  job.start_ms = kNow - 65'000;
  job.allocation.master_addr = "10.0.0.1";
  job.allocation.master_port = 29500;
  for (int n = 0; n < 2; ++n) {
    api::NodeAllocation a;
    a.node = "node" + std::to_string(n + 1);
    a.address = "10.0.0." + std::to_string(n + 1);
    a.node_rank = n;
    a.gpus = {0, 1, 2, 3};
    a.cpus = 2;
    a.tasks = {{2 * n, 0, {0, 1}}, {2 * n + 1, 1, {2, 3}}};
    job.allocation.nodes.push_back(a);
  }
  job.history = {{0, kNow - 150'000, kNow - 100'000, {"node3", "node4"}, "node node4 went down"},
                 {1, kNow - 65'000, 0, {"node1", "node2"}, ""}};
  job.exits = {{3, "node2", 0, 9, "", kNow - 1000}, {0, "node1", 1, 0, "boom", kNow - 500}};
  return job;
}

TEST(JobRunTimeTest, RunningEndedAndNeverStarted) {
  api::Job job = RunningJob();
  EXPECT_EQ(JobRunTimeMs(job, kNow), 65'000);
  job.state = api::JobState::kFailed;
  job.end_ms = kNow - 5'000;
  // The attempts' run times, 50s and 60s, not the 145s since the first started: the job
  // waited 35s between them (GPU-hours count 110s too).
  EXPECT_EQ(JobRunTimeMs(job, kNow), 110'000);
  api::Job pending;
  EXPECT_EQ(JobRunTimeMs(pending, kNow), std::nullopt);
  pending.state = api::JobState::kCancelled;
  pending.end_ms = kNow;
  EXPECT_EQ(JobRunTimeMs(pending, kNow), std::nullopt);
}

TEST(RenderQueueTest, SqueueColumns) {
  api::Job running = RunningJob();
  api::Job pending;
  pending.id = 13;
  pending.spec.name = "a-very-long-job-name-that-goes-on-and-on";
  pending.spec.user = "bob";
  pending.spec.command = {"x"};
  pending.spec.nodes = 4;
  pending.spec.gpus_per_node = 8;
  pending.reason = "waiting for 4 nodes with 8 free GPUs";
  api::Job done;
  done.id = 9;
  done.spec.name = "eval";
  done.spec.user = "carol";
  done.spec.command = {"x"};
  done.state = api::JobState::kSucceeded;
  done.start_ms = kNow - 10'000;
  done.end_ms = kNow - 7'000;
  done.allocation.nodes.push_back({"node7", "", 0, {}, 1, {}, 0});
  EXPECT_EQ(RenderQueue({running, pending, done}, kNow),
            "JOBID  NAME                      USER   STATE      ATTEMPT  NODES  GPUS  TIME   NODELIST(REASON)\n"
            "12     ddp                       alice  RUNNING    1/3      2      8     1m05s  node[1-2]\n"
            "13     a-very-long-job-name-th…  bob    PENDING    0        4      32    -      (waiting for 4 nodes with 8 free GPUs)\n"
            "9      eval                      carol  SUCCEEDED  0        1      0     3.0s   node7\n");
  EXPECT_EQ(RenderQueue({}, kNow),
            "JOBID  NAME  USER  STATE  ATTEMPT  NODES  GPUS  TIME  NODELIST(REASON)\n");
}

// `drain --now` moves a job as a new attempt that is no restart: after one restart and one
// move the queue said "2/2" and show "2 (max_restarts 2)", as if no restart were left.
// A sharing job's GPUs are its parts, not 0.
TEST(RenderQueueTest, MovesAreNoRestartsAndSharedGpusAreParts) {
  api::Job moved = RunningJob();
  moved.spec.max_restarts = 2;
  moved.attempt = 2;
  moved.moves = 1;
  api::Job quarters;
  quarters.id = 14;
  quarters.spec.name = "q";
  quarters.spec.user = "bob";
  quarters.spec.command = {"x"};
  quarters.spec.tasks_per_node = 2;
  quarters.spec.gpu_share = 1;  // a quarter of a GPU per task
  quarters.reason = "waiting";
  api::Job memory = quarters;
  memory.id = 15;
  memory.spec.gpu_share = 0;
  memory.spec.gpu_memory_mib = 20 * 1024;
  EXPECT_EQ(RenderQueue({moved, quarters, memory}, kNow),
            "JOBID  NAME  USER   STATE    ATTEMPT  NODES  GPUS   TIME   NODELIST(REASON)\n"
            "12     ddp   alice  RUNNING  2 (1/2)  2      8      1m05s  node[1-2]\n"
            "14     q     bob    PENDING  0        1      0.5    -      (waiting)\n"
            "15     q     bob    PENDING  0        1      20GiB  -      (waiting)\n");
  EXPECT_THAT(RenderJob(moved, kNow), HasSubstr("attempt:       2 (max_restarts 2, 1 used; 1 move (preempted or drained), not counted)\n"));
  moved.spec.max_restarts = 0;
  EXPECT_THAT(RenderJob(moved, kNow), HasSubstr("attempt:       2 (no restarts; 1 move (preempted or drained), not counted)\n"));
}

TEST(RenderJobTest, KeyValueReportWithSections) {
  std::string out = RenderJob(RunningJob(), kNow);
  EXPECT_THAT(out, HasSubstr("id:            12\n"));
  EXPECT_THAT(out, HasSubstr("state:         RUNNING\n"));
  EXPECT_THAT(out, HasSubstr("reason:        -\n"));
  EXPECT_THAT(out, HasSubstr("attempt:       1 (max_restarts 3)\n"));
  // A job moved (preempted, drained) has attempts that spent no restart: show says so.
  api::Job moved = RunningJob();
  moved.attempt = 3;
  moved.moves = 2;
  EXPECT_THAT(RenderJob(moved, kNow),
              HasSubstr("attempt:       3 (max_restarts 3, 1 used; 2 moves (preempted or drained), not counted)\n"));
  moved.spec.max_restarts = 0;
  moved.attempt = 1;
  moved.moves = 1;
  EXPECT_THAT(RenderJob(moved, kNow),
              HasSubstr("attempt:       1 (no restarts; 1 move (preempted or drained), not counted)\n"));
  EXPECT_THAT(out, HasSubstr("run time:      1m05s\n"));
  EXPECT_THAT(out, HasSubstr("time limit:    01:30:00\n"));
  EXPECT_THAT(out, HasSubstr("command:       python train.py --msg 'hello world'\n"));
  EXPECT_THAT(out, HasSubstr("nodes:         2 x 2 tasks per node (world size 4)\n"));
  EXPECT_THAT(out, HasSubstr("gpus per node: 4 (2 per task)\n"));
  EXPECT_THAT(out, HasSubstr("master:        10.0.0.1:29500\n"));
  EXPECT_THAT(out, HasSubstr("\nallocation:\n  NODE_RANK  NODE   ADDRESS   GPUS  CPUS  RANKS  TASK GPUS\n"
                             "  0          node1  10.0.0.1  0-3   2     0-1    0:0-1 1:2-3\n"));
  // Exits are sorted by rank and show a signal by name.
  EXPECT_THAT(out, HasSubstr("  0     node1  exit 1"));
  EXPECT_THAT(out, HasSubstr("boom\n"));
  EXPECT_THAT(out, HasSubstr("  3     node2  killed by SIGKILL"));
  EXPECT_LT(out.find("  0     node1"), out.find("  3     node2"));
  EXPECT_THAT(out, HasSubstr("\nattempts:\n"));
  EXPECT_THAT(out, HasSubstr("node[3-4]  node node4 went down\n"));
  EXPECT_THAT(out, HasSubstr("node[1-2]  (running)\n"));
}

// A sweep's element shows the hyperparameters it ran with, and the sweep its section.
TEST(RenderJobTest, ASweepAndItsElementsValues) {
  api::Job element = RunningJob();
  element.array_job_id = 8;
  element.array_task_id = 2;
  element.sweep_values = {{"train.lr", "0.001"}, {"train.micro_batch", "4"}};
  EXPECT_THAT(RenderJob(element, kNow), HasSubstr("sweep values:  train.lr=0.001 train.micro_batch=4\n"));
  api::Job sweep = RunningJob();
  sweep.id = 8;
  sweep.spec.array = "0-3%2";
  sweep.spec.sweep = json::parse(R"({"grid": {"train.lr": [0.0003, 0.001]}, "parallel": 2})");
  EXPECT_THAT(RenderJob(sweep, kNow),
              HasSubstr(R"(sweep:         {"grid":{"train.lr":[0.0003,0.001]},"parallel":2} (cohort sweep show 8))"));
  EXPECT_THAT(RenderJob(RunningJob(), kNow), Not(HasSubstr("sweep")));
}

// Kept in the job record across head restarts (head/core/preempt.h), and shown.
TEST(RenderJobTest, ANominationAndTheAttemptsLastCheckpoint) {
  api::Job job = RunningJob();
  EXPECT_THAT(RenderJob(job, kNow), Not(HasSubstr("nominated:")));
  job.nomination = api::Nomination{kNow - 65'000, {"node3", "node4"}};
  job.last_checkpoint = api::CheckpointMark{job.attempt, 120, kNow - 5'000};
  std::string out = RenderJob(job, kNow);
  EXPECT_THAT(out, HasSubstr("nominated:     preempted job(s) for it 1m05s ago; waits for their GPUs on node3,node4 "
                             "(held for it)\n"));
  EXPECT_THAT(out, HasSubstr("checkpoint:    step 120, reported 5.0s ago (a preemption loses the work since)\n"));
  // A finished job has nothing left to lose.
  job.state = api::JobState::kSucceeded;
  EXPECT_THAT(RenderJob(job, kNow), HasSubstr("checkpoint:    step 120, reported 5.0s ago\n"));
  job.state = api::JobState::kRunning;
  job.last_checkpoint->attempt = job.attempt - 1;  // an older attempt's: none of this one
  EXPECT_THAT(RenderJob(job, kNow), Not(HasSubstr("checkpoint:    step")));
}

TEST(RenderJobTest, TaskUsageWithGpuMemoryAndItsWarning) {
  std::vector<api::TaskUsage> tasks = {
      {0, "n1", 12.5, int64_t{1} << 30, {1}, int64_t{50} << 30,
       "task 0 used 50 GiB of GPU 1, over its share of 40 GiB (gpu_memory_enforce: report)", "0-3"},
      {1, "n2", 3, 0, {0}, 0, "", ""}};
  // CPUS: the CPUs the agent bound the task to; "-" for an unbound task.
  EXPECT_EQ(RenderTaskUsage(tasks),
            "tasks (running):\n"
            "  RANK  NODE  CPUS  CPU TIME  RSS      GPU MEMORY  WARNING\n"
            "  0     n1    0-3   12.5s     1.0 GiB  50.0 GiB    task 0 used 50 GiB of GPU 1, over its share of 40 GiB "
            "(gpu_memory_enforce: report)\n"
            "  1     n2    -     3.0s      -        -           -\n");
}

TEST(RenderJobTest, AServiceReplicaShowsItsServiceAndEndpoint) {
  api::Job job = RunningJob();
  job.spec.service = "chat";
  job.spec.service_model = "tiny";
  std::string out = RenderJob(job, kNow);
  EXPECT_THAT(out, HasSubstr("service:       replica of chat (model tiny); kept running until removed\n"));
  EXPECT_THAT(out, HasSubstr("attempt:       1 (restarts without limit)\n"));
  EXPECT_THAT(out, HasSubstr("endpoint:      http://10.0.0.1:29500\n"));
}

TEST(RenderJobTest, PendingJobHasNoSections) {
  api::Job job;
  job.id = 3;
  job.spec.name = "x";
  job.spec.user = "u";
  job.spec.command = {"x"};
  job.reason = "waiting for GPUs";
  std::string out = RenderJob(job, kNow);
  EXPECT_THAT(out, HasSubstr("state:         PENDING\n"));
  EXPECT_THAT(out, HasSubstr("reason:        waiting for GPUs\n"));
  EXPECT_THAT(out, HasSubstr("exit code:     -\n"));
  EXPECT_THAT(out, HasSubstr("gpus per node: 0 (CPU only)\n"));
  EXPECT_THAT(out, HasSubstr("time limit:    unlimited\n"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("allocation")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("attempts:")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("move:")));
}

TEST(RenderJobTest, ShowsAMoveUnderWay) {
  api::Job job = RunningJob();
  job.move = api::MoveRequest{"node2", kNow - 12'000, kNow + 48'000, 40, false, 0, ""};
  EXPECT_THAT(RenderJob(job, kNow),
              HasSubstr("move:          leaving node2 (drain --now) at its first checkpoint after step 40; asked "
                        "12.0s ago, moves without one in 48.0s\n"));
  job.move = api::MoveRequest{"", kNow, 0, -1, true, 0, ""};
  EXPECT_THAT(RenderJob(job, kNow), HasSubstr("move:          growing back to 2 nodes at its first checkpoint\n"));
}

json NodeJson() {
  return json::parse(R"({
    "name": "node1", "address": "10.0.0.1", "agent_url": "http://10.0.0.1:8471",
    "incarnation": "abc", "version": "0.1.0", "cpus": 64, "state": "UP", "reason": "",
    "drain": true, "drain_reason": "disk swap", "registered_ms": 1800000000000,
    "last_heartbeat_ms": 1800000100000,
    "gpus": [
      {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "memory_bytes": 85899345920, "simulated": false},
      {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-2", "memory_bytes": 85899345920, "simulated": false}],
    "display_state": "DRAINING", "gpus_allocated": 1, "cpus_allocated": 4, "jobs": [12, 14],
    "heartbeat_age_ms": 450, "unhealthy_gpus": 0})");
}

TEST(RenderNodesTest, NodeTableAndDetail) {
  auto node = api::NodeStatusFromJson(NodeJson());
  ASSERT_TRUE(node.has_value()) << node.error().message;
  EXPECT_EQ(node->display_state, "DRAINING");
  EXPECT_EQ(node->jobs, (std::vector<api::JobId>{12, 14}));

  json down_json = NodeJson();
  down_json["name"] = "node2";
  down_json["state"] = "DOWN";
  down_json["reason"] = "no heartbeat for 3.0s";
  down_json["drain"] = false;
  down_json["display_state"] = "DOWN";
  down_json["gpus"] = json::array();
  down_json["jobs"] = json::array();
  down_json["gpus_allocated"] = 0;
  down_json["cpus_allocated"] = 0;
  down_json["heartbeat_age_ms"] = 61000;
  auto down = api::NodeStatusFromJson(down_json);
  ASSERT_TRUE(down.has_value());

  EXPECT_EQ(RenderNodes({*node, *down}),
            "NAME   STATE     GPUS  CPUS  GPU-TYPE               ADDRESS   HEARTBEAT  JOBS   REASON\n"
            "node1  DRAINING  1/2   4/64  NVIDIA H100 80GB HBM3  10.0.0.1  450ms ago  12,14  disk swap\n"
            "node2  DOWN      0/0   0/64  -                      10.0.0.1  1m01s ago  -      no heartbeat for 3.0s\n");

  std::string detail = RenderNode(*node);
  EXPECT_THAT(detail, HasSubstr("state:          DRAINING\n"));
  EXPECT_THAT(detail, HasSubstr("reason:         disk swap\n"));
  EXPECT_THAT(detail, HasSubstr("gpus:           1 allocated of 2\n"));
  EXPECT_THAT(detail, HasSubstr("jobs:           12,14\n"));
  EXPECT_THAT(detail, HasSubstr("memory:         unknown\n"));
  json featured = NodeJson();
  featured["features"] = {"a100", "ib"};
  featured["memory_bytes"] = int64_t{256} << 30;
  std::string with = RenderNode(*api::NodeStatusFromJson(featured));
  EXPECT_THAT(with, HasSubstr("memory:         256G\n"));
  EXPECT_THAT(with, HasSubstr("features:       a100,ib\n"));
  EXPECT_THAT(detail, HasSubstr("topology:       -\n"));
  featured["labels"] = {{"switch", "s3"}, {"rack", "r1"}};
  EXPECT_THAT(RenderNode(*api::NodeStatusFromJson(featured)), HasSubstr("topology:       rack=r1,switch=s3\n"));
  EXPECT_THAT(detail, HasSubstr("  INDEX  NAME                   UUID   MEMORY    SIMULATED\n"
                                "  0      NVIDIA H100 80GB HBM3  GPU-1  80.0 GiB  no\n"));
}

TEST(RenderNodesTest, ShowsUnhealthyGpus) {
  json j = NodeJson();
  j["drain"] = false;
  j["display_state"] = "UP";
  j["gpus"][1]["healthy"] = false;
  j["gpus"][1]["health_reason"] = "XID 79";
  j["unhealthy_gpus"] = 1;
  auto node = api::NodeStatusFromJson(j);
  ASSERT_TRUE(node.has_value()) << node.error().message;
  EXPECT_EQ(node->unhealthy_gpus, 1);
  EXPECT_EQ(RenderNodes({*node}),
            "NAME   STATE  GPUS        CPUS  GPU-TYPE               ADDRESS   HEARTBEAT  JOBS   REASON\n"
            "node1  UP     1/2, 1 bad  4/64  NVIDIA H100 80GB HBM3  10.0.0.1  450ms ago  12,14  GPU 1 unhealthy: XID 79\n");
  std::string detail = RenderNode(*node);
  EXPECT_THAT(detail, HasSubstr("gpus:           1 allocated of 2, 1 unhealthy\n"));
  EXPECT_THAT(detail, HasSubstr("reason:         GPU 1 unhealthy: XID 79\n"));
}

TEST(RenderNodesTest, AMalformedNodeNamesTheField) {
  json j = NodeJson();
  j["unhealthy_gpus"] = "some";
  auto node = FromHead(api::NodeStatusFromJson(j), "node");
  ASSERT_FALSE(node.has_value());
  EXPECT_EQ(node.error().code, ErrorCode::kInternal);
  EXPECT_EQ(node.error().field, "unhealthy_gpus");
  EXPECT_THAT(node.error().message, HasSubstr("malformed node from the head: unhealthy_gpus: must be an integer"));
}

TEST(NodeStateLineTest, NamesStateJobsAndReason) {
  auto node = api::NodeStatusFromJson(NodeJson());
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(NodeStateLine(*node), "Node node1 is DRAINING (jobs 12, 14 still running): disk swap");
  node->jobs = {};
  node->display_state = "DRAINED";
  node->node.drain_reason = "";
  EXPECT_EQ(NodeStateLine(*node), "Node node1 is DRAINED");
  node->node.drain = false;
  node->display_state = "UP";
  node->jobs = {7};
  EXPECT_EQ(NodeStateLine(*node), "Node node1 is UP (running job 7)");
}

TEST(RankLinePrefixerTest, PrefixesCompleteLinesAndBuffersPartialOnes) {
  RankLinePrefixer p;
  EXPECT_EQ(p.Feed(0, "hello\nwor"), "[rank 0] hello\n");
  EXPECT_EQ(p.Feed(1, "a\nb\n"), "[rank 1] a\n[rank 1] b\n");
  EXPECT_EQ(p.Feed(0, "ld\n\nx"), "[rank 0] world\n[rank 0] \n");
  EXPECT_EQ(p.Flush(1), "");
  EXPECT_EQ(p.Flush(0), "[rank 0] x\n");
  EXPECT_EQ(p.Flush(0), "");
  EXPECT_EQ(p.Feed(2, "no newline"), "");
  EXPECT_EQ(p.Feed(2, " yet"), "");
  EXPECT_EQ(p.Flush(2), "[rank 2] no newline yet\n");
}

}  // namespace
}  // namespace cohort::cli
