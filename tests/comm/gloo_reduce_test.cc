// The Gloo backend's element kernels: half-type conversions against the compiler's
// _Float16 (all 2^16 halves, and a sweep of floats) and a hand-checked bfloat16 table.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

#include "comm/gloo/gloo_reduce.h"

namespace cohort::comm::gloo_backend {
namespace {

uint16_t Bits(_Float16 h) {
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

TEST(GlooReduceTest, HalfToFloatMatchesCompilerForAllHalves) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    _Float16 h;
    const uint16_t bits = static_cast<uint16_t>(b);
    std::memcpy(&h, &bits, 2);
    const float want = static_cast<float>(h);
    const float got = HalfToFloat(bits);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << b;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << std::hex << b;
    }
  }
}

TEST(GlooReduceTest, FloatToHalfRoundsLikeCompiler) {
  // Every float bit pattern in steps of a prime, plus every float near the half grid.
  auto check = [](uint32_t fbits) {
    const float f = std::bit_cast<float>(fbits);
    const uint16_t got = FloatToHalf(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got & 0x7c00, 0x7c00);
      ASSERT_NE(got & 0x03ff, 0);
      return;
    }
    ASSERT_EQ(got, Bits(static_cast<_Float16>(f))) << std::hex << fbits << " = " << f;
  };
  for (uint64_t b = 0; b <= 0xffffffffull; b += 4099) check(static_cast<uint32_t>(b));
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // around each finite half (ties included)
    const uint32_t f = std::bit_cast<uint32_t>(HalfToFloat(static_cast<uint16_t>(h)));
    for (int d = -2; d <= 2; ++d) {
      check(f + d);
      check((f + d) | 0x80000000u);
    }
    check(f + 0x1000);  // exactly halfway to the next half (normal range)
  }
}

TEST(GlooReduceTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie: even stays
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie: odd rounds up
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x3f808001u)), 0x3f81);  // above tie
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // max float -> inf
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(NAN))));
  EXPECT_EQ(BFloat16ToFloat(0xc040), -3.0f);
}

TEST(GlooReduceTest, KernelsReduceEachType) {
  const float fa[] = {1.5f, -2.0f}, fb[] = {0.25f, 3.0f};
  float fo[2];
  ReduceFunction(DataType::kFloat32, ReduceOp::kSum)(fo, fa, fb, 2);
  EXPECT_EQ(fo[0], 1.75f);
  EXPECT_EQ(fo[1], 1.0f);
  ReduceFunction(DataType::kFloat32, ReduceOp::kMin)(fo, fa, fb, 2);
  EXPECT_EQ(fo[1], -2.0f);
  const uint16_t ha[] = {FloatToHalf(1.0f)}, hb[] = {FloatToHalf(2.0f)};
  uint16_t ho[1];
  ReduceFunction(DataType::kFloat16, ReduceOp::kMax)(ho, ha, hb, 1);
  EXPECT_EQ(HalfToFloat(ho[0]), 2.0f);
  const uint16_t ba[] = {FloatToBFloat16(256.0f)}, bb[] = {FloatToBFloat16(1.0f)};
  uint16_t bo[1];
  ReduceFunction(DataType::kBFloat16, ReduceOp::kSum)(bo, ba, bb, 1);
  EXPECT_EQ(BFloat16ToFloat(bo[0]), 256.0f);  // 257 is a tie between 256 and 258: even
  const int32_t ia[] = {INT32_MAX}, ib[] = {1};
  int32_t io[1];
  ReduceFunction(DataType::kInt32, ReduceOp::kSum)(io, ia, ib, 1);
  EXPECT_EQ(io[0], INT32_MIN);  // wraps, no UB
  int64_t l[] = {-7, 7, 9};
  DivideInPlace(l, 3, DataType::kInt64, 2);
  EXPECT_EQ(l[0], -3);  // truncates toward zero
  EXPECT_EQ(l[1], 3);
  EXPECT_EQ(l[2], 4);
  // Aliased output (Gloo reduces into its first input).
  float acc[] = {1.0f};
  const float add[] = {2.0f};
  ReduceFunction(DataType::kFloat32, ReduceOp::kAvg)(acc, acc, add, 1);
  EXPECT_EQ(acc[0], 3.0f);
}

}  // namespace
}  // namespace cohort::comm::gloo_backend
