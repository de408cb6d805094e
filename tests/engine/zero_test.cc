// ZeRO (parallel/zero.h) over real Gloo communicators, one thread per rank, against the
// replicated optimizer: the partition, stage 2's sharded gradients (each rank accumulates
// the average of its shard only, piece by piece), ZeroOptimizer's steps equal AdamW +
// ClipGradNorm on the whole buffer (clipping by the global norm over all shards), the model
// states the CPU model allocates per rank equal the formula for each stage, and stages 0-3
// train as one rank does.
#include "engine/parallel/zero.h"

#include <cmath>
#include <random>
#include <mutex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/gpt.h"
#include "engine/optim/grad_clip.h"
#include "engine/parallel/ddp.h"
#include "engine/parallel/zero_grads.h"
#include "engine/parallel/zero_params.h"
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

// ShardedGradients: pieces handed back in descending order (as the model's backward pass
// does) are reduce-scattered into the shards, and a second round (gradient accumulation)
// adds to them: each rank ends with the sum over rounds of the ranks' average, for its shard
// only. Pieces that do not cover the buffer fail the round.
TEST_P(ZeroWorldTest, ShardedGradientsAccumulateEachPiecesAverageIntoTheShard) {
  const int world = GetParam();
  const size_t n = 5'003, piece = 211;
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    const ZeroPartition shards{n, world};
    ShardedGradients g(comm, shards, /*max_piece=*/piece);
    EXPECT_EQ(g.shard().size(), shards.size(comm.rank()));
    EXPECT_EQ(g.scratch_bytes(),
              world == 1 ? 4 * piece : 4 * (2 * piece + std::min(piece, g.shard().size())));
    g.ZeroShard();
    for (int round = 0; round < 2; ++round) {
      const std::vector<float> mine = Values(n, 100 * round + comm.rank(), 1.0f);
      g.Begin();
      for (size_t end = n; end > 0;) {
        const size_t begin = end > piece ? end - piece : 0;
        float* buffer = g.Acquire(begin, end - begin);
        std::copy(mine.begin() + begin, mine.begin() + end, buffer);
        g.Done(begin, end - begin);
        end = begin;
      }
      auto r = g.Finish();
      ASSERT_TRUE(r.has_value()) << r.error().ToString();
    }
    for (size_t i = shards.begin(comm.rank()); i < shards.end(comm.rank()); ++i) {
      double sum = 0;
      for (int round = 0; round < 2; ++round) {
        double round_sum = 0;
        for (int r = 0; r < world; ++r) round_sum += Values(n, 100 * round + r, 1.0f)[i];
        sum += round_sum / world;
      }
      ASSERT_NEAR(g.shard()[i - shards.begin(comm.rank())], sum, 1e-5) << "element " << i;
    }
    // A round that misses the first piece (every rank alike): an error naming the count.
    g.Begin();
    for (size_t end = n; end > piece;) {
      const size_t begin = end > 2 * piece ? end - piece : piece;
      g.Acquire(begin, end - begin);
      g.Done(begin, end - begin);
      end = begin;
    }
    auto r = g.Finish();
    ASSERT_FALSE(r.has_value());
    EXPECT_THAT(r.error().message, ::testing::HasSubstr("reported 4792 gradient elements of 5003"));
    EXPECT_TRUE(comm.Barrier().has_value());
  });
}

// The global norm's squares are summed in double: 1 + (ranks - 1)·2^-24 needs more bits
// than a float has, so a float32 all-reduce could not give it exactly.
TEST_P(ZeroWorldTest, SumOverRanksKeepsDoublePrecision) {
  const int world = GetParam();
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    const double tiny = std::ldexp(1.0, -24);
    auto sum = SumOverRanks(comm, comm.rank() == 0 ? 1.0 : tiny);
    ASSERT_TRUE(sum.has_value()) << sum.error().ToString();
    EXPECT_EQ(*sum, 1.0 + (world - 1) * tiny);
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
    comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
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

// Model states counted where the CPU model allocates them: parameters 4Ψ (stages 0-2) or
// 4 × this rank's shard (stage 3: 4Ψ/N_d, up to the split's rounding); gradients 4Ψ (stages
// 0 and 1) or 4 × the shard (stages 2 and 3); the AdamW moments 8Ψ replicated (stage 0) or
// 8 × the shard. The scratch is counted apart: for the gradient pieces two buffers of the
// largest piece (a block) and a receive buffer, or one piece buffer on one rank; for stage
// 3's gathered parameters the largest piece (wte, wpe or a block: the embeddings are two).
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
  for (int stage : {0, 1, 2, 3}) {
    comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
      GptModel model = GptModel::Create(c).value();
      auto m = stage == 0 ? MakeCpuTrainModel(std::move(model), ac)
                          : MakeZeroCpuTrainModel(std::move(model), ac, comm, stage);
      ASSERT_TRUE(m.has_value()) << m.error().ToString();
      const TrainModel::ModelStateBytes b = (*m)->model_state_bytes();
      const size_t shard = stage == 0 ? psi : ZeroPartition{psi, world}.size(comm.rank());
      EXPECT_EQ(b.params, 4 * (stage == 3 ? shard : psi)) << "stage " << stage;
      EXPECT_EQ(b.grads, 4 * (stage >= 2 ? shard : psi)) << "stage " << stage;
      EXPECT_EQ(b.optimizer, 8 * shard) << "stage " << stage;
      const size_t piece = 12 * 32 * 32 + 13 * 32;
      // Stage 3 reduce-scatters each piece before the next (no overlap): one piece buffer.
      const size_t grad_scratch = stage < 2     ? 0
                                  : world == 1 ? 4 * piece
                                               : 4 * ((stage == 3 ? 1 : 2) * piece +
                                                      std::min(piece, shard));
      // Stage 3 without prefetch gathers one piece at a time, each into a buffer of its size:
      // at most the largest piece, wte (128 rows of 32), wpe (16 rows) or a block, here the
      // block.
      const size_t gathered = stage == 3 ? 4 * std::max<size_t>(128 * 32, piece) : 0;
      EXPECT_EQ(b.scratch, grad_scratch + gathered) << "stage " << stage;
      if (stage > 0) {
        EXPECT_LE(b.optimizer, 8 * (psi / world + 1));
        EXPECT_GE(b.optimizer, 8 * (psi / world));
      }
      // No rank closes its connections while another is still making them.
      EXPECT_TRUE(comm.Barrier().has_value());
    });
  }
}

// Stages 0 (DDP), 1, 2 and 3 of the CPU model on `world` ranks train as one rank does over
// the same global batch: 4 micro-batches of 2 x 16 tokens per step (each rank accumulates
// 4 / world of them; stages 2 and 3 into their gradient shard; stage 3 gathers each piece
// of the parameters as it computes), clipping at 1.0 (the first steps
// clip), 20 steps: the ranks' mean loss equals one rank's to relative 1e-5 every step.
TEST_P(ZeroWorldTest, StagesTrainAsOneRankWithAccumulation) {
  const int world = GetParam();
  GptConfig c;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  const int B = 2, T = 16, micro = 4, steps = 20;
  AdamWConfig ac;
  auto batch = [&](int step, int index, std::span<int32_t> in, std::span<int32_t> out) {
    std::mt19937 g(static_cast<uint32_t>(1000 * step + index));
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<int32_t>(g() % 64);
      out[i] = static_cast<int32_t>(i % 3 == 0 ? in[i] : g() % 64);  // something to learn
    }
    return Result<void>{};
  };
  auto fresh = [&] {
    GptModel m = GptModel::Create(c).value();
    m.InitRandom(3);
    return m;
  };
  std::vector<double> want;
  {
    auto one = MakeCpuTrainModel(fresh(), ac).value();
    for (int s = 0; s < steps; ++s) {
      auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) {
        return batch(s, a, in, out);
      };
      want.push_back(one->TrainMicrobatches(micro, B, T, load, nullptr).value());
      ASSERT_TRUE(one->ClipAndStep(1.0, 3e-3f).has_value());
    }
  }
  // Stage 3 twice: gathering each piece when asked, and prefetching the next one (4 = 3 with
  // parallel.prefetch), which must give the same bits.
  std::vector<float> stage3_losses[2];
  for (int variant : {0, 1, 2, 3, 4}) {
    const int stage = std::min(variant, 3);
    const bool prefetch = variant == 4;
    comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
      auto m = stage == 0 ? MakeCpuTrainModel(fresh(), ac)
                          : MakeZeroCpuTrainModel(fresh(), ac, comm, stage, prefetch);
      ASSERT_TRUE(m.has_value()) << m.error().ToString();
      TrainModel& model = **m;
      // As the trainer: DDP's bucket all-reduce for stages 0 and 1; 2 and 3 reduce their own.
      std::unique_ptr<DdpReducer> reducer;
      if (stage < 2 && world > 1) {
        reducer = std::make_unique<DdpReducer>(comm, model.grads(), /*bucket_bytes=*/4 * 4096);
      }
      const int accum = micro / world;
      for (int s = 0; s < steps; ++s) {
        auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) {
          return batch(s, comm.rank() * accum + a, in, out);
        };
        auto loss = model.TrainMicrobatches(accum, B, T, load, reducer.get());
        ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
        float mean = static_cast<float>(*loss);
        ASSERT_TRUE(comm.AllReduce(&mean, &mean, 1, comm::DataType::kFloat32, comm::ReduceOp::kAvg)
                        .has_value());
        EXPECT_NEAR(mean, want[static_cast<size_t>(s)], 1e-5 * want[static_cast<size_t>(s)])
            << "stage " << stage << (prefetch ? " with prefetch" : "") << " step " << s;
        if (stage == 3 && comm.rank() == 0) stage3_losses[prefetch].push_back(mean);
        auto norm = model.ClipAndStep(1.0, 3e-3f);
        ASSERT_TRUE(norm.has_value()) << norm.error().ToString();
      }
      if (prefetch && world > 1) {
        // Every piece after the first step's was predicted: Forward's and the backward's.
        const auto st = model.gather_stats();
        ASSERT_TRUE(st.has_value());
        EXPECT_GT(st->hits, 0);
      }
      EXPECT_TRUE(comm.Barrier().has_value());
    });
  }
  EXPECT_EQ(stage3_losses[1], stage3_losses[0]) << "prefetch changed the losses";
}

// ZeRO-3 from a seed: no rank allocates the whole model (the GptModel holds no buffers) or
// generates more than its shard, and training is bit for bit that of the whole model cut.
TEST_P(ZeroWorldTest, ShardedInitHoldsAndGeneratesTheShardOnly) {
  const int world = GetParam();
  GptConfig c;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  const int B = 2, T = 16;
  AdamWConfig ac;
  auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) {
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<int32_t>((i * 7 + a) % 64);
      out[i] = static_cast<int32_t>((i * 7 + a + 1) % 64);
    }
    return Result<void>{};
  };
  std::vector<float> losses[2];
  std::mutex mu;
  Checkpoint ckpt;
  ckpt.params.resize(c.num_parameters());
  ckpt.adam_m.resize(c.num_parameters());
  ckpt.adam_v.resize(c.num_parameters());
  for (int sharded : {0, 1}) {
    comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
      std::unique_ptr<TrainModel> model;
      if (sharded) {
        model = MakeZero3CpuTrainModelFromSeed(c, 9, ac, comm, /*prefetch=*/true).value();
        const ZeroPartition part{c.num_parameters(), comm.size()};
        const size_t mine = part.size(comm.rank());
        EXPECT_EQ(model->initial_values(), mine);
        EXPECT_EQ(model->model_state_bytes().params, 4 * mine);
      } else {
        GptModel whole = GptModel::Create(c).value();
        whole.InitRandom(9);
        model = MakeZeroCpuTrainModel(std::move(whole), ac, comm, 3).value();
      }
      for (int s = 0; s < 4; ++s) {
        auto loss = model->TrainMicrobatches(1, B, T, load, nullptr);
        ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
        ASSERT_TRUE(model->ClipAndStep(1.0, 3e-3f).has_value());
        if (comm.rank() == 0) losses[sharded].push_back(static_cast<float>(*loss));
        if (s == 2 && sharded) {  // the state after 3 steps, by range, as a checkpoint holds it
          int64_t t = 0;
          auto ranges = model->CheckpointRanges(comm.rank(), comm.size(), &t);
          ASSERT_TRUE(ranges.has_value()) << ranges.error().ToString();
          std::lock_guard lock(mu);
          for (const CheckpointRange& r : *ranges) {
            auto& a = r.array == CheckpointArray::kParams  ? ckpt.params
                      : r.array == CheckpointArray::kAdamM ? ckpt.adam_m
                                                           : ckpt.adam_v;
            std::copy(r.values.begin(), r.values.end(), a.begin() + static_cast<std::ptrdiff_t>(r.offset));
          }
          ckpt.adam_t = t;
        }
      }
    });
  }
  ASSERT_EQ(losses[1].size(), 4u);
  EXPECT_EQ(losses[1], losses[0]);
  // Resumed from the checkpoint on a model initialised otherwise: rank 0 broadcasts the
  // arrays and each rank keeps its shard (RestoreState over its RestoreRequest), and the 4th
  // step's loss is the uninterrupted run's, bit for bit.
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    auto model = MakeZero3CpuTrainModelFromSeed(c, 123, ac, comm, /*prefetch=*/true).value();
    Checkpoint copy = ckpt;
    ASSERT_TRUE(model->RestoreState(&comm, comm.rank() == 0 ? &copy : nullptr, ckpt.adam_t));
    auto loss = model->TrainMicrobatches(1, B, T, load, nullptr);
    ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
    if (comm.rank() == 0) {
      EXPECT_EQ(static_cast<float>(*loss), losses[0][3]);
    }
  });
}

// GatheredParams' prefetch: the order of a kind of round is recorded and its next piece
// gathered ahead (hits); a different request is gathered when asked (a miss) and rewrites the
// record; every piece holds the whole buffer's values either way, and a shard changed after
// Invalidate is what the next round gathers.
TEST_P(ZeroWorldTest, PrefetchServesTheRecordedOrderAndWhatIsAsked) {
  const int world = GetParam();
  const size_t n = 1000;
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    std::vector<float> whole = Values(n, 11, 1.0f);  // every rank's view of the model
    const ZeroPartition part{n, comm.size()};
    GatheredParams g(comm, part, whole, std::vector<size_t>{400}, /*prefetch=*/true);
    auto ask = [&](size_t lo, size_t hi) {
      const float* p = g.Gather(lo, hi - lo);
      std::vector<float> got(p, p + (hi - lo));
      g.Release(lo, hi - lo);
      auto status = g.TakeError();
      ASSERT_TRUE(status.has_value()) << status.error().ToString();
      for (size_t i = lo; i < hi; ++i) {
        ASSERT_EQ(got[i - lo], whole[i]) << "rank " << comm.rank() << ": element " << i << " of ["
                                         << lo << ", " << hi << ")";
      }
    };
    auto round = [&](int key, std::vector<std::pair<size_t, size_t>> pieces, int64_t hits,
                     int64_t misses, const char* what) {
      const int64_t h0 = g.prefetch_hits(), m0 = g.prefetch_misses();
      g.BeginRound(key);
      for (auto [lo, hi] : pieces) ask(lo, hi);
      EXPECT_EQ(g.prefetch_hits() - h0, hits) << what;
      EXPECT_EQ(g.prefetch_misses() - m0, misses) << what;
    };
    round(0, {{0, 300}, {300, 700}, {700, 1000}}, 0, 3, "first round: nothing recorded");
    round(0, {{0, 300}, {300, 700}, {700, 1000}}, 3, 0, "the same order again");
    round(0, {{0, 300}, {100, 200}, {700, 1000}}, 1, 2, "a different second piece");
    round(0, {{0, 300}, {100, 200}, {700, 1000}}, 3, 0, "the rewritten record");
    round(1, {{300, 700}}, 0, 1, "another kind of round");
    // The shard changes between rounds (an optimizer step): the next round sees it.
    g.Invalidate();
    for (float& v : g.shard()) v += 1.0f;
    for (float& v : whole) v += 1.0f;
    round(0, {{0, 300}, {100, 200}, {700, 1000}}, 3, 0, "after the shard changed");
  });
}

// Stage 3's gathered working set is what is gathered at once, not two buffers of the largest
// piece: each piece gets a buffer of its own size (reused by the next piece of that size,
// freed before one of another size is allocated), and the head's wte (the
// last request of Forward and the first of the backward) is gathered once and kept between
// them. With prefetch (more than one rank) the most held at once is wte beside the next piece
// (wpe in Forward: wte + wpe), below the bound GatherBound gives and far below two
// embedding-sized buffers; without (one rank), the largest piece, wte. The pieces hold the
// right values: the losses are the same bits with and without prefetch (above).
TEST_P(ZeroWorldTest, GatheredWorkingSetIsWhatIsGatheredAtOnce) {
  const int world = GetParam();
  GptConfig c;
  c.vocab_size = 1024;  // wte (1024 x 32) larger than a block (12704 floats)
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  const size_t wte = 1024 * 32, wpe = 16 * 32, block = 12 * 32 * 32 + 13 * 32;
  const int B = 2, T = 16;
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    auto m = MakeZero3CpuTrainModelFromSeed(c, 5, AdamWConfig{}, comm, /*prefetch=*/true);
    ASSERT_TRUE(m.has_value()) << m.error().ToString();
    TrainModel& model = **m;
    const bool prefetch = world > 1;
    EXPECT_EQ(model.model_state_bytes().scratch -
                  (world == 1 ? 4 * block : 4 * (2 * block + std::min(block, ZeroPartition{c.num_parameters(), world}.size(comm.rank())))),
              4 * (prefetch ? wte + block : wte))
        << "the bound: the two largest pieces with prefetch, the largest without";
    auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) {
      for (size_t i = 0; i < in.size(); ++i) {
        in[i] = static_cast<int32_t>((i * 37 + a * 5 + comm.rank()) % c.vocab_size);
        out[i] = static_cast<int32_t>((i * 37 + a * 5 + comm.rank() + 1) % c.vocab_size);
      }
      return Result<void>{};
    };
    for (int s = 0; s < 3; ++s) {
      ASSERT_TRUE(model.TrainMicrobatches(2, B, T, load, nullptr).has_value());
      ASSERT_TRUE(model.ClipAndStep(1.0, 1e-3f).has_value());
    }
    const auto st = model.gather_stats();
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->peak_gathered_bytes, 4 * (prefetch ? wte + wpe : wte)) << "rank " << comm.rank();
    EXPECT_LT(st->peak_gathered_bytes, 2 * 4 * wte);
    EXPECT_TRUE(comm.Barrier().has_value());
  });
}

// Stage 3 reuses its piece buffers: a released piece's buffer serves the next piece of the
// same size (the blocks), so after the first step the buffers allocated per step do not
// grow with the number of layers (only the pieces of other sizes, wte, wpe, ln_f, allocate),
// and the most held at once stays what is gathered at once (the test above's figures).
TEST_P(ZeroWorldTest, GatherBuffersServeEveryBlockWithoutAnAllocation) {
  const int world = GetParam();
  const bool prefetch = world > 1;
  const int B = 2, T = 16;
  // Buffers allocated in steps 2 and 3, and the most held at once, for `layers` layers.
  auto run = [&](int layers) {
    GptConfig c;
    c.vocab_size = 1024;
    c.max_seq_len = 16;
    c.n_layer = layers;
    c.n_head = 2;
    c.n_embd = 32;
    std::mutex mu;
    std::pair<int64_t, size_t> out{0, 0};
    comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
      auto m = MakeZero3CpuTrainModelFromSeed(c, 5, AdamWConfig{}, comm, /*prefetch=*/true);
      ASSERT_TRUE(m.has_value()) << m.error().ToString();
      TrainModel& model = **m;
      auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> o) {
        for (size_t i = 0; i < in.size(); ++i) {
          in[i] = static_cast<int32_t>((i * 37 + a * 5 + comm.rank()) % c.vocab_size);
          o[i] = static_cast<int32_t>((i * 37 + a * 5 + comm.rank() + 1) % c.vocab_size);
        }
        return Result<void>{};
      };
      int64_t after_first = 0;
      for (int s = 0; s < 3; ++s) {
        ASSERT_TRUE(model.TrainMicrobatches(2, B, T, load, nullptr).has_value());
        ASSERT_TRUE(model.ClipAndStep(1.0, 1e-3f).has_value());
        if (s == 0) after_first = model.gather_stats()->allocations;
      }
      const auto st = model.gather_stats();
      ASSERT_TRUE(st.has_value());
      if (comm.rank() == 0) {
        std::lock_guard lock(mu);
        out = {st->allocations - after_first, st->peak_gathered_bytes};
      }
      EXPECT_TRUE(comm.Barrier().has_value());
    });
    return out;
  };
  const auto [two, two_peak] = run(2);
  const auto [six, six_peak] = run(6);
  EXPECT_GT(two, 0);
  EXPECT_EQ(six, two) << "the 4 more blocks allocated buffers of their own";
  const size_t wte = 1024 * 32, wpe = 16 * 32;
  EXPECT_EQ(two_peak, 4 * (prefetch ? wte + wpe : wte));
  EXPECT_EQ(six_peak, two_peak);
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroWorldTest, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace cohort::engine
