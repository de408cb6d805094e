// The emulator's own tests: each hazard it exists to catch is injected into a tiny kernel
// (selftest_kernels.cu) and must be reported (a counter in emu::g_stats and its message, or
// a death with the emulator's or AddressSanitizer's report); a correct kernel must compute
// the right numbers with every counter at zero, from one host thread and from two at once.
// Not linked with emu_check.cc: the counters are expected to move here, and each test zeroes
// them before and after.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>
#include <thread>
#include <vector>

#include "emu.h"
#include "selftest_kernels.h"

namespace emu_selftest {
namespace {

using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;

// n floats of emulated device memory, uploaded from / downloaded to host vectors.
class Buffer {
 public:
  explicit Buffer(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(float)) != cudaSuccess) p_ = nullptr;
  }
  explicit Buffer(const std::vector<float>& v) : Buffer(v.size()) {
    cudaMemcpy(p_, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~Buffer() { cudaFree(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* data() const { return p_; }
  std::vector<float> Download() const {
    std::vector<float> v(n_);
    cudaMemcpy(v.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost);
    return v;
  }

 private:
  size_t n_;
  float* p_ = nullptr;
};

std::vector<float> Iota(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 7) - 3.0f;
  return v;
}

class EmuSelfTest : public ::testing::Test {
 protected:
  void SetUp() override { emu::g_stats.Reset(); }
  void TearDown() override { emu::g_stats.Reset(); }

  static void ExpectNoHazards() {
    const emu::Stats& s = emu::g_stats;
    EXPECT_EQ(s.races.load(), 0);
    EXPECT_EQ(s.pending_access.load(), 0);
    EXPECT_EQ(s.poison_reads.load(), 0);
    EXPECT_EQ(s.misaligned.load(), 0);
    EXPECT_EQ(s.oob.load(), 0);
    EXPECT_EQ(s.leftover_async.load(), 0);
  }
};

// The hazards that abort (the emulator's own checks, AddressSanitizer's reports) run in a
// re-executed child: the process has threads besides main, which fork() alone would not copy.
class EmuSelfDeathTest : public EmuSelfTest {
 protected:
  void SetUp() override {
    EmuSelfTest::SetUp();
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

// BlockSum over n elements (several blocks of three warps, the last one partial), checked
// against the host.
void CheckBlockSum(int n) {
  const std::vector<float> in = Iota(static_cast<size_t>(n));
  const int blocks = (n + 95) / 96;
  Buffer d_in(in), d_out(static_cast<size_t>(blocks));
  BlockSum(d_out.data(), d_in.data(), n, nullptr);
  const std::vector<float> got = d_out.Download();
  for (int b = 0; b < blocks; ++b) {
    float want = 0.0f;
    for (int i = 96 * b; i < n && i < 96 * (b + 1); ++i) want += in[i];
    EXPECT_EQ(got[b], want) << "block " << b << " of n=" << n;
  }
}

TEST_F(EmuSelfTest, CorrectKernelComputesAndReportsNothing) {
  CheckBlockSum(1000);  // 11 blocks, the last with 40 elements
  CheckBlockSum(96);
  CheckBlockSum(1);
  ExpectNoHazards();
}

TEST_F(EmuSelfTest, LaunchesFromTwoHostThreadsRunSideBySide) {
  std::thread a([] { for (int i = 0; i < 3; ++i) CheckBlockSum(2000 + i); });
  std::thread b([] { for (int i = 0; i < 3; ++i) CheckBlockSum(777 + i); });
  a.join();
  b.join();
  ExpectNoHazards();
}

TEST_F(EmuSelfTest, ReadAfterWriteWithoutBarrierIsARace) {
  Buffer out(64);
  CaptureStderr();
  MissingBarrierRaw(out.data());
  const std::string err = GetCapturedStderr();
  EXPECT_GT(emu::g_stats.races.load(), 0);
  EXPECT_NE(err.find("RAW race"), std::string::npos) << err;
}

TEST_F(EmuSelfTest, WriteAfterReadWithoutBarrierIsARace) {
  Buffer out(64);
  CaptureStderr();
  MissingBarrierWar(out.data());
  const std::string err = GetCapturedStderr();
  EXPECT_GT(emu::g_stats.races.load(), 0);
  EXPECT_NE(err.find("WAR race"), std::string::npos) << err;
}

TEST_F(EmuSelfTest, TwoThreadsWritingOneWordIsARace) {
  Buffer out(64);
  CaptureStderr();
  SameWordWrite(out.data());
  const std::string err = GetCapturedStderr();
  EXPECT_GT(emu::g_stats.races.load(), 0);
  EXPECT_NE(err.find("WAW race"), std::string::npos) << err;
}

TEST_F(EmuSelfTest, ReadOfUnwrittenSharedMemoryIsReported) {
  Buffer out(64);
  CaptureStderr();
  UnwrittenRead(out.data());
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(emu::g_stats.poison_reads.load(), 32);
  EXPECT_EQ(emu::g_stats.races.load(), 0);
  EXPECT_NE(err.find("never-written shared memory"), std::string::npos) << err;
}

TEST_F(EmuSelfTest, CpAsyncDataWaitedForIsClean) {
  const std::vector<float> in = Iota(128);
  Buffer d_in(in), d_out(32);
  CpAsyncRead(d_out.data(), d_in.data(), /*wait_before_read=*/true);
  const std::vector<float> got = d_out.Download();
  for (int t = 0; t < 32; ++t) EXPECT_EQ(got[t], in[4 * t]) << "thread " << t;
  ExpectNoHazards();
}

TEST_F(EmuSelfTest, ReadOfCpAsyncDataBeforeTheWaitIsReported) {
  Buffer d_in(Iota(128)), d_out(32);
  CaptureStderr();
  CpAsyncRead(d_out.data(), d_in.data(), /*wait_before_read=*/false);
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(emu::g_stats.pending_access.load(), 32);
  EXPECT_NE(err.find("with a cp.async in flight"), std::string::npos) << err;
}

TEST_F(EmuSelfTest, CpAsyncNeverWaitedForIsReported) {
  Buffer d_in(Iota(128));
  CaptureStderr();
  CpAsyncNeverWaited(d_in.data());
  const std::string err = GetCapturedStderr();
  EXPECT_EQ(emu::g_stats.leftover_async.load(), 32);
  EXPECT_NE(err.find("cp.async groups outstanding"), std::string::npos) << err;
}

TEST_F(EmuSelfDeathTest, SharedArrayIndexPastTheEndAborts) {
  Buffer out(64);
  EXPECT_DEATH(SharedOutOfRange(out.data()), "shared array: index 64 outside \\[0, 64\\)");
}

TEST_F(EmuSelfDeathTest, BarrierNotEveryThreadReachesIsADeadlock) {
  Buffer out(64);
  EXPECT_DEATH(DivergentBarrier(out.data()), "deadlock in block 0: 32 of 64 threads wait");
}

TEST_F(EmuSelfDeathTest, KernelWritingPastADeviceAllocationIsCaughtByAsan) {
  Buffer out(64);
  EXPECT_DEATH(GlobalOverrun(out.data(), 64), "heap-buffer-overflow");
}

TEST_F(EmuSelfDeathTest, LocalArrayOverrunOnAFiberStackIsCaughtByAsan) {
  Buffer out(32);
  LocalOverrun(out.data(), 7);  // in range: fine
  EXPECT_EQ(out.Download()[0], 7.0f);
  EXPECT_DEATH(LocalOverrun(out.data(), 8), "stack-buffer-overflow");
}

TEST_F(EmuSelfTest, CopyPastADeviceAllocationFails) {
  Buffer d(16);
  std::vector<float> host(17, 1.0f);
  EXPECT_EQ(cudaMemcpy(d.data(), host.data(), 17 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), d.data(), 17 * sizeof(float), cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d.data(), host.data(), 16 * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  cudaGetLastError();
}

}  // namespace
}  // namespace emu_selftest
