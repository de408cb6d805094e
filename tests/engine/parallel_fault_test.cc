// A rank of a pipeline that stops mid-step: every other rank's step fails within the
// communicator timeout (never a hang) with an error naming the operation and a peer.
// Two ways to stop: the rank vanishes (its connections close, as when its process dies) or
// it hangs with its connections open (only the timeout can tell).
#include <omp.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "engine/model/gpt.h"
#include "engine/parallel/layout.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

using ::testing::ContainsRegex;

struct Outcome {
  bool failed = false;
  std::string message;
  double seconds = 0;
};

// world 4 as tensor 2 x pipeline 2; rank `victim` stops during step 2's loading.
std::vector<Outcome> RunWithFailure(int victim, bool hang, Millis timeout) {
  GptConfig cfg;
  cfg.vocab_size = 64;
  cfg.max_seq_len = 8;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 16;
  const int world = 4;
  std::vector<Outcome> out(world);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;  // guarded by mu: ranks other than the victim done with step 2
  comm::commtest::RunRanks(
      "gloo", world,
      [&](comm::Communicator& comm) {
        omp_set_num_threads(1);
        ParallelConfig pc;
        pc.tensor = 2;
        pc.pipeline = 2;
        auto layout = MakeParallelLayout(pc, cfg, world).value();
        auto model =
            MakeParallelCpuTrainModel(cfg, InitialParams{3, nullptr}, AdamWConfig{}, layout, comm, nullptr);
        ASSERT_TRUE(model.has_value()) << model.error().ToString();
        const int me = comm.rank();
        for (int step = 0; step < 2; ++step) {
          auto load = [&](int, std::span<int32_t> in, std::span<int32_t> tg) -> Result<void> {
            if (step == 1 && me == victim) return MakeError(ErrorCode::kUnavailable, "stopped");
            for (size_t i = 0; i < in.size(); ++i) {
              in[i] = static_cast<int32_t>((i * 7 + step) % 64);
              tg[i] = static_cast<int32_t>((i * 7 + step + 1) % 64);
            }
            return {};
          };
          const auto start = std::chrono::steady_clock::now();
          auto loss = (*model)->TrainMicrobatches(4, 2, 8, load, nullptr);
          if (step == 0) {
            ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
            ASSERT_TRUE((*model)->ClipAndStep(1.0, 1e-3f).has_value());
            continue;
          }
          if (me == victim) {
            if (hang) {
              // Silent with its connections open until every other rank has given up.
              std::unique_lock lock(mu);
              cv.wait(lock, [&] { return finished == world - 1; });
            } else {
              model->reset();  // vanishes: its connections close
            }
            return;
          }
          Outcome& o = out[me];
          o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          o.failed = !loss.has_value();
          if (!loss) o.message = loss.error().ToString();
          // A failed rank lets go of its connections, as its process would on exit.
          model->reset();
          std::lock_guard lock(mu);
          ++finished;
          cv.notify_all();
        }
      },
      [timeout](comm::CommOptions& o) { o.timeout = timeout; });
  return out;
}

TEST(PipelineFaultTest, AVanishedRankFailsEveryOtherRankPromptly) {
  const Millis timeout(4000);
  auto out = RunWithFailure(/*victim=*/2, /*hang=*/false, timeout);
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(out[r].failed) << "rank " << r;
    EXPECT_LT(out[r].seconds, 2.0 * timeout.count() / 1000) << "rank " << r;
    // The operation and the peer it was waiting for, by its rank in the group and its world
    // rank when they differ: "recv from rank 1 (world rank 2)", "allreduce #12 ... rank 1".
    EXPECT_THAT(out[r].message, ContainsRegex("(recv|send|allreduce|allgather).*rank [0-9]"))
        << "rank " << r;
  }
  // Rank 3 shares a tensor group with the victim; rank 0 receives its gradients from the
  // victim's stage: both name the victim's world rank.
  EXPECT_THAT(out[3].message, ContainsRegex("world rank 2")) << out[3].message;
}

TEST(PipelineFaultTest, AHungRankFailsEveryOtherRankWithinTheTimeout) {
  const Millis timeout(2000);
  auto out = RunWithFailure(/*victim=*/1, /*hang=*/true, timeout);
  for (int r : {0, 2, 3}) {
    EXPECT_TRUE(out[r].failed) << "rank " << r;
    EXPECT_LT(out[r].seconds, 3.0 * timeout.count() / 1000) << "rank " << r;
    EXPECT_THAT(out[r].message, ContainsRegex("(recv|send|allreduce|allgather).*rank [0-9]"))
        << "rank " << r;
  }
  // Rank 0 shares a tensor group with the victim (world ranks 0 and 1).
  EXPECT_THAT(out[0].message, ContainsRegex("waiting for rank 1[^0-9]")) << out[0].message;
}

}  // namespace
}  // namespace cohort::engine
