#include "agent/gpu/gpu.h"
#include "agent/gpu/sharing.h"

#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

const std::regex kUuidPattern("^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$");

TEST(SimulatedGpusTest, ShapeAndDeterministicDistinctUuids) {
  auto a = SimulatedGpus(8, "node-a");
  ASSERT_EQ(a.size(), 8u);
  std::set<std::string> uuids;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(a[i].index, i);
    EXPECT_EQ(a[i].name, "Cohort Simulated GPU 80GB");
    EXPECT_EQ(a[i].memory_bytes, int64_t{80} * 1024 * 1024 * 1024);
    EXPECT_TRUE(a[i].simulated);
    EXPECT_TRUE(std::regex_match(a[i].uuid, kUuidPattern)) << a[i].uuid;
    uuids.insert(a[i].uuid);
  }
  EXPECT_EQ(uuids.size(), 8u);

  auto again = SimulatedGpus(8, "node-a");
  for (int i = 0; i < 8; ++i) EXPECT_EQ(again[i].uuid, a[i].uuid);
  auto b = SimulatedGpus(8, "node-b");
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(uuids.contains(b[i].uuid)) << b[i].uuid;
  // A prefix of a larger set is the same GPUs.
  auto fewer = SimulatedGpus(2, "node-a");
  EXPECT_EQ(fewer[1].uuid, a[1].uuid);
  EXPECT_TRUE(SimulatedGpus(0, "node-a").empty());
}

TEST(NvmlGpusTest, UnavailableWithoutDriverOrValidWithOne) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  auto gpus = DiscoverNvmlGpus();
  if (!lib) {
    ASSERT_FALSE(gpus);
    EXPECT_EQ(gpus.error().code, ErrorCode::kUnavailable);
    EXPECT_NE(gpus.error().message.find("libnvidia-ml.so.1"), std::string::npos)
        << gpus.error().message;
    return;
  }
  // A library is present: either the driver answers, or it says it is unavailable.
  if (!gpus) {
    EXPECT_EQ(gpus.error().code, ErrorCode::kUnavailable) << gpus.error().ToString();
    return;
  }
  for (size_t i = 0; i < gpus->size(); ++i) {
    const GpuInfo& g = (*gpus)[i];
    EXPECT_EQ(g.index, static_cast<int>(i));
    EXPECT_FALSE(g.name.empty());
    EXPECT_TRUE(g.uuid.starts_with("GPU-") || g.uuid.starts_with("MIG-")) << g.uuid;
    EXPECT_GT(g.memory_bytes, 0);
    EXPECT_FALSE(g.simulated);
    std::printf("NVML GPU %d: %s %s %lld bytes\n", g.index, g.name.c_str(), g.uuid.c_str(),
                static_cast<long long>(g.memory_bytes));
  }
  // Repeated discovery gives the same answer (init/shutdown per call).
  auto again = DiscoverNvmlGpus();
  ASSERT_TRUE(again);
  ASSERT_EQ(again->size(), gpus->size());
  for (size_t i = 0; i < gpus->size(); ++i) EXPECT_EQ((*again)[i].uuid, (*gpus)[i].uuid);
}

TEST(SimulatedGpusTest, LayoutPresentsModelIslandsSwitchesAndMigInstances) {
  SimulatedLayout layout;
  layout.model = "NVIDIA H100 80GB HBM3";
  layout.nvlink_island = 4;
  layout.pcie_switch = 2;
  auto mig = ParseSimulatedMig("1g.10gb:3,3g.40gb:1");
  ASSERT_TRUE(mig) << mig.error().message;
  layout.mig = *mig;
  auto gpus = SimulatedGpus(8, "node-a", layout);
  // GPU 0 becomes 4 instances (indices 0-3); GPUs 1-7 follow at 4-10.
  ASSERT_EQ(gpus.size(), 11u);
  EXPECT_EQ(gpus[0].mig_profile, "1g.10gb");
  EXPECT_EQ(gpus[0].mig_parent, 0);
  EXPECT_EQ(gpus[0].memory_bytes, int64_t{10} << 30);
  EXPECT_EQ(gpus[0].uuid.substr(0, 4), "MIG-");
  EXPECT_EQ(gpus[3].mig_profile, "3g.40gb");
  EXPECT_EQ(gpus[4].index, 4);
  EXPECT_EQ(gpus[4].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpus[4].nvlink_island, 0);  // physical GPU 1
  EXPECT_EQ(gpus[4].pcie_switch, 0);
  EXPECT_EQ(gpus[7].nvlink_island, 1);  // physical GPU 4
  EXPECT_EQ(gpus[7].pcie_switch, 2);
  EXPECT_FALSE(ParseSimulatedMig("7g.80gb:2"));  // 160 GiB of an 80 GiB GPU
  EXPECT_FALSE(ParseSimulatedMig("h100:1"));
  EXPECT_FALSE(ParseSimulatedMig("1g.10gb"));
}

// A simulated model has the memory its name states, as the real one would: gpu_memory
// requests, shares and the over-share check are measured against it.
TEST(SimulatedGpusTest, AModelHasTheMemoryItsNameStates) {
  SimulatedLayout layout;
  layout.model = "NVIDIA A100-SXM4-40GB";
  EXPECT_EQ(SimulatedGpus(1, "n", layout)[0].memory_bytes, int64_t{40} << 30);
  layout.model = "NVIDIA H100 80GB HBM3";
  EXPECT_EQ(SimulatedGpus(1, "n", layout)[0].memory_bytes, int64_t{80} << 30);
  layout.model = "NVIDIA H200 141GB HBM3e";
  EXPECT_EQ(SimulatedGpus(1, "n", layout)[0].memory_bytes, int64_t{141} << 30);
  layout.model = "NVIDIA L40S";  // no memory in the name: the default
  EXPECT_EQ(SimulatedGpus(1, "n", layout)[0].memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(SimulatedGpus(1, "n")[0].memory_bytes, int64_t{80} << 30);
}

TEST(GpuSharingTest, SimulatedGpusAreTimeSlicedAndRecordTheLimitsEachTaskGot) {
  GpuSharing sharing(SimulatedGpus(2, "n1"), ::testing::TempDir(), "/bin/true");
  EXPECT_EQ(sharing.mode(), "time-slicing");  // MPS needs real GPUs
  std::map<std::string, std::string> env = {{"COHORT_GPU_SHARE", "0.5"},
                                            {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"},
                                            {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=40960M"}};
  ASSERT_TRUE(sharing.Prepare("7.0.0", 1, env));
  EXPECT_EQ(env.at("COHORT_GPU_SHARING"), "time-slicing");
  EXPECT_FALSE(env.contains("CUDA_MPS_PIPE_DIRECTORY"));
  std::map<std::string, std::string> whole = {{"CUDA_VISIBLE_DEVICES", "0"}};
  ASSERT_TRUE(sharing.Prepare("8.0.0", 0, whole));  // not a sharing task: untouched
  EXPECT_FALSE(whole.contains("COHORT_GPU_SHARING"));
  ASSERT_EQ(sharing.records().size(), 1u);
  EXPECT_EQ(sharing.records()[0].task, "7.0.0");
  EXPECT_EQ(sharing.records()[0].gpu, 1);
  EXPECT_EQ(sharing.records()[0].thread_percentage, "50");
  EXPECT_EQ(sharing.records()[0].memory_limit, "0=40960M");
}

TEST(GpuSharingTest, RealGpusWithTheControlBinaryUseMpsWithADaemonPerGpu) {
  // A stand-in control binary that records its calls: the daemon's start and its quit.
  const std::string dir = ::testing::TempDir() + "/mps-fake";
  std::filesystem::create_directories(dir);
  const std::string bin = dir + "/mps-control";
  const std::string calls = dir + "/calls";
  std::filesystem::remove(calls);
  {
    std::ofstream f(bin);
    f << "#!/bin/sh\nif [ \"$1\" = -d ]; then echo \"start $CUDA_VISIBLE_DEVICES\" >> " << calls
      << "; else read cmd; echo \"$cmd $CUDA_MPS_PIPE_DIRECTORY\" >> " << calls << "; fi\n";
  }
  std::filesystem::permissions(bin, std::filesystem::perms::owner_all);
  std::vector<GpuInfo> gpus = SimulatedGpus(2, "n1");
  for (GpuInfo& g : gpus) g.simulated = false;
  {
    GpuSharing sharing(gpus, dir, bin);
    ASSERT_EQ(sharing.mode(), "mps");
    for (const char* task : {"1.0.0", "2.0.0"}) {
      std::map<std::string, std::string> env = {{"COHORT_GPU_SHARE", "0.5"}};
      ASSERT_TRUE(sharing.Prepare(task, 1, env));
      EXPECT_EQ(env.at("COHORT_GPU_SHARING"), "mps");
      EXPECT_EQ(env.at("CUDA_MPS_PIPE_DIRECTORY"), dir + "/mps/gpu1/pipe");
    }
    sharing.Reconcile({1});  // still shared: the daemon stays
    sharing.Reconcile({});   // no sharing task left: it quits
  }
  std::ifstream in(calls);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "start " + gpus[1].uuid + "\nquit " + dir + "/mps/gpu1/pipe\n");
}

}  // namespace
}  // namespace cohort::agent
