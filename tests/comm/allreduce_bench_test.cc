// The allreduce benchmark's arithmetic and size list (nccl-tests' definitions), and the
// table it prints; no processes, no network.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/bench/allreduce_bench.h"

namespace cohort::comm::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(AllreduceBench, ParsesByteSizes) {
  EXPECT_EQ(ParseByteSize("4", "x").value(), 4u);
  EXPECT_EQ(ParseByteSize("64K", "x").value(), 64u << 10);
  EXPECT_EQ(ParseByteSize("64k", "x").value(), 64u << 10);
  EXPECT_EQ(ParseByteSize("256M", "x").value(), 256u << 20);
  EXPECT_EQ(ParseByteSize("2MiB", "x").value(), 2u << 20);
  EXPECT_EQ(ParseByteSize("1G", "x").value(), size_t{1} << 30);
  EXPECT_EQ(ParseByteSize("12B", "x").value(), 12u);
  for (const char* bad : {"", "K", "4X", "-4", "0", "1.5M", "99999999999999999999999"}) {
    auto r = ParseByteSize(bad, "--max-bytes");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(r.error().message, HasSubstr("--max-bytes"));
  }
}

TEST(AllreduceBench, SizeListDoublesUpToMax) {
  EXPECT_THAT(SizeList(4, 64, 2), ElementsAre(4, 8, 16, 32, 64));
  EXPECT_THAT(SizeList(4, 100, 2), ElementsAre(4, 8, 16, 32, 64));
  EXPECT_THAT(SizeList(1, 1000, 10), ElementsAre(1, 10, 100, 1000));
  EXPECT_THAT(SizeList(8, 8, 2), ElementsAre(8));
  EXPECT_TRUE(SizeList(16, 8, 2).empty());
  const auto full = SizeList(4, 256u << 20, 2);
  EXPECT_EQ(full.size(), 27u);  // 2^2 .. 2^28
  EXPECT_EQ(full.back(), 256u << 20);
  // No overflow near the top of size_t.
  const size_t top = ~size_t{0};
  EXPECT_EQ(SizeList(top / 2 + 1, top, 2).size(), 1u);
}

TEST(AllreduceBench, CountsAndBandwidths) {
  EXPECT_EQ(CountFor(4, DataType::kFloat32), 1u);
  EXPECT_EQ(CountFor(4, DataType::kInt64), 1u);  // at least one element
  EXPECT_EQ(CountFor(1 << 20, DataType::kBFloat16), 1u << 19);
  // nccl-tests: algbw = bytes / time; busbw = algbw * 2(n-1)/n.
  EXPECT_DOUBLE_EQ(AlgBandwidth(1'000'000'000, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(AlgBandwidth(100, 0), 0.0);
  EXPECT_DOUBLE_EQ(BusBandwidth(2.0, 2), 2.0);
  EXPECT_DOUBLE_EQ(BusBandwidth(2.0, 4), 3.0);
  EXPECT_DOUBLE_EQ(BusBandwidth(2.0, 8), 3.5);
  EXPECT_DOUBLE_EQ(BusBandwidth(2.0, 1), 0.0);
}

TEST(AllreduceBench, IterationsScaleDownWithSize) {
  EXPECT_EQ(ItersFor(4), 1000);
  EXPECT_EQ(ItersFor(1 << 20), 512);
  EXPECT_EQ(ItersFor(256u << 20), 10);
  for (size_t s = 4; s <= (256u << 20); s *= 2) {
    EXPECT_GE(ItersFor(s), ItersFor(s * 2)) << s;
    EXPECT_GE(WarmupFor(s), 1);
  }
}

TEST(AllreduceBench, RowShowsTimeBandwidthsRatioAndWrong) {
  BenchRow row{1u << 20, 1u << 18, 0.001, 0.002, 0};
  const std::string line = FormatRow(row, DataType::kFloat32, 4, /*with_baseline=*/true);
  // 1 MiB in 1 ms: algbw 1.049 GB/s, busbw 1.573; gloo 2 ms: 0.524, 0.786; ratio 2.00.
  EXPECT_THAT(line, HasSubstr("1048576"));
  EXPECT_THAT(line, HasSubstr("262144"));
  EXPECT_THAT(line, HasSubstr("1000.0"));
  EXPECT_THAT(line, HasSubstr("1.049"));
  EXPECT_THAT(line, HasSubstr("1.573"));
  EXPECT_THAT(line, HasSubstr("2000.0"));
  EXPECT_THAT(line, HasSubstr("0.786"));
  EXPECT_THAT(line, HasSubstr("2.00"));
  const std::string plain = FormatRow(row, DataType::kFloat32, 4, /*with_baseline=*/false);
  EXPECT_THAT(plain, ::testing::Not(HasSubstr("2000.0")));
  AllreduceBenchOptions o;
  EXPECT_THAT(FormatHeader(o, 4, true), HasSubstr("busbw"));
  EXPECT_THAT(FormatHeader(o, 4, true), HasSubstr("ratio"));
  EXPECT_THAT(FormatSummary({row}, 4, true), HasSubstr("smallest ratio 2.00 at 1 MiB"));
}

}  // namespace
}  // namespace cohort::comm::bench
