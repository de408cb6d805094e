// Tensor and pipeline parallelism against one rank (float32, CPU, shm (one case gloo over loopback), one
// thread per rank): every layout of tensor {1,2,4} x pipeline {1,2,4} x data {1,2} up to 8
// ranks, each schedule, uneven splits; 10 steps of training (accumulation, clipping, AdamW)
// give the single rank's losses, gradient norms and parameters to relative 1e-5. Every
// schedule and every pipeline split gives GPipe's gradients bit for bit (the arithmetic of
// a chunk does not depend on where it runs); fewer micro-batches than stages works;
// checkpoint state gathers to the logical model and scatters back in any layout.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "engine/checkpoint/sharded_state.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/model/gpt.h"
#include "engine/parallel/layout.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

constexpr int kB = 2, kT = 8;

GptConfig TinyConfig(int layers) {
  GptConfig c;
  c.vocab_size = 200;  // padded to 256: 64 rows per rank at tensor 4
  c.max_seq_len = kT;
  c.n_layer = layers;
  c.n_head = 4;
  c.n_embd = 32;
  return c;
}

// eps 1e-6 rather than 1e-8: some gradients are zero in exact arithmetic (the key bias: the
// softmax does not see a constant added to every key), so both runs hold rounding noise
// there, which AdamW with a tiny eps turns into full-size steps in unrelated directions.
AdamWConfig Adam() {
  AdamWConfig a;
  a.weight_decay = 0.1f;
  a.eps = 1e-6f;
  return a;
}

// Token ids of micro-batch `k` of step `step` (every replica reads its own k's).
void FillBatch(int step, int k, std::span<int32_t> in, std::span<int32_t> out, int vocab) {
  uint64_t x = 0x9e3779b97f4a7c15ULL * (step * 1000 + k + 1);
  std::vector<int32_t> seq(kT + 1);
  for (int b = 0; b < kB; ++b) {
    // Arithmetic sequences mod 31 from a random start and stride: learnable in a few steps.
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int start = static_cast<int>((x >> 33) % 31), stride = 1 + static_cast<int>((x >> 40) % 3);
    for (int t = 0; t <= kT; ++t) seq[t] = (start + stride * t) % 31 % vocab;
    for (int t = 0; t < kT; ++t) {
      in[b * kT + t] = seq[t];
      out[b * kT + t] = seq[t + 1];
    }
  }
}

struct RunResult {
  std::vector<double> losses, norms;
  std::vector<float> params;  // logical, after the last step
  std::vector<float> grads;   // logical, of the last step (before clipping)
};

constexpr int kSteps = 10;
constexpr double kClip = 0.5;  // low enough that clipping engages
constexpr float kLr = 3e-3f;

// One rank, `replicas` x `m` micro-batches per step.
RunResult RunSingle(const GptConfig& cfg, int replicas, int m, int steps) {
  GptModel init = GptModel::Create(cfg).value();
  init.InitRandom(7);
  auto model = MakeCpuTrainModel(std::move(init), Adam()).value();
  RunResult r;
  for (int step = 0; step < steps; ++step) {
    auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
      FillBatch(step, a, in, out, cfg.vocab_size);
      return {};
    };
    r.losses.push_back(model->TrainMicrobatches(replicas * m, kB, kT, load, nullptr).value());
    auto g = model->grads();
    r.grads.assign(g.begin(), g.end());
    r.norms.push_back(model->ClipAndStep(kClip, kLr).value());
  }
  CheckpointView view;
  EXPECT_TRUE(model->StateForCheckpoint(view).has_value());
  r.params.assign(view.params.begin(), view.params.end());
  return r;
}

// The layout on `world` ranks, one thread each; rank 0's view of the run.
RunResult RunParallel(const GptConfig& cfg, ParallelConfig pc, int world, int m, int steps,
                      const std::string& backend = "shm") {
  RunResult result;
  std::mutex mu;
  comm::commtest::RunRanks(backend, world, [&](comm::Communicator& comm) {
    omp_set_num_threads(1);
    auto layout = MakeParallelLayout(pc, cfg, world);
    ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
    // Initial parameters both ways: each rank generating its slices from the seed, or
    // cutting them from a whole model (an imported file); they are the same values.
    GptModel init = GptModel::Create(cfg).value();
    init.InitRandom(7);
    const bool whole = layout->data > 1;
    std::string desc;
    auto made = MakeParallelCpuTrainModel(cfg, InitialParams{7, whole ? &init : nullptr}, Adam(),
                                          *layout, comm, &desc);
    ASSERT_TRUE(made.has_value()) << made.error().ToString();
    TrainModel& model = **made;
    const int replica = layout->CoordsOf(comm.rank()).data;
    RunResult mine;
    for (int step = 0; step < steps; ++step) {
      auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
        FillBatch(step, replica * m + a, in, out, cfg.vocab_size);
        return {};
      };
      auto loss = model.TrainMicrobatches(m, kB, kT, load, nullptr);
      ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
      float avg = static_cast<float>(*loss);
      ASSERT_TRUE(comm.AllReduce(&avg, &avg, 1, comm::DataType::kFloat32, comm::ReduceOp::kAvg));
      mine.losses.push_back(avg);
      if (step == steps - 1) {
        // Replicated tensors (LayerNorms, row-parallel biases, wpe, ln_f) get bit-identical
        // gradients on every rank of a stage (every tensor rank and replica), so their
        // copies never drift apart: a checksum of those gradients, compared over the world.
        const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(*layout, cfg, comm.rank()));
        uint64_t hash = 1469598103934665603ULL;
        for (const ShardTensor& t : shard.tensors) {
          if (t.tied_head_copy || t.local.numel != size_t(t.logical_rows * t.logical_cols)) continue;
          for (size_t i = t.local.offset; i < t.local.offset + t.local.numel; ++i) {
            uint32_t bits;
            std::memcpy(&bits, &model.grads()[i], 4);
            hash = (hash ^ bits) * 1099511628211ULL;
          }
        }
        std::vector<int64_t> hashes(world);
        int64_t mine_hash = static_cast<int64_t>(hash);
        std::vector<size_t> ones(world, 1);
        ASSERT_TRUE(comm.AllGather(&mine_hash, hashes.data(), ones, comm::DataType::kInt64));
        for (int r = 0; r < world; ++r) {
          if (layout->CoordsOf(r).stage == layout->CoordsOf(comm.rank()).stage) {
            EXPECT_EQ(hashes[r], mine_hash) << "replicated gradients of rank " << r << " and "
                                            << comm.rank() << " differ";
          }
        }
        // The logical gradient, gathered as if it were the parameters.
        std::vector<float> g(model.grads().begin(), model.grads().end()), zero(g.size());
        auto full = GatherShardedState(comm, *layout, cfg, {g, zero, zero});
        ASSERT_TRUE(full.has_value()) << full.error().ToString();
        mine.grads = std::move(full->params);
      }
      auto norm = model.ClipAndStep(kClip, kLr);
      ASSERT_TRUE(norm.has_value()) << norm.error().ToString();
      mine.norms.push_back(*norm);
    }
    CheckpointView view;
    ASSERT_TRUE(model.StateForCheckpoint(view).has_value());
    if (comm.rank() == 0) {
      mine.params.assign(view.params.begin(), view.params.end());
      std::lock_guard lock(mu);
      result = std::move(mine);
    }
  });
  return result;
}

// ‖a − b‖ / ‖b‖ (Euclidean) over each tensor of the logical layout. Elementwise agreement
// is not a meaningful target: AdamW divides each gradient by its own magnitude, so an
// element whose gradient is rounding noise moves by ±lr whatever its value.
void ExpectParamsClose(const GptConfig& cfg, const std::vector<float>& got,
                       const std::vector<float>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  GptModel shape = GptModel::Create(cfg).value();
  for (const ParamTensor& t : shape.tensors()) {
    double diff = 0, norm = 0;
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      const double d = double(got[i]) - double(want[i]);
      diff += d * d;
      norm += double(want[i]) * double(want[i]);
    }
    EXPECT_LE(std::sqrt(diff), rel * std::sqrt(norm)) << what << ": tensor " << t.name;
  }
}

void ExpectRunsClose(const GptConfig& cfg, const RunResult& got, const RunResult& want,
                     const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s]))
        << what << " loss of step " << s + 1;
    EXPECT_NEAR(got.norms[s], want.norms[s], 1e-5 * std::abs(want.norms[s]))
        << what << " gradient norm of step " << s + 1;
  }
  ExpectParamsClose(cfg, got.params, want.params, 1e-5, what + " parameters");
}

struct Case {
  int tensor, pipeline, data, layers;
  std::string schedule;
  int virtual_stages = 1;
  int microbatches = 4;
  // The engine is the same over either host backend; the comm suite tests each. One case
  // runs over TCP (gloo), as ranks on several hosts do.
  std::string backend = "shm";
};

std::string Name(const Case& c) {
  return fmt::format("t{}_p{}_d{}_L{}_{}_v{}_m{}{}", c.tensor, c.pipeline, c.data, c.layers,
                     c.schedule, c.virtual_stages, c.microbatches,
                     c.backend == "shm" ? "" : "_" + c.backend);
}
std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return Name(info.param); }
void PrintTo(const Case& c, std::ostream* os) { *os << Name(c); }

class ParallelParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(ParallelParityTest, MatchesOneRank) {
  const Case& c = GetParam();
  const GptConfig cfg = TinyConfig(c.layers);
  ParallelConfig pc;
  pc.tensor = c.tensor;
  pc.pipeline = c.pipeline;
  pc.schedule = c.schedule;
  pc.virtual_stages = c.virtual_stages;
  const RunResult single = RunSingle(cfg, c.data, c.microbatches, kSteps);
  const RunResult par =
      RunParallel(cfg, pc, c.tensor * c.pipeline * c.data, c.microbatches, kSteps, c.backend);
  ExpectRunsClose(cfg, par, single, Name(c));
  // The loss falls: the run trains.
  EXPECT_LT(single.losses.back(), single.losses.front());
}

std::vector<Case> AllLayouts() {
  std::vector<Case> cases;
  for (int t : {1, 2, 4}) {
    for (int p : {1, 2, 4}) {
      for (int d : {1, 2}) {
        if (t * p * d > 8 || (t == 1 && p == 1)) continue;
        // Uneven stage splits: 5 layers on 2 stages, 7 on 4.
        const int layers = p == 4 ? 7 : 5;
        if (p == 1) {
          cases.push_back({t, p, d, layers, "1f1b"});
          continue;
        }
        cases.push_back({t, p, d, layers, "gpipe"});
        cases.push_back({t, p, d, layers, "1f1b"});
        // Interleaving needs 2 chunks per stage: 8 layers on 4 stages.
        cases.push_back({t, p, d, p == 4 ? 8 : 5, "interleaved", 2});
      }
    }
  }
  // Fewer micro-batches than stages, and interleaving with m not a multiple of p.
  cases.push_back({1, 4, 1, 7, "1f1b", 1, 2});
  cases.push_back({1, 4, 1, 8, "interleaved", 2, 3});
  cases.push_back({2, 2, 1, 5, "interleaved", 2, 3});
  cases.push_back({2, 2, 2, 5, "1f1b", 1, 4, "gloo"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ParallelParityTest, ::testing::ValuesIn(AllLayouts()), CaseName);

// Every schedule, chunking and micro-batch order produces GPipe's gradients exactly.
TEST(PipelineSchedulesTest, EveryScheduleGivesGpipesGradientsBitForBit) {
  const GptConfig cfg = TinyConfig(8);
  for (int m : {1, 3, 4, 6}) {
    ParallelConfig gpipe;
    gpipe.pipeline = 2;
    gpipe.schedule = "gpipe";
    const RunResult want = RunParallel(cfg, gpipe, 2, m, 1);
    ASSERT_FALSE(want.grads.empty());
    struct Variant {
      int pipeline;
      const char* schedule;
      int v;
    };
    for (Variant var : {Variant{2, "1f1b", 1}, Variant{4, "1f1b", 1}, Variant{4, "gpipe", 1},
                        Variant{2, "interleaved", 2}, Variant{4, "interleaved", 2},
                        Variant{2, "interleaved", 4}}) {
      ParallelConfig pc;
      pc.pipeline = var.pipeline;
      pc.schedule = var.schedule;
      pc.virtual_stages = var.v;
      const RunResult got = RunParallel(cfg, pc, var.pipeline, m, 1);
      const std::string what =
          fmt::format("{} on {} stages, {} chunks each, m={}", var.schedule, var.pipeline, var.v, m);
      ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
      size_t differ = 0;
      for (size_t i = 0; i < want.grads.size(); ++i) differ += got.grads[i] != want.grads[i];
      EXPECT_EQ(differ, 0u) << what << ": gradient elements that differ from GPipe's";
      EXPECT_NEAR(got.losses[0], want.losses[0], 1e-6 * want.losses[0]) << what;
    }
  }
}

// Each rank's slices generated from the seed are exactly the slices of the whole model
// initialised from it.
TEST(ShardedStateTest, ShardsInitialiseFromTheSeedAsTheWholeModelDoes) {
  const GptConfig cfg = TinyConfig(5);
  GptModel whole = GptModel::Create(cfg).value();
  whole.InitRandom(99);
  for (auto [t, p] : {std::pair{2, 1}, std::pair{4, 2}, std::pair{1, 4}, std::pair{2, 2}}) {
    ParallelConfig pc;
    pc.tensor = t;
    pc.pipeline = p;
    auto layout = MakeParallelLayout(pc, cfg, t * p).value();
    for (int r = 0; r < t * p; ++r) {
      const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, cfg, r));
      std::vector<float> cut(shard.total), generated(shard.total, -1.0f);
      ExtractShard(shard, whole.params(), cut);
      GenerateInitialParams(cfg, 99, [&](const ParamTensor& tensor, std::span<const float> v) {
        ExtractTensor(shard, tensor, v, generated);
      });
      EXPECT_EQ(generated, cut) << "tensor " << t << " pipeline " << p << " rank " << r;
    }
  }
}

// Parameters and AdamW moments read into any layout's shards by the logical runs a resuming
// rank asks for (LogicalRunsOf, what LoadCheckpointRanges fills) gather back unchanged: the
// runs and the gather place every slice where the other takes it.
TEST(ShardedStateTest, LogicalRunsThenGatherIsTheIdentityInEveryLayout) {
  const GptConfig cfg = TinyConfig(5);
  LogicalState full;
  const size_t n = cfg.num_parameters();
  for (auto* v : {&full.params, &full.adam_m, &full.adam_v}) {
    v->resize(n);
    for (size_t i = 0; i < n; ++i) (*v)[i] = static_cast<float>(i % 9973) + (v == &full.adam_m ? 0.25f : v == &full.adam_v ? 0.5f : 0.0f);
  }
  for (auto [t, p, d] : {std::tuple{2, 1, 2}, std::tuple{1, 2, 2}, std::tuple{2, 2, 1},
                         std::tuple{4, 2, 1}, std::tuple{1, 4, 1}}) {
    ParallelConfig pc;
    pc.tensor = t;
    pc.pipeline = p;
    const int world = t * p * d;
    std::mutex mu;
    LogicalState back;
    comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
      auto layout = MakeParallelLayout(pc, cfg, world).value();
      const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, cfg, comm.rank()));
      std::vector<float> params(shard.total), m(shard.total), v(shard.total);
      const std::pair<std::vector<float>*, const std::vector<float>*> arrays[] = {
          {&params, &full.params}, {&m, &full.adam_m}, {&v, &full.adam_v}};
      for (const auto& [mine, logical] : arrays) {
        for (const ParamRun& run : LogicalRunsOf(shard, 0, shard.total, mine->data())) {
          std::copy_n(logical->begin() + static_cast<std::ptrdiff_t>(run.offset), run.count,
                      run.out);
        }
      }
      auto got = GatherShardedState(comm, layout, cfg, {params, m, v});
      ASSERT_TRUE(got.has_value()) << got.error().ToString();
      if (comm.rank() == 0) {
        std::lock_guard lock(mu);
        back = std::move(*got);
      }
    });
    EXPECT_EQ(back.params, full.params) << t << "x" << p << "x" << d;
    EXPECT_EQ(back.adam_m, full.adam_m) << t << "x" << p << "x" << d;
    EXPECT_EQ(back.adam_v, full.adam_v) << t << "x" << p << "x" << d;
  }
}

}  // namespace
}  // namespace cohort::engine
