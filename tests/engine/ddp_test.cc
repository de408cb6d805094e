// DdpReducer over real Gloo communicators, one thread per rank: buckets complete in any
// reporting order, are averaged exactly once, and a missing report is an error.
#include "engine/parallel/ddp.h"

#include <algorithm>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace cohort::engine {
namespace {

// Rank r's gradient element i.
float Grad(int rank, size_t i) { return static_cast<float>((rank + 1) * 0.5 + (i % 97) * 0.25); }

float Mean(int world, size_t i) {
  double s = 0;
  for (int r = 0; r < world; ++r) s += Grad(r, i);
  return static_cast<float>(s / world);
}

// Reports [0, n) in slices of `slice` elements, from the end of the buffer to the start
// (the model's order) or shuffled.
void ReportAll(DdpReducer& reducer, size_t n, size_t slice, bool shuffled, int seed) {
  std::vector<std::pair<size_t, size_t>> slices;
  for (size_t end = n; end > 0;) {
    size_t begin = end > slice ? end - slice : 0;
    slices.emplace_back(begin, end - begin);
    end = begin;
  }
  if (shuffled) std::shuffle(slices.begin(), slices.end(), std::mt19937(seed));
  for (auto [offset, count] : slices) reducer.GradReady(offset, count);
}

class DdpReducerTest : public ::testing::TestWithParam<int> {};

TEST_P(DdpReducerTest, AveragesEveryBucketOncePerRound) {
  const int world = GetParam();
  const size_t n = 10'007;  // not a multiple of the bucket or slice sizes
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    std::vector<float> grads(n);
    DdpReducer reducer(comm, grads, /*bucket_bytes=*/4 * 1000);
    EXPECT_EQ(reducer.num_buckets(), 11u);
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < n; ++i) grads[i] = Grad(comm.rank(), i);
      reducer.Begin();
      // Slices straddle bucket boundaries; rounds 1 and 2 report out of order.
      ReportAll(reducer, n, 333 + round * 101, round > 0, round * 7 + comm.rank());
      auto ok = reducer.Finish();
      ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
      for (size_t i = 0; i < n; ++i) {
        ASSERT_FLOAT_EQ(grads[i], Mean(world, i)) << "round " << round << " element " << i;
      }
    }
  });
}

TEST_P(DdpReducerTest, UnreportedElementsAreAnError) {
  const int world = GetParam();
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    std::vector<float> grads(1000, 1.0f);
    DdpReducer reducer(comm, grads, 4 * 100);
    reducer.Begin();
    reducer.GradReady(500, 500);  // the first half is never reported
    auto ok = reducer.Finish();
    ASSERT_FALSE(ok.has_value());
    EXPECT_EQ(ok.error().code, ErrorCode::kFailedPrecondition);
    EXPECT_NE(ok.error().message.find("500 gradient elements"), std::string::npos)
        << ok.error().message;
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, DdpReducerTest, ::testing::Values(2, 3, 4));

TEST(DdpReducerSingleTest, WorldOfOneLeavesGradientsAlone) {
  comm::commtest::RunRanks("shm", 1, [&](comm::Communicator& comm) {
    std::vector<float> grads(100);
    std::iota(grads.begin(), grads.end(), 0.0f);
    DdpReducer reducer(comm, grads, 64);
    reducer.Begin();
    ASSERT_TRUE(reducer.Finish().has_value());
    EXPECT_EQ(grads[99], 99.0f);
  });
}

}  // namespace
}  // namespace cohort::engine
