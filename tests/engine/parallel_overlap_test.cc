// The data-parallel gradient reduction of tensor/pipeline layouts overlapped with the backward
// (parallel/shard_grad_reducer.h, ParallelStepOptions::overlap_grad_reduce) on CPU ranks (one
// thread each, over shm):
//   - tensor 2 x data 2 and pipeline 2 x data 2 (GPipe, 1F1B, interleaved) train to the same
//     bits with and without overlap: every step's loss and gradient norm and every parameter
//     afterwards (a two-rank all-reduce sums each element the same way whatever the call);
//   - with overlap every rank issues buckets before its backward has finished (only those the
//     last gradient piece completes wait for its end), and without it none;
//   - the pieces a chunk's backward reports tile it from its end (ShardGradPieces);
//   - the reducer refuses a tied embedding range it cannot leave out of its buckets, and a
//     step whose gradient was not all reported fails naming the count.
#include <omp.h>

#include <mutex>
#include <tuple>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/layout.h"
#include "engine/parallel/shard_grad_reducer.h"
#include "engine/trainer/train_model.h"
#include "parallel_step_util.h"

namespace cohort::engine {
namespace {

constexpr int kB = 2, kT = 8, kMicro = 4, kSteps = 3;
constexpr size_t kBucketBytes = 16 << 10;  // 4096 floats: a block of this model spans several

GptConfig TinyConfig(int layers) {
  GptConfig c;
  c.vocab_size = 200;
  c.max_seq_len = kT;
  c.n_layer = layers;
  c.n_head = 4;
  c.n_embd = 32;
  return c;
}

// Arithmetic sequences mod 31 from a random start and stride (learnable in a few steps), as
// parallel_parity_test.cc's.
void FillBatch(int step, int k, std::span<int32_t> in, std::span<int32_t> out) {
  uint64_t x = 0x9e3779b97f4a7c15ULL * (step * 1000 + k + 1);
  for (int b = 0; b < kB; ++b) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int start = static_cast<int>((x >> 33) % 31), stride = 1 + static_cast<int>((x >> 40) % 3);
    for (int t = 0; t < kT; ++t) {
      in[b * kT + t] = (start + stride * t) % 31;
      out[b * kT + t] = (start + stride * (t + 1)) % 31;
    }
  }
}

using testing::ExpectSameBits;
using testing::Trained;

Trained Train(const GptConfig& cfg, const ParallelConfig& pc, int world, bool overlap) {
  Trained out;
  out.buckets.resize(world);
  out.overlapped.resize(world);
  std::mutex mu;
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    omp_set_num_threads(1);
    auto layout = MakeParallelLayout(pc, cfg, world);
    ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
    ParallelStepOptions step;
    step.overlap_grad_reduce = overlap;
    step.bucket_bytes = kBucketBytes;
    auto made = MakeParallelCpuTrainModel(cfg, InitialParams{7, nullptr}, AdamWConfig{}, *layout,
                                          comm, nullptr, 0, false, step);
    ASSERT_TRUE(made.has_value()) << made.error().ToString();
    testing::TrainAndRecord(**made, comm.rank(), layout->CoordsOf(comm.rank()).data, kSteps,
                            kMicro, kB, kT, FillBatch, mu, out);
  });
  return out;
}

struct Case {
  int tensor, pipeline;
  std::string schedule;
  int virtual_stages = 1;
};

class ParallelOverlapTest : public ::testing::TestWithParam<Case> {};

TEST_P(ParallelOverlapTest, GivesTheBitsOfTheReductionAfterTheStep) {
  const Case& c = GetParam();
  const GptConfig cfg = TinyConfig(4);
  ParallelConfig pc;
  pc.tensor = c.tensor;
  pc.pipeline = c.pipeline;
  pc.schedule = c.schedule;
  pc.virtual_stages = c.virtual_stages;
  const int world = c.tensor * c.pipeline * 2;  // data 2
  const Trained after = Train(cfg, pc, world, false);
  const Trained during = Train(cfg, pc, world, true);
  ExpectSameBits(during, after, kSteps, "overlapped against after the step");
  EXPECT_LT(after.losses.back(), after.losses.front()) << "the run trains";
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(after.buckets[r], 0u) << "rank " << r << " without overlap";
    // Every bucket but those the last piece completes (here the first block of the stage,
    // several buckets) goes out before the backward ends.
    EXPECT_GE(during.buckets[r], 3u) << "rank " << r;
    EXPECT_GE(during.overlapped[r], 1u)
        << "rank " << r << ": " << during.overlapped[r] << " of " << during.buckets[r]
        << " buckets issued during the backward";
    EXPECT_LT(during.overlapped[r], during.buckets[r]) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ParallelOverlapTest,
    ::testing::Values(Case{2, 1, "1f1b"}, Case{1, 2, "gpipe"}, Case{1, 2, "1f1b"},
                      Case{1, 2, "interleaved", 2}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return fmt::format("t{}_p{}_d2_{}", info.param.tensor, info.param.pipeline,
                         info.param.schedule);
    });

// The pieces a chunk's Backward reports tile the chunk from its end to its start (the order
// the data-parallel buckets are issued in), in every kind of chunk: the whole model in one,
// interleaved chunks without the embedding or the head, tensor slices.
TEST(ShardGradPiecesTest, TileEachChunkFromItsEnd) {
  const GptConfig cfg = TinyConfig(4);
  for (auto [t, p, v] : {std::tuple{1, 1, 1}, std::tuple{2, 1, 1}, std::tuple{1, 2, 2},
                         std::tuple{2, 2, 1}}) {
    ParallelConfig pc;
    pc.tensor = t;
    pc.pipeline = p;
    pc.schedule = v > 1 ? "interleaved" : "1f1b";
    pc.virtual_stages = v;
    const ParallelLayout layout = MakeParallelLayout(pc, cfg, t * p).value();
    for (int r = 0; r < t * p; ++r) {
      const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, cfg, r));
      for (size_t c = 0; c < shard.chunks.size(); ++c) {
        const std::string what = fmt::format("tensor {} pipeline {} x {}, rank {}, chunk {}", t,
                                             p, v, r, c);
        const auto pieces = ShardGradPieces(shard, static_cast<int>(c));
        ASSERT_FALSE(pieces.empty()) << what;
        // 1 + blocks + the embedding and the head where the chunk has them.
        const auto& spec = shard.spec.chunks[c];
        EXPECT_EQ(pieces.size(), shard.chunks[c].blocks.size() + spec.embedding + spec.head)
            << what;
        size_t end = shard.chunks[c].end;
        for (const ShardGradPiece& piece : pieces) {
          EXPECT_GT(piece.count, 0u) << what;
          EXPECT_EQ(piece.offset + piece.count, end) << what;
          end = piece.offset;
        }
        EXPECT_EQ(end, shard.chunks[c].begin) << what;
      }
    }
  }
}

TEST(ShardGradReducerTest, RefusesATiedCopyItCannotLeaveOut) {
  comm::commtest::RunRanks("shm", 2, [](comm::Communicator& comm) {
    std::vector<float> g(100);
    auto outside = ShardGradReducer::Create(g, {90, 20}, nullptr, &comm, true, 64, {});
    ASSERT_FALSE(outside.has_value());
    EXPECT_EQ(outside.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(outside.error().message.find("[90, 110) lies outside the 100"), std::string::npos)
        << outside.error().message;
    auto middle = ShardGradReducer::Create(g, {40, 20}, nullptr, &comm, true, 64, {});
    ASSERT_FALSE(middle.has_value());
    EXPECT_NE(middle.error().message.find("[40, 60) is at neither end"), std::string::npos)
        << middle.error().message;
    // Without overlap the range may lie anywhere: it is summed, then everything averaged.
    EXPECT_TRUE(ShardGradReducer::Create(g, {40, 20}, nullptr, &comm, false, 64, {}).has_value());
    // The peer may still be connecting: stay until it is done.
    ASSERT_TRUE(comm.Barrier().has_value());
  });
}

TEST(ShardGradReducerTest, AveragesEachBucketOnceReportedAndTheTiedCopyAtTheEnd) {
  comm::commtest::RunRanks("shm", 2, [](comm::Communicator& comm) {
    // Rank r holds r + 1 everywhere; the tied copy is the first 10 (no embedding group here,
    // so it is only averaged, at the end).
    std::vector<float> g(100, static_cast<float>(comm.rank() + 1));
    auto made = ShardGradReducer::Create(g, {0, 10}, nullptr, &comm, true, 16 * sizeof(float), {});
    ASSERT_TRUE(made.has_value()) << made.error().ToString();
    ShardGradReducer& r = **made;
    ASSERT_TRUE(r.overlaps());
    EXPECT_EQ(r.buckets(), 6u);  // 90 floats in buckets of 16 from the end
    r.Begin();
    r.Ready(50, 50);  // buckets [84,100), [68,84), [52,68)
    r.Ready(0, 50);   // the rest (the tied copy's part ignored)
    EXPECT_EQ(r.overlapped_buckets(), 3u);
    ASSERT_TRUE(r.Finish([] { return Result<void>{}; }).has_value());
    for (float v : g) ASSERT_EQ(v, 1.5f);
    // A step that leaves a piece unreported fails and says how much.
    r.Begin();
    r.Ready(20, 80);
    auto missed = r.Finish([] { return Result<void>{}; });
    ASSERT_FALSE(missed.has_value());
    EXPECT_EQ(missed.error().code, ErrorCode::kFailedPrecondition);
    EXPECT_NE(missed.error().message.find("10 gradient elements were never reported"),
              std::string::npos)
        << missed.error().message;
  });
}

}  // namespace
}  // namespace cohort::engine
