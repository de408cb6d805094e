// What the tests of a split model's step paths (parallel_overlap_test.cc on the CPU,
// cuda_parallel_step_test.cc on CUDA) record of a run, and their bitwise comparison of two
// runs: every step's loss and gradient norm, every logical parameter afterwards, and each
// rank's data-parallel bucket counts (TrainModel::ParallelStats). Header-only; each rank's
// thread calls TrainAndRecord, the test thread ExpectSameBits.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/trainer/train_model.h"

namespace cohort::engine::testing {

struct Trained {
  std::vector<double> losses, norms;        // rank 0's, per step
  std::vector<float> params;                // logical, after the last step
  std::vector<size_t> buckets, overlapped;  // per rank: reduce_buckets(_overlapped)
};

// Fills micro-batch `k` (replica-wide index) of step `step`.
using FillMicrobatch = std::function<void(int step, int k, std::span<int32_t> inputs,
                                          std::span<int32_t> targets)>;

// Trains `steps` steps of `micro` micro-batches of B x T (replica `replica` reads micro-batches
// replica·micro ..), clipping at 0.5 with lr 3e-3, then records into `out` under `mu`: every
// rank its bucket counts (`out.buckets` and `out.overlapped` sized to the world), rank 0 its
// losses, norms and the gathered logical parameters. Failures are test failures.
inline void TrainAndRecord(TrainModel& model, int rank, int replica, int steps, int micro, int B,
                           int T, const FillMicrobatch& fill, std::mutex& mu, Trained& out) {
  std::vector<double> losses, norms;
  for (int s = 0; s < steps; ++s) {
    auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> tg) -> Result<void> {
      fill(s, replica * micro + a, in, tg);
      return {};
    };
    auto loss = model.TrainMicrobatches(micro, B, T, load, nullptr);
    ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
    auto norm = model.ClipAndStep(0.5, 3e-3f);
    ASSERT_TRUE(norm.has_value()) << norm.error().ToString();
    losses.push_back(*loss);
    norms.push_back(*norm);
  }
  const auto stats = model.parallel_stats();
  ASSERT_TRUE(stats.has_value());
  CheckpointView view;
  ASSERT_TRUE(model.StateForCheckpoint(view).has_value());
  std::lock_guard lock(mu);
  out.buckets.at(static_cast<size_t>(rank)) = stats->reduce_buckets;
  out.overlapped.at(static_cast<size_t>(rank)) = stats->reduce_buckets_overlapped;
  if (rank == 0) {
    out.losses = losses;
    out.norms = norms;
    out.params.assign(view.params.begin(), view.params.end());
  }
}

// The two runs' losses, norms (over `steps` steps) and parameters are the same bits.
inline void ExpectSameBits(const Trained& got, const Trained& want, int steps,
                           const std::string& what) {
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(steps)) << what;
  ASSERT_EQ(want.losses.size(), static_cast<size_t>(steps)) << what;
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(got.losses[s], want.losses[s]) << what << ": loss of step " << s + 1;
    EXPECT_EQ(got.norms[s], want.norms[s]) << what << ": gradient norm of step " << s + 1;
  }
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  size_t differ = 0;
  for (size_t i = 0; i < want.params.size(); ++i) differ += got.params[i] != want.params[i];
  EXPECT_EQ(differ, 0u) << what << ": parameters that differ after " << steps << " steps";
}

}  // namespace cohort::engine::testing
