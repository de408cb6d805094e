// train.device: the values it takes, the error that names a wrong one, and the comm
// backend it implies (nccl for cuda, gloo for cpu) or refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/document.h"
#include "engine/trainer/config.h"
#include "engine/trainer/device_peak.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

using ::testing::HasSubstr;

Result<TrainConfig> FromYaml(const std::string& yaml) {
  auto doc = YamlToJson(yaml, "train.yaml");
  if (!doc) return std::unexpected(doc.error());
  return TrainConfigFromJson(*doc, "/base");
}

TEST(TrainDeviceConfigTest, DefaultsToCpuWithTheHostBackendPicked) {
  auto c = FromYaml("data: {text: corpus.txt}\ntrain: {steps: 5}\n");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->device, "cpu");
  EXPECT_EQ(c->backend, "auto");
  for (const char* b : {"gloo", "shm"}) {
    auto forced = FromYaml(std::string("data: {text: corpus.txt}\ntrain: {steps: 5}\ncomm: {backend: ") + b + "}\n");
    ASSERT_TRUE(forced.has_value()) << forced.error().message;
    EXPECT_EQ(forced->backend, b);
  }
  auto unknown = FromYaml("data: {text: corpus.txt}\ntrain: {steps: 5}\ncomm: {backend: mpi}\n");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_THAT(unknown.error().message,
              HasSubstr("comm.backend: must be auto, shm, gloo or nccl, got 'mpi'"));
}

TEST(TrainDeviceConfigTest, CudaDefaultsToNccl) {
  auto c = FromYaml("data: {text: corpus.txt}\ntrain: {steps: 5, device: cuda}\n");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->device, "cuda");
  EXPECT_EQ(c->backend, "nccl");
  auto explicit_nccl = FromYaml(
      "data: {text: corpus.txt}\ntrain: {steps: 5, device: cuda}\ncomm: {backend: nccl}\n");
  ASSERT_TRUE(explicit_nccl.has_value()) << explicit_nccl.error().message;
  EXPECT_EQ(explicit_nccl->backend, "nccl");
}

TEST(TrainDeviceConfigTest, UnknownDeviceIsNamed) {
  auto c = FromYaml("data: {text: corpus.txt}\ntrain: {steps: 5, device: gpu}\n");
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(c.error().message, "train.device: must be 'cpu' or 'cuda', got 'gpu'");
  auto n = FromYaml("data: {text: corpus.txt}\ntrain: {steps: 5, device: 3}\n");
  ASSERT_FALSE(n.has_value());
  EXPECT_THAT(n.error().message, HasSubstr("device"));
}

TEST(TrainDeviceConfigTest, BackendMustReachTheGradients) {
  auto gloo_on_gpu = FromYaml(
      "data: {text: corpus.txt}\ntrain: {steps: 5, device: cuda}\ncomm: {backend: gloo}\n");
  ASSERT_FALSE(gloo_on_gpu.has_value());
  EXPECT_THAT(gloo_on_gpu.error().message,
              HasSubstr("comm.backend: must be nccl when train.device is cuda"));
  EXPECT_THAT(gloo_on_gpu.error().message, HasSubstr("'gloo'"));

  auto nccl_on_cpu = FromYaml("data: {text: corpus.txt}\ntrain: {steps: 5}\ncomm: {backend: nccl}\n");
  ASSERT_FALSE(nccl_on_cpu.has_value());
  EXPECT_THAT(nccl_on_cpu.error().message, HasSubstr("comm.backend: nccl reduces GPU memory"));

  // The same check for a config built in code.
  TrainConfig c;
  c.device = "cuda";
  c.backend = "gloo";
  EXPECT_FALSE(CheckDeviceBackend(c).has_value());
  c.backend = "nccl";
  EXPECT_TRUE(CheckDeviceBackend(c).has_value());
}

// MFU's denominator on the GPUs this project measures on: dense bf16 (half the data sheets'
// "with sparsity" figures), the specific part before the general one.
TEST(TrainDeviceConfigTest, HopperPeaks) {
  const std::pair<const char*, double> cases[] = {
      {"NVIDIA H100 80GB HBM3", 989.4e12}, {"NVIDIA H100 PCIe", 756.5e12},
      {"NVIDIA H100 NVL", 835.5e12},       {"NVIDIA H200", 989.4e12},
      {"NVIDIA H200 NVL", 835.5e12},       {"NVIDIA GH200 480GB", 989.4e12},
  };
  for (const auto& [name, flops] : cases) {
    auto peak = GpuPeakBf16(name);
    ASSERT_TRUE(peak.has_value()) << name;
    EXPECT_DOUBLE_EQ(peak->flops, flops) << name;
    EXPECT_EQ(peak->device, name);
  }
  EXPECT_FALSE(GpuPeakBf16("Some Future Accelerator").has_value());
}

// Whatever this build and machine have, asking for a GPU either works or says exactly why
// not, with the code the CLI turns into a non-zero exit.
TEST(TrainDeviceConfigTest, SelectCudaDeviceSaysWhy) {
  auto choice = SelectCudaDevice(0);
  if (!CudaTrainingBuilt()) {
    ASSERT_FALSE(choice.has_value());
    EXPECT_EQ(choice.error().code, ErrorCode::kUnsatisfiable);
    EXPECT_EQ(choice.error().message, "train.device is cuda but this build has no CUDA support");
    return;
  }
  if (!choice) {
    EXPECT_EQ(choice.error().code, ErrorCode::kUnavailable);
    EXPECT_THAT(choice.error().message,
                HasSubstr("train.device is cuda but no CUDA device is usable: "));
    // The reason follows the colon and is not empty.
    EXPECT_GT(choice.error().message.size(),
              std::string("train.device is cuda but no CUDA device is usable: ").size());
    return;
  }
  EXPECT_EQ(choice->device, 0);
  EXPECT_GE(choice->visible, 1);
  EXPECT_FALSE(choice->name.empty());
  EXPECT_GT(choice->memory, 0u);
  // A local rank beyond the GPUs this process sees is refused when it sees several.
  if (choice->visible > 1) {
    auto beyond = SelectCudaDevice(choice->visible);
    ASSERT_FALSE(beyond.has_value());
    EXPECT_THAT(beyond.error().message, HasSubstr("LOCAL_RANK"));
  }
}

}  // namespace
}  // namespace cohort::engine
