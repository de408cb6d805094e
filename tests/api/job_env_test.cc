// The job contract's environment (job_env.h), as the head and `cohort run` build it.
#include <gtest/gtest.h>

#include "api/job_env.h"
#include "api/types.h"

namespace cohort::api {
namespace {

using Env = std::map<std::string, std::string>;

// Job 12, attempt 2: two nodes x two tasks, two GPUs per node.
Job TwoNodeJob() {
  Job job;
  job.id = 12;
  job.attempt = 2;
  job.spec.name = "train";
  job.spec.command = {"python3", "train.py"};
  job.spec.env = {{"SEED", "7"}, {"RANK", "from the spec"}};
  job.spec.nodes = 2;
  job.spec.tasks_per_node = 2;
  job.spec.gpus_per_node = 2;
  job.allocation.master_addr = "10.0.0.1";
  job.allocation.master_port = 29500;
  for (int n = 0; n < 2; ++n) {
    NodeAllocation na;
    na.node = "n" + std::to_string(n + 1);
    na.node_rank = n;
    na.gpus = {0, 1};
    na.tasks = {{2 * n, 0, {0}}, {2 * n + 1, 1, {1}}};
    job.allocation.nodes.push_back(na);
  }
  return job;
}

TEST(TaskEnvironmentTest, ClusterTaskGetsTheWholeContract) {
  Job job = TwoNodeJob();
  const NodeAllocation& na = job.allocation.nodes[1];
  Env env = TaskEnvironment(job, na, na.tasks[1],
                            ClusterTaskEnvOptions("http://head:8470", "12-2-abc", "/ckpt", job.id));
  EXPECT_EQ(env, (Env{{"SEED", "7"},
                      {"RANK", "3"},
                      {"WORLD_SIZE", "4"},
                      {"LOCAL_RANK", "1"},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"NODE_RANK", "1"},
                      {"GROUP_RANK", "1"},
                      {"MASTER_ADDR", "10.0.0.1"},
                      {"MASTER_PORT", "29500"},
                      {"CUDA_VISIBLE_DEVICES", "1"},
                      {"COHORT_JOB_ID", "12"},
                      {"COHORT_JOB_NAME", "train"},
                      {"COHORT_ATTEMPT", "2"},
                      {"TORCHELASTIC_RESTART_COUNT", "2"},
                      {"COHORT_NODE", "n2"},
                      {"COHORT_NUM_NODES", "2"},
                      {"COHORT_HEAD", "http://head:8470"},
                      {"COHORT_RENDEZVOUS", "http://head:8470/v1/rendezvous/12-2-abc"},
                      {"COHORT_REPORT", "http://head:8470/v1/report/12-2-abc"},
                      {"COHORT_CHECKPOINT_DIR", "/ckpt/job-12"}}));
}

// The submitter's umask reaches the tasks (Slurm's SLURM_UMASK), as octal text; an
// allocation's tasks (a batch script, steps) also get cohort alloc's Slurm variables.
TEST(TaskEnvironmentTest, TheUmaskAndAnAllocationsSlurmVariables) {
  Job job = TwoNodeJob();
  job.spec.umask = 027;
  const NodeAllocation& na = job.allocation.nodes[0];
  Env env = TaskEnvironment(job, na, na.tasks[0], ClusterTaskEnvOptions("http://head:8470", "t", "/ckpt", job.id));
  EXPECT_EQ(env.at("COHORT_UMASK"), "0027");
  EXPECT_FALSE(env.contains("SLURM_JOB_ID")) << "a batch job's tasks keep cohort's names only";
  job.spec.allocation = true;
  job.spec.umask = -1;
  env = TaskEnvironment(job, na, na.tasks[0], ClusterTaskEnvOptions("http://head:8470", "t", "/ckpt", job.id));
  EXPECT_FALSE(env.contains("COHORT_UMASK"));
  EXPECT_EQ(env.at("SLURM_JOB_ID"), "12");
  EXPECT_EQ(env.at("SLURM_JOB_NODELIST"), "n1,n2");
  EXPECT_EQ(env.at("COHORT_NODELIST"), "n1,n2");
  EXPECT_EQ(env.at("SLURM_NNODES"), "2");
  EXPECT_EQ(env.at("SLURM_JOB_NAME"), "train");
}

TEST(TaskEnvironmentTest, ElasticJobPlacedSmallCountsItsAllocation) {
  Job job = TwoNodeJob();
  job.spec.min_nodes = 1;
  job.allocation.nodes.resize(1);
  const NodeAllocation& na = job.allocation.nodes[0];
  Env env = TaskEnvironment(job, na, na.tasks[0], ClusterTaskEnvOptions("http://h", "t", "/c", job.id));
  EXPECT_EQ(env["WORLD_SIZE"], "2");
  EXPECT_EQ(env["COHORT_NUM_NODES"], "1");
}

TEST(TaskEnvironmentTest, CpuTaskHidesEveryGpu) {
  Job job = TwoNodeJob();
  NodeAllocation& na = job.allocation.nodes[0];
  na.tasks[0].gpus.clear();
  Env env = TaskEnvironment(job, na, na.tasks[0], ClusterTaskEnvOptions("http://h", "t", "/c", job.id));
  ASSERT_TRUE(env.contains("CUDA_VISIBLE_DEVICES"));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "");
}

// `cohort run -n 2`: one unnamed node, no job id, no head; a TCP rendezvous.
TEST(TaskEnvironmentTest, LocalRunLeavesOutTheClusterVariables) {
  Job job;
  job.spec.tasks_per_node = 2;
  job.allocation.master_addr = "127.0.0.1";
  job.allocation.master_port = 4000;
  job.allocation.nodes = {NodeAllocation{}};
  TaskEnvOptions o;
  o.rendezvous_url = "tcp://127.0.0.1:4001";
  o.set_visible_devices = false;
  Env env = TaskEnvironment(job, job.allocation.nodes[0], TaskPlacement{1, 1, {}}, o);
  EXPECT_EQ(env, (Env{{"RANK", "1"},
                      {"WORLD_SIZE", "2"},
                      {"LOCAL_RANK", "1"},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"NODE_RANK", "0"},
                      {"GROUP_RANK", "0"},
                      {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", "4000"},
                      {"COHORT_ATTEMPT", "0"},
                      {"TORCHELASTIC_RESTART_COUNT", "0"},
                      {"COHORT_NUM_NODES", "1"},
                      {"COHORT_RENDEZVOUS", "tcp://127.0.0.1:4001"}}));
  o.set_visible_devices = true;
  o.checkpoint_dir = "/tmp/ck";
  env = TaskEnvironment(job, job.allocation.nodes[0], TaskPlacement{1, 1, {2, 3}}, o);
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "2,3");
  EXPECT_EQ(env["COHORT_CHECKPOINT_DIR"], "/tmp/ck");
}

TEST(TaskEnvironmentTest, AnArrayElementGetsItsIndexAndTheArraysShape) {
  Job job = TwoNodeJob();
  job.array_job_id = 10;
  job.array_task_id = 5;
  TaskEnvOptions options;
  options.array = "1-2,5%2";  // not evenly spaced: step 1
  const NodeAllocation& na = job.allocation.nodes[0];
  Env env = TaskEnvironment(job, na, na.tasks[0], options);
  EXPECT_EQ(env.at("SLURM_ARRAY_JOB_ID"), "10");
  EXPECT_EQ(env.at("SLURM_ARRAY_TASK_ID"), "5");
  EXPECT_EQ(env.at("SLURM_ARRAY_TASK_COUNT"), "3");
  EXPECT_EQ(env.at("SLURM_ARRAY_TASK_MIN"), "1");
  EXPECT_EQ(env.at("COHORT_ARRAY_TASK_MAX"), "5");
  EXPECT_EQ(env.at("COHORT_ARRAY_TASK_STEP"), "1");
  options.array = "0-98:2";
  env = TaskEnvironment(job, na, na.tasks[0], options);
  EXPECT_EQ(env.at("SLURM_ARRAY_TASK_COUNT"), "50");
  EXPECT_EQ(env.at("SLURM_ARRAY_TASK_STEP"), "2");
  job.array_job_id = 0;  // no element: none of them
  env = TaskEnvironment(job, na, na.tasks[0], options);
  EXPECT_FALSE(env.contains("SLURM_ARRAY_TASK_COUNT"));
}


}  // namespace
}  // namespace cohort::api
