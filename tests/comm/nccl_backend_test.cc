// The nccl backend on a machine without a GPU (and without CUDA in the build): creation
// fails cleanly with kUnavailable, "nccl" is not offered, and — when built with CUDA and
// NCCL — the check macros as the backend uses them (COHORT_CUDA_CHECK from
// common/cuda_status.h, COHORT_NCCL_CHECK), the unique-id codec and the type mapping,
// none of which need a device.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "device_buffer.h"

#if COHORT_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/nccl/nccl_communicator.h"
#include "comm/nccl/nccl_errors.h"
#include "comm/nccl/nccl_reduce.h"
#include "comm/nccl/nccl_store.h"
#endif

namespace cohort::comm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(NcclAvailability, CreateIsUnavailableWithoutDevice) {
  if (commtest::CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  CommOptions o;
  o.backend = "nccl";
  auto c = CreateCommunicator(o);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kUnavailable) << c.error().ToString();
#if COHORT_HAVE_NCCL
  EXPECT_THAT(c.error().message, StartsWith("no CUDA device: "));
#else
  EXPECT_THAT(c.error().message, HasSubstr("built without CUDA/NCCL"));
#endif
}

TEST(NcclAvailability, OfferedOnlyWithDevice) {
  const auto backends = AvailableBackends();
  EXPECT_THAT(backends, ::testing::Contains("gloo"));
  if (commtest::CudaDeviceCount() > 0) {
#if COHORT_HAVE_NCCL
    EXPECT_THAT(backends, ::testing::Contains("nccl"));
#endif
  } else {
    EXPECT_THAT(backends, Not(::testing::Contains("nccl")));
    CommOptions o;
    o.backend = "mpi";
    auto c = CreateCommunicator(o);
    ASSERT_FALSE(c.has_value());
    EXPECT_THAT(c.error().message, HasSubstr("(available: gloo, shm; auto picks"));
  }
}

#if COHORT_HAVE_NCCL

using nccl_backend::NcclError;

cudaError_t FakeMalloc(void** p, size_t n) { return cudaErrorMemoryAllocation; }

Result<void> AllocateWithFake() {
  void* p = nullptr;
  COHORT_CUDA_CHECK(FakeMalloc(&p, 1 << 20));
  return {};
}

Result<void> InitWithFake() {
  COHORT_NCCL_CHECK(ncclInvalidUsage);
  return {};
}

TEST(NcclCheck, CudaFailureNamesFileLineCallAndError) {
  auto r = AllocateWithFake();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(r.error().message, ::testing::MatchesRegex(
      "nccl_backend_test\\.cc:[0-9]+: FakeMalloc failed: out of memory \\(cudaErrorMemoryAllocation\\)"));
}

TEST(NcclCheck, NcclFailureNamesFileLineAndError) {
  auto r = InitWithFake();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message, StartsWith("nccl_backend_test.cc:"));
  EXPECT_THAT(r.error().message, HasSubstr("invalid usage"));
}

TEST(NcclCheck, RealCudaCallWithoutDeviceIsAnError) {
  if (commtest::CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto alloc = []() -> Result<void> {
    void* p = nullptr;
    COHORT_CUDA_CHECK(cudaMalloc(&p, 16));
    return {};
  };
  auto r = alloc();
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, HasSubstr(": cudaMalloc failed: "));
  auto count = CudaDeviceCount();
  ASSERT_FALSE(count.has_value());
  EXPECT_EQ(count.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(count.error().message, StartsWith("no CUDA device: "));
}

TEST(NcclCheck, Codes) {
  EXPECT_EQ(NcclError(ncclInvalidArgument, "ncclAllReduce(...)", "y.cc", 9).code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(NcclError(ncclRemoteError, "ncclAllReduce(...)", "y.cc", 9).code,
            ErrorCode::kUnavailable);
  EXPECT_EQ(NcclError(ncclInternalError, "ncclAllReduce(...)", "y.cc", 9).code,
            ErrorCode::kInternal);
}

TEST(NcclUniqueId, HexRoundTrip) {
  ncclUniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i) id.internal[i] = static_cast<char>(i * 37 + 5);
  const std::string hex = nccl_backend::EncodeUniqueId(id);
  EXPECT_EQ(hex.size(), 2 * sizeof(id.internal));
  auto back = nccl_backend::DecodeUniqueId(hex);
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(std::string(back->internal, sizeof(back->internal)),
            std::string(id.internal, sizeof(id.internal)));
  EXPECT_FALSE(nccl_backend::DecodeUniqueId("abc").has_value());
  std::string bad = hex;
  bad[10] = 'g';
  auto e = nccl_backend::DecodeUniqueId(bad);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, ErrorCode::kInvalidArgument);
}

TEST(NcclReduce, TypeAndOpMapping) {
  using nccl_backend::ToNccl;
  EXPECT_EQ(ToNccl(DataType::kFloat32), ncclFloat32);
  EXPECT_EQ(ToNccl(DataType::kBFloat16), ncclBfloat16);
  EXPECT_EQ(ToNccl(DataType::kFloat16), ncclFloat16);
  EXPECT_EQ(ToNccl(DataType::kInt32), ncclInt32);
  EXPECT_EQ(ToNccl(DataType::kInt64), ncclInt64);
  EXPECT_EQ(ToNccl(ReduceOp::kSum), ncclSum);
  EXPECT_EQ(ToNccl(ReduceOp::kAvg), ncclAvg);
  EXPECT_EQ(ToNccl(ReduceOp::kMax), ncclMax);
  EXPECT_EQ(ToNccl(ReduceOp::kMin), ncclMin);
}

#endif  // COHORT_HAVE_NCCL

}  // namespace
}  // namespace cohort::comm
