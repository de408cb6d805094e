// DeviceCount() (engine/kernels/cuda/status.h) on any machine: with a usable GPU it returns
// a positive count; without one (no device, no driver) it returns kUnavailable naming
// "no CUDA device" and the runtime's reason, and never crashes. Label `engine` only: this
// test runs on every machine, GPU or not.
#include <gtest/gtest.h>

#include <string>

#include "engine/kernels/cuda/status.h"

namespace cohort::engine::cuda {
namespace {

TEST(CudaStatusTest, DeviceCountIsPositiveOrExplainsWhyNot) {
  auto count = DeviceCount();
  if (count) {
    EXPECT_GT(*count, 0);
    return;
  }
  EXPECT_EQ(count.error().code, ErrorCode::kUnavailable) << count.error().ToString();
  EXPECT_NE(count.error().message.find("no CUDA device"), std::string::npos)
      << count.error().ToString();
  // The runtime's own explanation follows the prefix.
  EXPECT_GT(count.error().message.size(), std::string("no CUDA device: ").size());
}

TEST(CudaStatusTest, DeviceCountIsStable) {
  auto a = DeviceCount();
  auto b = DeviceCount();
  ASSERT_EQ(a.has_value(), b.has_value());
  if (a) {
    EXPECT_EQ(*a, *b);
  } else {
    EXPECT_EQ(a.error().message, b.error().message);
  }
}

TEST(CudaStatusTest, CheckCudaNamesTheError) {
  EXPECT_TRUE(CheckCuda(cudaSuccess, "nothing").has_value());
  auto r = CheckCuda(cudaErrorInvalidValue, "launching something");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInternal);
  EXPECT_NE(r.error().message.find("launching something"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("cudaErrorInvalidValue"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace cohort::engine::cuda
