// The gloo backend's two allreduce paths: with check_consistency, payloads up to
// 1 MiB / (size - 1) bytes ride inside the descriptor exchange and are reduced locally;
// larger ones (and every one without the check) go through Gloo's ring. Counts straddle
// that limit, for every type and op, and every rank must end with the same bits.
// Inputs are small integers, so sums, maxima, minima and power-of-two averages are
// exact in every type and the expected values need no tolerance.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm_test_util.h"

namespace cohort::comm {
namespace {

using commtest::Decode;
using commtest::Encode;
using commtest::RunRanks;

constexpr size_t kInlineBudget = 1 << 20;  // as in gloo_communicator.cc

double Value(int rank, size_t i) { return static_cast<double>(static_cast<int>((i * 7 + rank * 3) % 17) - 8); }

void CheckPaths(int world, bool check) {
  const size_t cap = world > 1 ? (kInlineBudget / static_cast<size_t>(world - 1)) & ~size_t{7} : 0;
  for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                        DataType::kInt32, DataType::kInt64}) {
    const size_t at_cap = cap / SizeOf(type);
    std::vector<size_t> counts = {1, 1000};
    if (at_cap > 0) counts.insert(counts.end(), {at_cap - 1, at_cap, at_cap + 1});
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      if (op == ReduceOp::kAvg && (world & (world - 1)) != 0) continue;  // keep averages exact
      for (size_t count : counts) {
        std::mutex mu;
        std::vector<std::vector<std::byte>> results(static_cast<size_t>(world));
        RunRanks("gloo", world, [&](Communicator& comm) {
          std::vector<double> mine(count);
          for (size_t i = 0; i < count; ++i) mine[i] = Value(comm.rank(), i);
          auto buf = Encode(type, mine);
          auto r = comm.AllReduce(buf.data(), buf.data(), count, type, op);
          ASSERT_TRUE(r.has_value()) << r.error().ToString();
          std::lock_guard<std::mutex> lock(mu);
          results[comm.rank()] = std::move(buf);
        }, [&](CommOptions& o) { o.check_consistency = check; });
        const std::string what = fmt::format("world {} check {} {} {} count {}", world, check,
                                             DataTypeName(type), ReduceOpName(op), count);
        for (int r = 1; r < world; ++r) {
          ASSERT_EQ(results[r], results[0]) << what << ": rank " << r << " differs from rank 0";
        }
        const auto got = Decode(type, results[0]);
        ASSERT_EQ(got.size(), count) << what;
        int misses = 0;
        for (size_t i = 0; i < count && misses < 3; ++i) {
          double want = Value(0, i);
          for (int r = 1; r < world; ++r) {
            const double x = Value(r, i);
            if (op == ReduceOp::kMax) want = std::max(want, x);
            else if (op == ReduceOp::kMin) want = std::min(want, x);
            else want += x;
          }
          if (op == ReduceOp::kAvg) {
            want /= world;
            if (!commtest::IsFloat(type)) want = std::trunc(want);  // integers truncate
          }
          if (got[i] != want) {
            ++misses;
            ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want;
          }
        }
      }
    }
  }
}

TEST(GlooAllReducePaths, InlineAndRingAgree) {
  for (int world : {2, 3, 4}) {
    for (bool check : {true, false}) CheckPaths(world, check);
  }
}

TEST(GlooAllReducePaths, MismatchedSizesAcrossTheLimitStillFailCleanly) {
  // One rank's payload fits inline, the other's does not: the descriptors disagree, so
  // both report the mismatch and the communicator stays usable.
  const size_t cap_floats = kInlineBudget / sizeof(float);
  RunRanks("gloo", 2, [&](Communicator& comm) {
    const size_t count = comm.rank() == 0 ? 16 : cap_floats + 16;
    std::vector<float> buf(cap_floats + 16, 1.0f);
    auto r = comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("collective mismatch at #1"), std::string::npos)
        << r.error().message;
    auto ok = comm.AllReduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
    EXPECT_EQ(buf[0], 2.0f);
  });
}

}  // namespace
}  // namespace cohort::comm
