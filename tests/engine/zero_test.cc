// ZeRO (parallel/zero.h) over real Gloo communicators, one thread per rank, against the
// replicated optimizer: the partition, stage 2's per-bucket reduce-scatter (each rank gets
// the average of its shard only), ZeroOptimizer's steps equal AdamW + ClipGradNorm on the
// whole buffer (clipping by the global norm over all shards), and the model states the CPU
// model allocates per rank equal the formula for each stage.
#include "engine/parallel/zero.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "engine/model/gpt.h"
#include "engine/optim/grad_clip.h"
#include "engine/parallel/ddp.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

TEST(ZeroPartitionTest, ShardsTileTheBufferAndCountBuckets) {
  const ZeroPartition p{10, 4};
  EXPECT_EQ(p.counts(), (std::vector<size_t>{2, 3, 2, 3}));
  EXPECT_EQ(p.begin(0), 0u);
  EXPECT_EQ(p.end(3), 10u);
  EXPECT_EQ(p.counts_in(1, 6), (std::vector<size_t>{1, 3, 1, 0}));
  EXPECT_EQ(p.counts_in(7, 8), (std::vector<size_t>{0, 0, 0, 1}));
  EXPECT_EQ(ZeroDescription(2, 4), "ZeRO-2 over 4 ranks");
}

std::vector<float> Values(size_t n, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

class ZeroWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(ZeroWorldTest, StageTwoReduceScattersEachBucketIntoItsShard) {
  const int world = GetParam();
  const size_t n = 5'003;
  comm::commtest::RunRanks("gloo", world, [&](comm::Communicator& comm) {
    const ZeroPartition shards{n, world};
    std::vector<float> grads = Values(n, 100 + comm.rank(), 1.0f);
    DdpReducer reducer(comm, grads, /*bucket_bytes=*/4 * 700, shards);
    reducer.Begin();
    for (size_t end = n; end > 0;) {
      const size_t begin = end > 211 ? end - 211 : 0;
      reducer.GradReady(begin, end - begin);
      end = begin;
    }
    ASSERT_TRUE(reducer.Finish().has_value());
    for (size_t i = shards.begin(comm.rank()); i < shards.end(comm.rank()); ++i) {
      double sum = 0;
      for (int r = 0; r < world; ++r) sum += Values(n, 100 + r, 1.0f)[i];
      ASSERT_NEAR(grads[i], sum / world, 1e-6) << "element " << i;
    }
  });
}

TEST_P(ZeroWorldTest, StepsEqualTheReplicatedOptimizer) {
  const int world = GetParam();
  const size_t n = 3'001;
  // Three tensors, the middle one without weight decay; their edges fall inside shards.
  const std::vector<DecayRange> tensors = {{0, 1000, true}, {1000, 7, false}, {1007, n - 1007, true}};
  AdamWConfig ac;
  for (double max_norm : {0.0, 1.0}) {  // the gradients' norm is ~55: 1.0 clips
    // Reference: one rank, the whole buffer.
    std::vector<float> want = Values(n, 1, 0.1f);
    AdamW ref = AdamW::Create(n, tensors, ac).value();
    std::vector<double> want_norms;
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g = Values(n, 10 + step, 1.0f);
      want_norms.push_back(ClipGradNorm(g, max_norm));
      ref.Step(want, g, 1e-2f);
    }
    comm::commtest::RunRanks("gloo", world, [&](comm::Communicator& comm) {
      ZeroOptimizer zero = ZeroOptimizer::Create(comm, 1, n, tensors, ac).value();
      EXPECT_EQ(zero.adamw().num_params(), ZeroPartition({n, world}).size(comm.rank()));
      std::vector<float> params = Values(n, 1, 0.1f);
      for (int step = 0; step < 3; ++step) {
        std::vector<float> g = Values(n, 10 + step, 1.0f);  // already averaged
        auto norm = zero.Step(params, g, max_norm, 1e-2f);
        ASSERT_TRUE(norm.has_value()) << norm.error().ToString();
        EXPECT_NEAR(*norm, want_norms[step], 1e-9 * want_norms[step]);
      }
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(params[i], want[i], 1e-6f * std::max(1.0f, std::abs(want[i])))
            << "element " << i << " max_norm " << max_norm;
      }
    });
  }
}

// Model states counted where the CPU model allocates them: parameters and gradients 4 bytes
// each per parameter (Ψ) on every rank, and the AdamW moments 8Ψ replicated (stage 0) or
// 8 × this rank's shard (stages 1 and 2: 8Ψ/N_d, up to the split's rounding). Stage 2's
// gradients are reduced into the shard but the backward pass still fills a whole buffer.
TEST_P(ZeroWorldTest, ModelStatesPerRankFollowTheFormula) {
  const int world = GetParam();
  GptConfig c;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  const size_t psi = c.num_parameters();
  AdamWConfig ac;
  for (int stage : {0, 1, 2}) {
    comm::commtest::RunRanks("gloo", world, [&](comm::Communicator& comm) {
      GptModel model = GptModel::Create(c).value();
      auto m = stage == 0 ? MakeCpuTrainModel(std::move(model), ac)
                          : MakeZeroCpuTrainModel(std::move(model), ac, comm, stage);
      ASSERT_TRUE(m.has_value()) << m.error().ToString();
      const TrainModel::ModelStateBytes b = (*m)->model_state_bytes();
      const size_t shard = stage == 0 ? psi : ZeroPartition{psi, world}.size(comm.rank());
      EXPECT_EQ(b.params, 4 * psi) << "stage " << stage;
      EXPECT_EQ(b.grads, 4 * psi) << "stage " << stage;
      EXPECT_EQ(b.optimizer, 8 * shard) << "stage " << stage;
      if (stage > 0) {
        EXPECT_LE(b.optimizer, 8 * (psi / world + 1));
        EXPECT_GE(b.optimizer, 8 * (psi / world));
      }
      // No rank closes its connections while another is still making them.
      EXPECT_TRUE(comm.Barrier().has_value());
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroWorldTest, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace cohort::engine
