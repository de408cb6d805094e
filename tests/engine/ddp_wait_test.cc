// DdpReducer's wait_ready hook (what a GPU model's events plug into), over real Gloo
// communicators, one thread per rank: it runs on the communication thread once per bucket
// with exactly that bucket's range, before the bucket's collective reads the gradients,
// and an error from it fails the round on every rank without a hang.
#include "engine/parallel/ddp.h"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace cohort::engine {
namespace {

float Grad(int rank, size_t i) { return static_cast<float>((rank + 1) * 0.75 + (i % 31) * 0.5); }

float Mean(int world, size_t i) {
  double s = 0;
  for (int r = 0; r < world; ++r) s += Grad(r, i);
  return static_cast<float>(s / world);
}

// The gradients become final only when the hook runs: before it, the buffer holds a value
// that would poison the average. So the averaged result proves the hook ran before the
// collective read each bucket, and that it ran on every bucket.
TEST(DdpWaitReadyTest, RunsPerBucketBeforeItsCollective) {
  const int world = 2;
  const size_t n = 5'003;
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    std::vector<float> grads(n, 1e30f);
    std::mutex mu;
    std::vector<std::pair<size_t, size_t>> calls;  // guarded by mu
    std::set<std::thread::id> threads;             // guarded by mu
    DdpReducer::WaitReadyFn wait = [&](size_t offset, size_t count) -> Result<void> {
      // The "kernel" finishing: the slice's values land now.
      for (size_t i = offset; i < offset + count; ++i) grads[i] = Grad(comm.rank(), i);
      std::lock_guard lock(mu);
      calls.emplace_back(offset, count);
      threads.insert(std::this_thread::get_id());
      return {};
    };
    DdpReducer reducer(comm, grads, /*bucket_bytes=*/4 * 1000, wait);
    ASSERT_EQ(reducer.num_buckets(), 6u);
    for (int round = 0; round < 2; ++round) {
      std::fill(grads.begin(), grads.end(), 1e30f);
      {
        std::lock_guard lock(mu);
        calls.clear();
      }
      reducer.Begin();
      for (size_t end = n; end > 0;) {
        const size_t begin = end > 777 ? end - 777 : 0;
        reducer.GradReady(begin, end - begin);
        end = begin;
      }
      auto ok = reducer.Finish();
      ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
      for (size_t i = 0; i < n; ++i) {
        ASSERT_FLOAT_EQ(grads[i], Mean(world, i)) << "round " << round << " element " << i;
      }
      std::lock_guard lock(mu);
      // One call per bucket, in issue order (last bucket of the buffer first), each with
      // the bucket's exact range.
      ASSERT_EQ(calls.size(), 6u);
      size_t end = n;
      for (const auto& [offset, count] : calls) {
        const size_t begin = end > 1000 ? end - 1000 : 0;
        EXPECT_EQ(offset, begin);
        EXPECT_EQ(count, end - begin);
        end = begin;
      }
    }
    std::lock_guard lock(mu);
    EXPECT_EQ(threads.size(), 1u);
    EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u) << "the hook ran on the caller";
  });
}

TEST(DdpWaitReadyTest, AnErrorFailsTheRoundOnEveryRank) {
  const int world = 2;
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    std::vector<float> grads(1000, 1.0f);
    std::atomic<int> calls{0};
    // Every rank fails the same (second) bucket, so no rank waits for a peer in a
    // collective the other skipped.
    DdpReducer reducer(comm, grads, 4 * 250, [&](size_t offset, size_t) -> Result<void> {
      ++calls;
      if (offset == 500) return MakeError(ErrorCode::kInternal, "event failed");
      return {};
    });
    reducer.Begin();
    reducer.GradReady(0, 1000);
    auto ok = reducer.Finish();
    ASSERT_FALSE(ok.has_value());
    EXPECT_EQ(ok.error().code, ErrorCode::kInternal);
    EXPECT_EQ(ok.error().message, "event failed");
    // After the failure later buckets are skipped: the hook ran for buckets 0 and 1 only.
    EXPECT_EQ(calls.load(), 2);
  });
}

}  // namespace
}  // namespace cohort::engine
