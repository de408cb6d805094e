// GPU requests in a spec (issues 18 and 19): type:count, fractions in quarters, memory,
// topology; bad input names the field and the numbers, and the old integer spec is unchanged.
#include "api/gpu_request.h"

#include <gtest/gtest.h>

#include "api/gpu_spec.h"
#include "api/job_env.h"
#include "api/types.h"

namespace cohort::api {
namespace {

json Spec(json extra) {
  json j{{"command", {"python3", "serve.py"}}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

std::string ErrorOf(const json& j) {
  auto s = JobSpecFromJson(j);
  return s ? std::string("accepted") : s.error().message;
}

TEST(GpuRequest, ParsesTypeAndCount) {
  auto r = ParseGpuRequest("H100:4", "gpus", 1024);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->type, "h100");
  EXPECT_EQ(r->count, 4);
  EXPECT_FALSE(r->mig());
  r = ParseGpuRequest("1g.10gb:2", "gpus", 1024);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->mig());
  EXPECT_EQ(GpuRequestText(*r), "1g.10gb:2");
  r = ParseGpuRequest("8", "gpus", 1024);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, "");
  EXPECT_EQ(r->count, 8);
  for (const char* bad : {"", "h100:", ":4", "h100:x", "h100:-1", "h100:0", "h 100:1", "5000", "h100:1.5"}) {
    EXPECT_FALSE(ParseGpuRequest(bad, "--gpus", 1024)) << bad;
  }
  EXPECT_EQ(ParseGpuRequest("h100:0", "--gpus", 1024).error().message,
            "--gpus: 'h100:0' names GPU type 'h100' with a count of 0; ask for at least 1");
}

TEST(GpuRequest, ShortNamesOfNvmlModels) {
  EXPECT_EQ(GpuShortName("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(GpuShortName("NVIDIA H200"), "h200");
  EXPECT_EQ(GpuShortName("NVIDIA A100-SXM4-40GB"), "a100");
  EXPECT_EQ(GpuShortName("Tesla V100-SXM2-16GB"), "v100");
  EXPECT_EQ(GpuShortName("NVIDIA GeForce RTX 4090"), "rtx4090");
  EXPECT_EQ(GpuShortName("NVIDIA L40S"), "l40s");
  EXPECT_TRUE(IsMigProfile("1g.10gb"));
  EXPECT_TRUE(IsMigProfile("1g.10gb+me"));
  EXPECT_FALSE(IsMigProfile("h100"));
  EXPECT_FALSE(IsMigProfile("g.10gb"));
}

TEST(GpuRequest, FractionsAreQuartersAndWholeNumbers) {
  EXPECT_EQ(*ParseGpusPerTask(0.25, "f"), 1);
  EXPECT_EQ(*ParseGpusPerTask(0.5, "f"), 2);
  EXPECT_EQ(*ParseGpusPerTask(0.75, "f"), 3);
  EXPECT_EQ(*ParseGpusPerTask(2, "f"), 8);
  for (double bad : {0.3, 1.5, 0.0, -1.0, 0.125, 2000.0}) EXPECT_FALSE(ParseGpusPerTask(bad, "f")) << bad;
  EXPECT_EQ(ParseGpusPerTask(0.3, "gpus_per_task").error().message,
            "gpus_per_task: 0.3 GPUs per task: a fraction of one GPU must be 0.25, 0.5 or 0.75 (quarters), more "
            "than one must be a whole number (1-1024)");
  EXPECT_EQ(GpuShareText(2), "0.5");
  EXPECT_EQ(GpuShareText(8), "2");
}

TEST(GpuRequest, MemorySizes) {
  EXPECT_EQ(*ParseMemoryMib("20GiB", "m"), 20 * 1024);
  EXPECT_EQ(*ParseMemoryMib("20g", "m"), 20 * 1024);
  EXPECT_EQ(*ParseMemoryMib("512MiB", "m"), 512);
  EXPECT_EQ(*ParseMemoryMib("1048577", "m"), 2);  // bytes round up to whole MiB
  for (const char* bad : {"", "GiB", "20XB", "-1GiB", "0", "17TiB", "1.5GiB"}) {
    EXPECT_FALSE(ParseMemoryMib(bad, "m")) << bad;
  }
  EXPECT_EQ(MemoryMibText(20 * 1024), "20GiB");
  EXPECT_EQ(MemoryMibText(1536), "1536MiB");
}

TEST(GpuSpec, OldIntegerSpecsReadAndWriteAsBefore) {
  const json j = Spec({{"gpus_per_node", 4}, {"tasks_per_node", 2}});
  auto s = JobSpecFromJson(j);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->gpus_per_node, 4);
  EXPECT_EQ(s->gpu_type, "");
  EXPECT_FALSE(s->shares_gpu());
  const json out = ToJson(*s);
  for (const char* k : {"gpu_type", "gpus_per_task", "gpu_memory", "gpu_memory_enforce", "topology"}) {
    EXPECT_FALSE(out.contains(k)) << k;
  }
}

TEST(GpuSpec, TypeCountFractionMemoryAndTopologyRoundTrip) {
  auto s = JobSpecFromJson(Spec({{"gpus", "H100:4"}, {"topology", "required"}}));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->gpu_type, "h100");
  EXPECT_EQ(s->gpus_per_node, 4);
  EXPECT_EQ(s->topology, Topology::kRequired);
  EXPECT_EQ(GpuSpecText(*s), "h100:4 per node");
  auto again = JobSpecFromJson(ToJson(*s));
  ASSERT_TRUE(again);
  EXPECT_EQ(ToJson(*again), ToJson(*s));

  s = JobSpecFromJson(Spec({{"gpus_per_task", 0.5}, {"gpu_memory", "20GiB"}, {"gpu_memory_enforce", "kill"}}));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->gpu_share, 2);
  EXPECT_EQ(s->gpu_memory_mib, 20 * 1024);
  EXPECT_EQ(s->gpus_per_node, 0);
  EXPECT_EQ(GpuSpecText(*s), "0.5 GPU 20GiB per task, shared");
  again = JobSpecFromJson(ToJson(*s));
  ASSERT_TRUE(again);
  EXPECT_EQ(ToJson(*again), ToJson(*s));

  // A type before the part, as Slurm's --gpus-per-task=h100:0.5: half of an H100.
  s = JobSpecFromJson(Spec({{"gpus_per_task", "H100:0.5"}}));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->gpu_type, "h100");
  EXPECT_EQ(s->gpu_share, 2);
  EXPECT_EQ(s->gpus_per_node, 0);
  EXPECT_EQ(GpuSpecText(*s), "0.5 GPU (h100) per task, shared");
  again = JobSpecFromJson(ToJson(*s));
  ASSERT_TRUE(again);
  EXPECT_EQ(ToJson(*again), ToJson(*s));
  s = JobSpecFromJson(Spec({{"gpus_per_task", "a100:2"}, {"tasks_per_node", 2}}));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->gpu_type, "a100");
  EXPECT_EQ(s->gpus_per_node, 4);

  // A whole number per task is whole GPUs: 2 x 4 tasks.
  s = JobSpecFromJson(Spec({{"gpus_per_task", 2}, {"tasks_per_node", 4}}));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->gpus_per_node, 8);
  EXPECT_EQ(s->gpu_share, 0);
}

TEST(GpuSpec, BadInputNamesTheFieldAndTheNumbers) {
  EXPECT_EQ(ErrorOf(Spec({{"gpus_per_task", 1.5}})),
            "gpus_per_task: 1.5 GPUs per task: a fraction of one GPU must be 0.25, 0.5 or 0.75 (quarters), more "
            "than one must be a whole number (1-1024)");
  EXPECT_NE(ErrorOf(Spec({{"gpus_per_task", 0.3}})).find("0.3 GPUs per task"), std::string::npos);
  EXPECT_EQ(ErrorOf(Spec({{"gpus_per_task", 0.5}, {"gpus_per_node", 1}})),
            "gpus_per_task: a task that shares a GPU holds a part of one GPU, so gpus_per_node must be 0, got 1");
  EXPECT_EQ(ErrorOf(Spec({{"gpus", "h100:4"}, {"gpus_per_node", 2}})),
            "gpus: asks for 4 GPUs per node but gpus_per_node is 2; give one of them");
  EXPECT_EQ(ErrorOf(Spec({{"gpus", "1g.10gb:1"}, {"gpus_per_task", 0.5}})),
            "gpus_per_task: a task that shares a GPU holds a part of one GPU, so gpus_per_node must be 0, got 1");
  EXPECT_EQ(ErrorOf(Spec({{"gpu_type", "1g.10gb"}, {"gpus_per_task", 0.5}})),
            "gpu_type: MIG instance '1g.10gb' is not shared: ask for whole instances (gpus: 1g.10gb:N)");
  EXPECT_EQ(ErrorOf(Spec({{"gpu_type", "h100"}})),
            "gpu_type: 'h100' needs a count (gpus: h100:N) or a fraction (gpus_per_task)");
  EXPECT_EQ(ErrorOf(Spec({{"gpu_memory", "lots"}})),
            "gpu_memory: 'lots' must be a size such as 20GiB, 512MiB or a byte count");
  EXPECT_EQ(ErrorOf(Spec({{"gpu_memory_enforce", "warn"}})), "gpu_memory_enforce: must be 'report' or 'kill', got 'warn'");
  EXPECT_EQ(ErrorOf(Spec({{"topology", "strict"}})), "topology: must be 'preferred' or 'required', got 'strict'");
  EXPECT_EQ(ErrorOf(Spec({{"gpus", true}})), "gpus: must be [TYPE:]COUNT (e.g. \"h100:4\" or 4), got boolean");
  EXPECT_EQ(ErrorOf(Spec({{"gpu_type", "a100"}, {"gpus_per_task", "h100:0.5"}})),
            "gpus_per_task: type 'h100' differs from the type in gpus ('a100')");
  EXPECT_EQ(ErrorOf(Spec({{"gpus_per_task", "h100:0.3"}})),
            "gpus_per_task: 0.3 GPUs per task: a fraction of one GPU must be 0.25, 0.5 or 0.75 (quarters), more "
            "than one must be a whole number (1-1024)");
  EXPECT_EQ(ErrorOf(Spec({{"gpus", "1g.10gb:2"}, {"gpu_memory", "5GiB"}})),
            "gpu_memory: MIG instance '1g.10gb' is not shared: each has the profile's own memory, so ask for whole "
            "instances (gpus: 1g.10gb:N) without gpu_memory");
  EXPECT_EQ(ErrorOf(Spec({{"gpus_per_task", "1g.10gb:0.5"}})),
            "gpu_type: MIG instance '1g.10gb' is not shared: ask for whole instances (gpus: 1g.10gb:N)");
}

TEST(GpuSpec, ASharingTaskGetsItsMpsLimitsAndAMigTaskItsUuids) {
  Job job;
  job.id = 7;
  job.spec = *JobSpecFromJson(Spec({{"gpus_per_task", 0.25}}));
  NodeAllocation na;
  na.node = "n1";
  TaskPlacement t{0, 0, {3}};
  t.gpu_share = 1;
  t.gpu_memory_mib = 20 * 1024;
  auto env = TaskEnvironment(job, na, t, TaskEnvOptions{});
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "3");
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
  EXPECT_EQ(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=20480M");
  EXPECT_EQ(env["COHORT_GPU_SHARE"], "0.25");
  TaskPlacement mig{0, 0, {1, 2}};
  mig.devices = {"MIG-aaaa", "MIG-bbbb"};
  env = TaskEnvironment(job, na, mig, TaskEnvOptions{});
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "MIG-aaaa,MIG-bbbb");
  EXPECT_FALSE(env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
}

}  // namespace
}  // namespace cohort::api
