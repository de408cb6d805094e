// NVML discovery (MIG instances, NVLink islands, PCIe switches) and per-process memory,
// against the table-driven fake libnvidia-ml (fake_nvml.cc) loaded through
// COHORT_NVML_LIBRARY, the override production code honours; and, labelled gpu, the real
// driver's discovery on a GPU machine (skips without one).
#include <unistd.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include "agent/gpu/gpu.h"
#include "agent/gpu/task_memory.h"
#include "agent/proc_usage.h"

namespace cohort::agent {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

#ifdef COHORT_FAKE_NVML
TEST(FakeNvmlTest, MigInstancesTopologyAndProcessMemory) {
  // NVML is loaded once per process: this binary holds only the fake's tests.
  ASSERT_EQ(setenv("COHORT_NVML_LIBRARY", COHORT_FAKE_NVML, 1), 0);
  auto gpus = DiscoverNvmlGpus();
  ASSERT_TRUE(gpus) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 6u);
  const auto& g = *gpus;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i].index, static_cast<int>(i));
  // NVML GPU 0 in MIG mode: its two instances (the empty slot skipped) replace it.
  EXPECT_EQ(g[0].uuid, "MIG-fake-0-0");
  EXPECT_EQ(g[0].mig_profile, "1g.10gb");  // from its name
  EXPECT_EQ(g[0].mig_parent, 0);
  EXPECT_EQ(g[0].memory_bytes, 10 * kGiB);
  EXPECT_EQ(g[1].uuid, "MIG-fake-0-2");
  EXPECT_EQ(g[1].mig_profile, "3g.40gb");  // from its attributes
  EXPECT_EQ(g[1].mig_parent, 0);
  // Whole GPUs 1-4 at node indices 2-5 with their islands and switches.
  EXPECT_EQ(g[2].uuid, "GPU-fake-1");
  EXPECT_EQ(g[2].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g[2].mig_parent, -1);
  EXPECT_EQ(g[2].mig_profile, "");
  EXPECT_EQ(g[2].nvlink_island, 0);  // direct link to GPU 2
  EXPECT_EQ(g[3].nvlink_island, 0);
  EXPECT_EQ(g[4].nvlink_island, 1);  // through the NVSwitch
  EXPECT_EQ(g[5].nvlink_island, 1);
  EXPECT_EQ(g[2].pcie_switch, 1);    // GPU 0 (MIG) is switch 0, alone
  EXPECT_EQ(g[3].pcie_switch, 1);
  EXPECT_EQ(g[4].pcie_switch, 2);
  EXPECT_EQ(g[5].pcie_switch, 2);

  // The monitor samples the same devices in the same order, and reports the processes by
  // node index; this process's memory maps to it as a task root.
  auto mon = OpenNvmlGpuMonitor();
  ASSERT_TRUE(mon) << mon.error().message;
  auto readings = (*mon)->Sample({}, SteadyTime{});
  ASSERT_EQ(readings.size(), 6u);
  EXPECT_EQ(*readings[0].memory_total_bytes, 10 * kGiB);
  EXPECT_FALSE(readings[2].utilization.has_value()) << "the fake has no utilization query";
  auto procs = (*mon)->Processes();
  ASSERT_EQ(procs.size(), 3u);
  EXPECT_EQ(procs[0].gpu, 0);
  EXPECT_EQ(procs[0].pid, getpid());
  EXPECT_EQ(procs[0].memory_bytes, 2 * kGiB);
  EXPECT_EQ(procs[1].gpu, 2);
  EXPECT_EQ(procs[1].memory_bytes, 5 * kGiB);
  // This process as a task's root (its session id may be 0 in a container, naming none).
  const auto task_of = ReadTaskProcesses(ShimRoots({getpid()})).task_of;
  const GpuMemoryLimit share{4 * kGiB, /*kill=*/false};
  TaskGpuMemory m = MeasureTaskGpuMemory(0, getpid(), {2}, share, procs, task_of);
  EXPECT_EQ(m.bytes, 7 * kGiB) << "5 GiB on GPU 2 and 2 GiB on the MIG instance; the stranger's is not ours";
  EXPECT_EQ(m.over, "task 0 used 5 GiB of GPU 2, over its share of 4 GiB (gpu_memory_enforce: report)");
}
#endif

#ifdef COHORT_NVML_GPU_TEST
// On a machine with an NVIDIA driver: the real discovery, consistent with itself.
TEST(RealNvmlTest, DiscoversThisMachinesGpus) {
  auto gpus = DiscoverNvmlGpus();
  if (!gpus) GTEST_SKIP() << "no NVIDIA driver here: " << gpus.error().message;
  if (gpus->empty()) GTEST_SKIP() << "the driver sees no GPU";
  for (size_t i = 0; i < gpus->size(); ++i) {
    const GpuInfo& g = (*gpus)[i];
    EXPECT_EQ(g.index, static_cast<int>(i));
    EXPECT_GT(g.memory_bytes, 0) << g.name;
    EXPECT_FALSE(g.name.empty());
    if (g.mig_parent >= 0) {
      EXPECT_EQ(g.uuid.rfind("MIG-", 0), 0u) << g.uuid;
      EXPECT_FALSE(g.mig_profile.empty()) << g.name;
    } else {
      EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    }
    std::printf("GPU %zu: %s %s %.1f GiB mig %s/%d island %d switch %d\n", i, g.name.c_str(), g.uuid.c_str(),
                static_cast<double>(g.memory_bytes) / double(kGiB), g.mig_profile.c_str(), g.mig_parent,
                g.nvlink_island, g.pcie_switch);
  }
  auto mon = OpenNvmlGpuMonitor();
  ASSERT_TRUE(mon) << mon.error().message;
  EXPECT_EQ((*mon)->Sample({}, SteadyTime{}).size(), gpus->size());
  for (const GpuProcess& p : (*mon)->Processes()) {
    EXPECT_GE(p.gpu, 0);
    EXPECT_LT(p.gpu, static_cast<int>(gpus->size()));
    EXPECT_GT(p.pid, 0);
  }
}
#endif

}  // namespace
}  // namespace cohort::agent
