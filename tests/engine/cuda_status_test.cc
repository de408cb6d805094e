// common/cuda_status.h on any machine: CudaDeviceCount() returns a positive count with a
// usable GPU and, without one (no device, no driver), kUnavailable naming "no CUDA device"
// and the runtime's reason, never crashing; COHORT_CUDA_CHECK records file:line and the
// call, evaluates its argument once and classifies the status (out of memory is
// kResourceExhausted, which the edges map to HTTP 429 and exit code 1). Label `engine`
// only: this test runs on every machine, GPU or not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/cuda_status.h"

namespace cohort {
namespace {

using ::testing::MatchesRegex;

TEST(CudaStatusTest, DeviceCountIsPositiveOrExplainsWhyNot) {
  auto count = CudaDeviceCount();
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
  auto a = CudaDeviceCount();
  auto b = CudaDeviceCount();
  ASSERT_EQ(a.has_value(), b.has_value());
  if (a) {
    EXPECT_EQ(*a, *b);
  } else {
    EXPECT_EQ(a.error().message, b.error().message);
  }
}

// Stand-ins for runtime calls: they return `status` and count their calls.
int g_calls = 0;
cudaError_t FakeCall(cudaError_t status) {
  ++g_calls;
  return status;
}

int g_check_line = 0;  // the line of the check below
Result<int> CheckedFake(cudaError_t status) {
  g_check_line = __LINE__ + 1;
  COHORT_CUDA_CHECK(FakeCall(status));
  return 7;
}

TEST(CudaStatusTest, CheckPassesSuccessThroughAndEvaluatesOnce) {
  g_calls = 0;
  auto r = CheckedFake(cudaSuccess);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(g_calls, 1);
  g_calls = 0;
  EXPECT_FALSE(CheckedFake(cudaErrorInvalidValue).has_value());
  EXPECT_EQ(g_calls, 1);
}

TEST(CudaStatusTest, CheckRecordsFileLineCallAndError) {
  auto r = CheckedFake(cudaErrorInvalidValue);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message,
              MatchesRegex("cuda_status_test\\.cc:[0-9]+: FakeCall failed: .+ "
                           "\\(cudaErrorInvalidValue\\)"));
  EXPECT_THAT(r.error().message,
              ::testing::StartsWith("cuda_status_test.cc:" + std::to_string(g_check_line) + ":"));
}

TEST(CudaStatusTest, OutOfMemoryIsResourceExhausted) {
  auto r = CheckedFake(cudaErrorMemoryAllocation);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(r.error().message, ::testing::HasSubstr("(cudaErrorMemoryAllocation)"));
  // The edges: its own wire name, HTTP 429, a plain failure exit code.
  EXPECT_EQ(ErrorCodeName(ErrorCode::kResourceExhausted), "resource_exhausted");
  EXPECT_EQ(ErrorCodeFromName("resource_exhausted"), ErrorCode::kResourceExhausted);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kResourceExhausted), 429);
  EXPECT_EQ(ExitCodeFor(r.error()), 1);
}

TEST(CudaStatusTest, ClassifiesStatuses) {
  EXPECT_EQ(CudaErrorCode(cudaErrorMemoryAllocation), ErrorCode::kResourceExhausted);
  EXPECT_EQ(CudaErrorCode(cudaErrorNoDevice), ErrorCode::kUnavailable);
  EXPECT_EQ(CudaErrorCode(cudaErrorInsufficientDriver), ErrorCode::kUnavailable);
  EXPECT_EQ(CudaErrorCode(cudaErrorDevicesUnavailable), ErrorCode::kUnavailable);
  EXPECT_EQ(CudaErrorCode(cudaErrorInitializationError), ErrorCode::kUnavailable);
  EXPECT_EQ(CudaErrorCode(cudaErrorInvalidValue), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CudaErrorCode(cudaErrorInvalidDevice), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CudaErrorCode(cudaErrorInvalidDevicePointer), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CudaErrorCode(cudaErrorLaunchFailure), ErrorCode::kInternal);
  EXPECT_EQ(CudaErrorCode(cudaErrorIllegalAddress), ErrorCode::kInternal);
}

TEST(CudaStatusTest, NamesCallsAndFiles) {
  EXPECT_EQ(CallName("cudaMalloc(&p, n)"), "cudaMalloc");
  EXPECT_EQ(CallName("ncclGroupEnd ()"), "ncclGroupEnd");
  EXPECT_EQ(CallName("plain"), "plain");
  EXPECT_EQ(FileName("/a/b/c.cc"), "c.cc");
  EXPECT_EQ(FileName("c.cc"), "c.cc");
  EXPECT_EQ(FileName(nullptr), "");
  const Error e = CudaError(cudaErrorLaunchFailure, "k<<<1, 1>>>(x)", "src/x/y.cc", 9);
  EXPECT_EQ(e.code, ErrorCode::kInternal);
  EXPECT_THAT(e.message, ::testing::StartsWith("y.cc:9: k<<<1, 1>>> failed: "));
}

}  // namespace
}  // namespace cohort
