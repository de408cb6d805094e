#include "agent/gpu/gpu.h"

#include <dlfcn.h>

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

}  // namespace
}  // namespace cohort::agent
