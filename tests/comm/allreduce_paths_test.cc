// The gloo backend's three allreduce paths with check_consistency: payloads up to
// 1 MiB / (size - 1) bytes (4 MiB with two ranks) ride whole inside the descriptor exchange and
// are reduced locally (inline); larger ones whose chunks (count / size, rounded up) fit
// the per-peer capacity (16 MiB / (size - 1)) send chunk p to rank p inside the exchange
// and finish with an all-to-all allgather (split); the rest, and every one without the
// check, go through Gloo's ring. Counts straddle both limits, for every type and op, and
// every rank must end with the same bits. Mismatched calls on either side of every limit
// fail the same way on every rank without touching the buffers, and an absent rank is
// named on the split path too.
// Inputs are small integers, so sums, maxima, minima and power-of-two averages are
// exact in every type and the expected values need no tolerance.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <latch>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm_test_util.h"

namespace cohort::comm {
namespace {

using commtest::Decode;
using commtest::Encode;
using commtest::RunRanks;

using ::testing::HasSubstr;

// As in gloo_communicator.cc.
constexpr size_t kInlineBudget = size_t{1} << 20;
constexpr size_t kFusedBudget = size_t{16} << 20;
constexpr size_t kInlineLimitPair = size_t{4} << 20;

// Per-peer payload capacity; the largest inline payload (bytes); the largest count whose
// chunks fit the capacity (split path).
size_t Capacity(int world) { return (kFusedBudget / static_cast<size_t>(world - 1)) & ~size_t{63}; }
size_t InlineLimit(int world) {
  const size_t limit = world == 2 ? kInlineLimitPair
                                  : (kInlineBudget / static_cast<size_t>(world - 1)) & ~size_t{7};
  return std::min(Capacity(world), limit);
}
size_t SplitMaxCount(int world, DataType type) {
  return Capacity(world) / SizeOf(type) * static_cast<size_t>(world);
}

// Rank `rank`'s input at element i: it repeats every kValuePeriod elements, so a case's
// inputs and expected results are one period's, repeated.
constexpr size_t kValuePeriod = 17;
double Value(int rank, size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + rank * 3) % kValuePeriod) - 8);
}

struct PathCase {
  DataType type;
  ReduceOp op;
  size_t count;
};

// The counts, types and ops CheckPaths runs for one world size.
std::vector<PathCase> PathCases(int world, bool check) {
  std::vector<PathCase> cases;
  for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                        DataType::kInt32, DataType::kInt64}) {
    const size_t at_cap = InlineLimit(world) / SizeOf(type);
    // Around the inline limit (every type and op); around the split limit (two types, to
    // keep the test quick: the split path is type-agnostic byte moves plus the kernels
    // checked above), and with a count not divisible by the world size.
    std::vector<size_t> counts = {1, 1000, at_cap - 1, at_cap, at_cap + 1, 3 * at_cap + 1};
    const size_t split_max = SplitMaxCount(world, type);
    if (type == DataType::kFloat32 && check) {  // without the check these are all the ring
      counts.insert(counts.end(), {split_max - 1, split_max, split_max + 1});
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      if (op == ReduceOp::kAvg && (world & (world - 1)) != 0) continue;  // keep averages exact
      for (size_t count : counts) {
        // Big counts: float32 sum is enough (the paths move bytes; the kernels are the
        // same on every path and covered by the small counts).
        if (count * SizeOf(type) > (size_t{1} << 20) &&
            (type != DataType::kFloat32 || op != ReduceOp::kSum)) {
          continue;
        }
        cases.push_back({type, op, count});
      }
    }
  }
  return cases;
}

// Every case on one communicator per rank (a communicator's setup and Gloo's teardown
// cost tens of milliseconds, and the cases are hundreds): each rank checks its result
// against the exact expected values and keeps a digest of its bytes, and the digests of
// every rank must agree, case by case.
void CheckPaths(int world, bool check) {
  const std::vector<PathCase> cases = PathCases(world, check);
  std::vector<std::vector<size_t>> digests(cases.size(), std::vector<size_t>(world, 0));
  RunRanks("gloo", world, [&](Communicator& comm) {
    for (size_t c = 0; c < cases.size(); ++c) {
      const auto [type, op, count] = cases[c];
      const std::string what = fmt::format("world {} check {} {} {} count {} rank {}", world, check,
                                           DataTypeName(type), ReduceOpName(op), count, comm.rank());
      // One period of this rank's inputs and of the expected results (element i's are
      // element i % kValuePeriod's): the cases reach 8M elements, and computing every
      // rank's input for every element was most of the test's time.
      double mine_period[kValuePeriod], want_period[kValuePeriod];
      for (size_t k = 0; k < kValuePeriod; ++k) {
        mine_period[k] = Value(comm.rank(), k);
        double want = Value(0, k);
        for (int p = 1; p < world; ++p) {
          const double x = Value(p, k);
          if (op == ReduceOp::kMax) want = std::max(want, x);
          else if (op == ReduceOp::kMin) want = std::min(want, x);
          else want += x;
        }
        if (op == ReduceOp::kAvg) {
          want /= world;
          if (!commtest::IsFloat(type)) want = std::trunc(want);  // integers truncate
        }
        want_period[k] = want;
      }
      // This rank's input: its period, encoded once, repeated.
      const std::vector<std::byte> period =
          Encode(type, std::vector<double>(mine_period, mine_period + kValuePeriod));
      std::vector<std::byte> buf(count * SizeOf(type));
      for (size_t at = 0; at < buf.size(); at += period.size()) {
        std::memcpy(buf.data() + at, period.data(), std::min(period.size(), buf.size() - at));
      }
      auto r = comm.AllReduce(buf.data(), buf.data(), count, type, op);
      ASSERT_TRUE(r.has_value()) << what << ": " << r.error().ToString();
      digests[c][comm.rank()] = std::hash<std::string_view>{}(
          std::string_view(reinterpret_cast<const char*>(buf.data()), buf.size()));
      const auto got = Decode(type, buf);
      ASSERT_EQ(got.size(), count) << what;
      int misses = 0;
      for (size_t i = 0, k = 0; i < count && misses < 3;
           ++i, k = k + 1 == kValuePeriod ? 0 : k + 1) {
        if (got[i] != want_period[k]) {
          ++misses;
          ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want "
                        << want_period[k];
        }
      }
    }
  }, [&](CommOptions& o) { o.check_consistency = check; });
  for (size_t c = 0; c < cases.size(); ++c) {
    for (int r = 1; r < world; ++r) {
      ASSERT_EQ(digests[c][r], digests[c][0])
          << fmt::format("world {} check {} {} {} count {}: rank {} differs from rank 0", world, check,
                         DataTypeName(cases[c].type), ReduceOpName(cases[c].op), cases[c].count, r);
    }
  }
}

TEST(GlooAllReducePaths, InlineSplitAndRingAgree) {
  for (int world : {2, 3, 4}) {
    for (bool check : {true, false}) CheckPaths(world, check);
  }
}

TEST(GlooAllReducePaths, MismatchedSizesAcrossTheLimitStillFailCleanly) {
  // One rank's payload fits inline, the other's does not: the descriptors disagree, so
  // both report the mismatch and the communicator stays usable.
  const size_t cap_floats = InlineLimit(2) / sizeof(float);
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

TEST(GlooAllReducePaths, OutOfPlaceOnEveryPathLeavesSendAlone) {
  for (int world : {2, 3, 4}) {
    const size_t inline_max = InlineLimit(world) / sizeof(int32_t);
    const size_t split_max = SplitMaxCount(world, DataType::kInt32);
    for (size_t count : {size_t{7}, inline_max, inline_max + 5, split_max, split_max + 1}) {
      SCOPED_TRACE(fmt::format("world {}, count {}", world, count));
      RunRanks("gloo", world, [&](Communicator& comm) {
        const int r = comm.rank();
        std::vector<int32_t> send(count), recv(count, -1);
        for (size_t i = 0; i < count; ++i) send[i] = static_cast<int32_t>(i % 1000) + r;
        const auto original = send;
        auto res = comm.AllReduce(send.data(), recv.data(), count, DataType::kInt32, ReduceOp::kSum);
        ASSERT_TRUE(res.has_value()) << res.error().ToString();
        EXPECT_EQ(send, original);
        const int32_t ranks_sum = world * (world - 1) / 2;
        size_t wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          if (recv[i] != static_cast<int32_t>(i % 1000) * world + ranks_sum) ++wrong;
        }
        EXPECT_EQ(wrong, 0u);
      });
    }
  }
}

// Counts of float32 on every side of every limit for `world` ranks, named.
std::vector<std::pair<std::string, size_t>> CountsAcrossLimits(int world) {
  const size_t inline_max = InlineLimit(world) / sizeof(float);
  const size_t split_max = SplitMaxCount(world, DataType::kFloat32);
  return {{"inline", 16},
          {"inline limit", inline_max},
          {"split", inline_max + 1},
          {"split limit", split_max},
          {"ring", split_max + 1}};
}

TEST(GlooAllReducePaths, MismatchesAcrossEveryLimitFailAlikeAndLeaveBuffersAlone) {
  for (int world : {2, 3, 4}) {
    const auto counts = CountsAcrossLimits(world);
    const size_t biggest = counts.back().second;
    // Rank 0 on one side of a limit, the others on the other side, both ways round.
    const std::pair<int, int> pairs[] = {{0, 2}, {2, 0}, {1, 2}, {2, 1}, {3, 4}, {4, 3}, {0, 4}};
    for (const auto& [i0, i1] : pairs) {
      {
        const auto& [name0, count0] = counts[i0];
        const auto& [name1, count1] = counts[i1];
        const std::string what =
            fmt::format("world {}: rank 0 {} ({}), others {} ({})", world, name0, count0, name1, count1);
        SCOPED_TRACE(what);
        std::mutex mu;
        std::vector<std::string> messages(static_cast<size_t>(world));
        RunRanks("gloo", world, [&](Communicator& comm) {
          const int r = comm.rank();
          const size_t count = r == 0 ? count0 : count1;
          std::vector<float> buf(biggest, static_cast<float>(r + 1));
          auto res = comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
          ASSERT_FALSE(res.has_value());
          EXPECT_EQ(res.error().code, ErrorCode::kInvalidArgument);
          EXPECT_THAT(res.error().message, HasSubstr("collective mismatch at #1"));
          // Nothing was written: no partial or wrong result.
          EXPECT_EQ(std::count(buf.begin(), buf.end(), static_cast<float>(r + 1)),
                    static_cast<std::ptrdiff_t>(biggest));
          {
            std::lock_guard<std::mutex> lock(mu);
            messages[r] = res.error().message;
          }
          // Still usable, on both paths involved.
          for (size_t c : {count0, count1}) {
            std::fill(buf.begin(), buf.end(), 1.0f);
            auto ok = comm.AllReduce(buf.data(), buf.data(), c, DataType::kFloat32, ReduceOp::kSum);
            ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
            EXPECT_EQ(buf[0], static_cast<float>(world));
            EXPECT_EQ(buf[c - 1], static_cast<float>(world));
            if (c < biggest) {
              EXPECT_EQ(buf[c], 1.0f);
            }
          }
        });
        for (int r = 1; r < world; ++r) EXPECT_EQ(messages[r], messages[0]) << "rank " << r;
        EXPECT_EQ(messages[0],
                  fmt::format("collective mismatch at #1: rank 0 called allreduce(float32, {}, "
                              "sum), rank 1 called allreduce(float32, {}, sum)",
                              count0, count1));
      }
    }
  }
}

TEST(GlooAllReducePaths, OtherMismatchesOnTheFusedPathsFail) {
  // Same sizes, different op or dtype, or another collective facing a fused allreduce.
  for (int world : {2, 3, 4}) {
    for (const auto& [name, count] : CountsAcrossLimits(world)) {
      SCOPED_TRACE(fmt::format("world {}, {} ({})", world, name, count));
      RunRanks("gloo", world, [&, count = count](Communicator& comm) {
        const int r = comm.rank();
        std::vector<float> buf(count, 1.0f);
        auto op = comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat32,
                                 r == world - 1 ? ReduceOp::kMax : ReduceOp::kSum);
        ASSERT_FALSE(op.has_value());
        EXPECT_THAT(op.error().message, HasSubstr("allreduce(float32, " + std::to_string(count) + ", max)"));
        auto dtype = comm.AllReduce(buf.data(), buf.data(), count,
                                    r == 0 ? DataType::kFloat32 : DataType::kInt32, ReduceOp::kSum);
        ASSERT_FALSE(dtype.has_value());
        EXPECT_THAT(dtype.error().message, HasSubstr("mismatch at #2"));
        auto kind = r == 0 ? comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum)
                           : comm.Broadcast(buf.data(), count, DataType::kFloat32, 0);
        ASSERT_FALSE(kind.has_value());
        EXPECT_THAT(kind.error().message, HasSubstr("broadcast(float32, " + std::to_string(count) + ", root 0)"));
        auto barrier = r == 0 ? comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum)
                              : comm.Barrier();
        ASSERT_FALSE(barrier.has_value());
        EXPECT_THAT(barrier.error().message, HasSubstr("mismatch at #4"));
        EXPECT_EQ(buf[0], 1.0f);
        EXPECT_EQ(buf[count - 1], 1.0f);
        auto ok = comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
        ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
        EXPECT_EQ(buf[count / 2], static_cast<float>(world));
      });
    }
  }
}

TEST(GlooAllReducePaths, AbsentRankIsNamedOnEveryPath) {
  // The last rank never calls the allreduce (but keeps its connections open until the
  // others have timed out): they name it, whatever path the size takes. The cases wait
  // out their timeouts side by side, one thread each, rather than one after another.
  std::vector<std::thread> cases;
  for (int world : {2, 3, 4}) {
    for (const auto& [name, count] : CountsAcrossLimits(world)) {
      cases.emplace_back([world, name = name, count = count] {
        SCOPED_TRACE(fmt::format("world {}, {} ({})", world, name, count));
        std::latch others_done(world - 1);
        RunRanks("gloo", world, [&, count = count](Communicator& comm) {
          const int r = comm.rank();
          if (r == world - 1) {
            others_done.wait();
            return;
          }
          std::vector<float> buf(count, 1.0f);
          const auto start = SteadyClock::now();
          auto res = comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
          const double took = std::chrono::duration<double>(SteadyClock::now() - start).count();
          others_done.count_down();
          ASSERT_FALSE(res.has_value());
          EXPECT_EQ(res.error().code, ErrorCode::kDeadlineExceeded);
          EXPECT_THAT(res.error().message,
                      HasSubstr(fmt::format("allreduce #1 (float32, {} elements) timed out after 1.0s "
                                            "waiting for rank {}, which never started it",
                                            count, world - 1)));
          EXPECT_GE(took, 0.9);
          EXPECT_LT(took, 3.0);
          EXPECT_EQ(buf[0], 1.0f);
          auto after = comm.Barrier();
          ASSERT_FALSE(after.has_value());
          EXPECT_EQ(after.error().code, ErrorCode::kFailedPrecondition);
        }, [](CommOptions& o) { o.timeout = Millis(1000); });
      });
    }
  }
  for (auto& t : cases) t.join();
}

}  // namespace
}  // namespace cohort::comm
