// ZeRO stages 2 and 3 inside tensor/pipeline layouts (trainer/shard_zero.h), on the CPU with
// one thread per rank (gloo over loopback): tensor 2 x data 2 and pipeline 2 x data 2 train as
// the same layout without ZeRO (losses and gradient norms to relative 1e-5: the data average
// is a reduce-scatter instead of an all-reduce, another summation order), each rank's model
// states are the formula's bytes, ZeRO-3's prefetch gives the losses and parameters of no
// prefetch bit for bit, and a checkpoint written by range with (tensor 2, data 2, ZeRO-3)
// resumes with (pipeline 2, data 2, ZeRO-2) and on one rank without ZeRO, the losses going
// on as in an uninterrupted run.
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "temp_dir.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_shard.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/ddp.h"
#include "engine/parallel/layout.h"
#include "engine/parallel/zero.h"
#include "engine/parallel/zero_params.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

constexpr int kB = 2, kT = 16, kM = 2;  // micro-batches per replica and step
constexpr double kClip = 0.5;            // low enough that clipping engages
constexpr float kLr = 3e-3f;

GptConfig Tiny() {
  GptConfig c;
  c.vocab_size = 100;  // padded to 128
  c.max_seq_len = kT;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 32;
  return c;
}

// eps 1e-6 (as parallel_parity_test.cc: gradients that are zero in exact arithmetic hold
// rounding noise that a tiny eps turns into full steps).
AdamWConfig Adam() {
  AdamWConfig a;
  a.weight_decay = 0.1f;
  a.eps = 1e-6f;
  return a;
}

void FillBatch(int step, int k, std::span<int32_t> in, std::span<int32_t> out, int vocab) {
  uint64_t x = 0x9e3779b97f4a7c15ULL * (step * 1000 + k + 1);
  for (int b = 0; b < kB; ++b) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int start = static_cast<int>((x >> 33) % 31), stride = 1 + static_cast<int>((x >> 40) % 3);
    for (int t = 0; t < kT; ++t) {
      in[b * kT + t] = (start + stride * t) % 31 % vocab;
      out[b * kT + t] = (start + stride * (t + 1)) % 31 % vocab;
    }
  }
}

struct Layout {
  int tensor = 1, pipeline = 1, data = 1;
  int zero = 0;
  bool prefetch = true;
  std::string Name() const {
    return fmt::format("t{}_p{}_d{}_zero{}{}", tensor, pipeline, data, zero,
                       prefetch ? "" : "_noprefetch");
  }
};

struct ZeroRun {
  std::vector<double> losses, norms;
  // Resumed by range from files: per rank, the tensor bytes it read and the step directory it
  // loaded; rank 0's warnings (skipped checkpoints).
  std::vector<uint64_t> bytes_read;
  std::vector<std::string> resumed;
  std::vector<std::string> warnings;
  Checkpoint state;  // the logical state after the last step, assembled from every rank's ranges
  std::vector<TrainModel::ModelStateBytes> bytes;  // per rank
  std::vector<size_t> initial_values;               // per rank: generated from the seed
  std::vector<std::string> problems;               // checks made inside the ranks
};

// Copies `r`'s runs into the logical array; counts how often each element was written.
void Place(const CheckpointRange& r, std::vector<float>& out, std::vector<int>& written) {
  for (size_t k = 0; k < r.runs; ++k) {
    for (size_t i = 0; i < r.width; ++i) {
      out[r.offset + k * r.stride + i] = r.values[k * r.width + i];
      ++written[r.offset + k * r.stride + i];
    }
  }
}

// Where a run starts and what it leaves: resumed from `from` (in memory: rank 0 holds the
// whole checkpoint and RestoreState broadcasts it, every rank keeping what its RestoreRequest
// asks for: the reader's reference) or from the newest checkpoint in `from_dir`, every rank reading its own ranges
// (LoadCheckpointRanges); at the end a checkpoint written by range into `to_dir`.
struct Io {
  const Checkpoint* from = nullptr;
  std::string from_dir, to_dir;
};
Io InMemory(const Checkpoint* from, std::string to_dir = {}) { return {from, {}, std::move(to_dir)}; }
Io ByRange(std::string from_dir, std::string to_dir = {}) {
  return {nullptr, std::move(from_dir), std::move(to_dir)};
}
Io WriteTo(std::string to_dir) { return {nullptr, {}, std::move(to_dir)}; }

// `steps` steps (numbered from `first`) of layout `l` (a model split over ranks, or data
// parallelism: ZeRO 0-3 over every rank). The global batch is 4 micro-batches per step
// whatever the layout: 4 / data per replica.
ZeroRun Train(const Layout& l, int first, int steps, const Io& io) {
  const GptConfig cfg = Tiny();
  const size_t n = cfg.num_parameters();
  const int world = l.tensor * l.pipeline * l.data;
  ZeroRun run;
  run.state.params.assign(n, 0.0f);
  run.state.adam_m.assign(n, 0.0f);
  run.state.adam_v.assign(n, 0.0f);
  run.bytes.resize(world);
  run.initial_values.resize(world);
  run.bytes_read.resize(world);
  run.resumed.resize(world);
  std::vector<int> written[3] = {std::vector<int>(n), std::vector<int>(n), std::vector<int>(n)};
  std::mutex mu;
  comm::commtest::RunRanks("shm", world, [&](comm::Communicator& comm) {
    omp_set_num_threads(1);
    ParallelConfig pc;
    pc.tensor = l.tensor;
    pc.pipeline = l.pipeline;
    pc.zero = l.zero;
    auto layout = MakeParallelLayout(pc, cfg, world);
    ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
    std::unique_ptr<TrainModel> model;
    if (layout->model_parallel()) {
      auto made = MakeParallelCpuTrainModel(cfg, InitialParams{7, nullptr}, Adam(), *layout, comm,
                                            nullptr, l.zero, l.prefetch);
      ASSERT_TRUE(made.has_value()) << made.error().ToString();
      model = std::move(*made);
    } else if (l.zero == 3) {
      model = MakeZero3CpuTrainModelFromSeed(cfg, 7, Adam(), comm, l.prefetch).value();
    } else {
      GptModel init = GptModel::Create(cfg).value();
      init.InitRandom(7);
      model = l.zero > 0 ? MakeZeroCpuTrainModel(std::move(init), Adam(), comm, l.zero).value()
                         : MakeCpuTrainModel(std::move(init), Adam()).value();
    }
    // Data parallelism's average (the trainer's DdpReducer) for ZeRO 0 and 1 on several ranks.
    std::unique_ptr<DdpReducer> reducer;
    if (!layout->model_parallel() && world > 1 && l.zero < 2) {
      reducer = std::make_unique<DdpReducer>(comm, model->grads(), size_t{1} << 16);
    }
    if (io.from) {
      Checkpoint copy = *io.from;
      auto restored = model->RestoreState(world > 1 ? &comm : nullptr,
                                          comm.rank() == 0 ? &copy : nullptr, io.from->adam_t);
      ASSERT_TRUE(restored.has_value()) << restored.error().ToString();
    }
    TrainModelCheckpointGroup group(*model, comm);
    if (!io.from_dir.empty()) {
      auto loaded = LoadCheckpointRanges(&group, io.from_dir, cfg, model->RestoreRequest());
      ASSERT_TRUE(loaded.has_value()) << loaded.error().ToString();
      ASSERT_TRUE(model->FinishRestore(loaded->adam_t).has_value());
      std::lock_guard lock(mu);
      run.bytes_read[comm.rank()] = loaded->bytes_read;
      run.resumed[comm.rank()] = std::filesystem::path(loaded->path).filename().string();
      if (comm.rank() == 0) run.warnings = loaded->warnings;
    }
    const int replica = layout->CoordsOf(comm.rank()).data;
    const int m = 4 / layout->data;  // the same global batch in every layout
    ZeroRun mine;
    for (int step = first; step < first + steps; ++step) {
      auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
        FillBatch(step, replica * m + a, in, out, cfg.vocab_size);
        return {};
      };
      auto loss = model->TrainMicrobatches(m, kB, kT, load, reducer.get());
      ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
      float avg = static_cast<float>(*loss);
      if (world > 1) {
        ASSERT_TRUE(comm.AllReduce(&avg, &avg, 1, comm::DataType::kFloat32, comm::ReduceOp::kAvg));
      }
      mine.losses.push_back(avg);
      auto norm = model->ClipAndStep(kClip, kLr);
      ASSERT_TRUE(norm.has_value()) << norm.error().ToString();
      mine.norms.push_back(*norm);
    }
    int64_t t = 0;
    auto ranges = model->CheckpointRanges(replica, layout->data, &t);
    ASSERT_TRUE(ranges.has_value()) << ranges.error().ToString();
    if (!io.to_dir.empty()) {
      CheckpointHeader header;
      header.config = cfg;
      header.adam_t = t;
      header.progress.step = first + steps;
      auto saved = SaveCheckpointRanges(&group, io.to_dir, header, *ranges, 0);
      ASSERT_TRUE(saved.has_value()) << saved.error().ToString();
    }
    std::lock_guard lock(mu);
    run.bytes[comm.rank()] = model->model_state_bytes();
    run.initial_values[comm.rank()] = model->initial_values();
    for (const CheckpointRange& r : *ranges) {
      const int a = static_cast<int>(r.array);
      std::vector<float>& out = a == 0 ? run.state.params : a == 1 ? run.state.adam_m : run.state.adam_v;
      Place(r, out, written[a]);
    }
    run.state.adam_t = t;
    if (comm.rank() == 0) {
      run.losses = mine.losses;
      run.norms = mine.norms;
    }
  });
  // The ranges tile the logical model: every element written exactly once per array.
  for (int a = 0; a < 3; ++a) {
    size_t wrong = 0;
    for (int w : written[a]) wrong += w != 1;
    if (wrong) run.problems.push_back(fmt::format("array {}: {} elements not written once", a, wrong));
  }
  run.state.config = cfg;
  return run;
}

// ‖a − b‖ / ‖b‖ per tensor (AdamW makes elementwise agreement meaningless for noise-sized
// gradients: see parallel_parity_test.cc).
void ExpectParamsClose(const std::vector<float>& got, const std::vector<float>& want, double rel,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  GptModel shape = GptModel::Create(Tiny()).value();
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

void ExpectLossesClose(const ZeroRun& got, const ZeroRun& want, size_t want_from, const std::string& what) {
  for (size_t s = 0; s < got.losses.size(); ++s) {
    const double w = want.losses[want_from + s];
    EXPECT_NEAR(got.losses[s], w, 1e-5 * std::abs(w)) << what << " loss of step " << s + 1;
    const double wn = want.norms[want_from + s];
    EXPECT_NEAR(got.norms[s], wn, 1e-5 * std::abs(wn)) << what << " norm of step " << s + 1;
  }
}

class ZeroInLayoutTest : public ::testing::TestWithParam<Layout> {};

TEST_P(ZeroInLayoutTest, TrainsAsTheLayoutWithoutZeroInTheFormulasMemory) {
  const Layout l = GetParam();
  Layout plain = l;
  plain.zero = 0;
  constexpr int kSteps = 4;
  const ZeroRun want = Train(plain, 0, kSteps, {});
  const ZeroRun got = Train(l, 0, kSteps, {});
  EXPECT_TRUE(got.problems.empty()) << got.problems.front();
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps));
  ExpectLossesClose(got, want, 0, l.Name());
  ExpectParamsClose(got.state.params, want.state.params, 1e-5, l.Name() + " parameters");
  EXPECT_LT(want.losses.back(), want.losses.front());  // it trains
  // Model states per rank, counted where allocated: the ZeRO paper's formula over this
  // position's shard of Ψ_s floats cut over the data group (size(r) floats here):
  // parameters 4Ψ_s (stage 2) or 4·size(r) (stage 3), gradients 4·size(r), moments 8·size(r).
  const GptConfig cfg = Tiny();
  ParallelConfig pc;
  pc.tensor = l.tensor;
  pc.pipeline = l.pipeline;
  const int world = l.tensor * l.pipeline * l.data;
  const ParallelLayout layout = MakeParallelLayout(pc, cfg, world).value();
  for (int r = 0; r < world; ++r) {
    const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, cfg, r));
    const size_t psi = shard.total;
    const ZeroPartition part{psi, layout.data};
    const size_t mine = part.size(layout.CoordsOf(r).data);
    const TrainModel::ModelStateBytes& b = got.bytes[r];
    EXPECT_EQ(b.params, 4 * (l.zero == 3 ? mine : psi)) << l.Name() << " rank " << r;
    EXPECT_EQ(b.grads, 4 * mine) << l.Name() << " rank " << r;
    EXPECT_EQ(b.optimizer, 8 * mine) << l.Name() << " rank " << r;
    // No whole gradient buffer: the scratch is two piece buffers of the largest piece but
    // wte's (a block here) and a receive buffer, the slices of wte that another stage holds a
    // copy of (each accumulates over the step: pipeline 2's first and last stage; with
    // tensor 2 alone wte goes in row chunks like the other pieces), and stage 3's gathered
    // pieces (the two largest: prefetch).
    size_t piece = 0, wte = 0;
    for (size_t c = 0; c < shard.chunks.size(); ++c) {
      const ShardChunkPieces p = ShardParamPieces(shard, static_cast<int>(c));
      piece = std::max({piece, p.wpe.size(), p.ln_f.size()});
      for (const ShardBlockOffsets& w : shard.chunks[c].blocks) piece = std::max(piece, w.end - w.begin);
      if (p.wte.size() == 0 || p.head_wte.size() == 0) wte += p.wte.size() + p.head_wte.size();
    }
    if (l.pipeline == 1) {
      EXPECT_EQ(wte, 0u) << "tensor x data: no slice-sized buffer";
    }
    const size_t gathered =
        l.zero == 3 ? GatherBound(ShardParamPieceSizes(shard), l.prefetch) : 0;
    EXPECT_EQ(b.scratch, 4 * (2 * piece + std::min(piece, mine) + wte + gathered))
        << l.Name() << " rank " << r;
    // Sharded init: a ZeRO-3 rank generated its part of the shard from the seed, nothing else.
    EXPECT_EQ(got.initial_values[r], l.zero == 3 ? mine : psi) << l.Name() << " rank " << r;
  }
}

// GenerateInitialRuns gives InitRandom's values for any runs, in any order, overlapping ones
// too (a tied copy held twice), and writes nothing else.
TEST(ShardedInitTest, RunsGetInitRandomsValuesAlone) {
  GptConfig cfg = Tiny();
  cfg.vocab_size = 97;  // padded rows, and an odd count of wte's random values
  GptModel whole = GptModel::Create(cfg).value();
  whole.InitRandom(5);
  const size_t n = cfg.num_parameters();
  std::vector<ParamRun> runs;
  // Runs across tensor boundaries, single elements, a run inside another, the last element.
  const std::vector<std::pair<size_t, size_t>> spans = {
      {n - 1, 1}, {0, 10}, {3, 2}, {97 * 32 - 5, 300}, {5000, 1}, {5001, 7000}, {9000, 100},
      {n / 2, n / 4}, {n / 2 + 3, 17}};
  size_t at = 0;
  for (auto [lo, count] : spans) at += count;
  std::vector<float> buffer(at, -7.0f);
  at = 0;
  for (auto [lo, count] : spans) {
    runs.push_back({lo, count, buffer.data() + at});
    at += count;
  }
  EXPECT_EQ(GenerateInitialRuns(cfg, 5, runs), at);
  for (const ParamRun& r : runs) {
    for (size_t i = 0; i < r.count; ++i) {
      ASSERT_EQ(r.out[i], whole.params()[r.offset + i]) << "element " << r.offset + i;
    }
  }
  // A shard's part maps to its logical runs: the whole shard's values come out as ExtractShard's.
  ParallelConfig pc;
  pc.tensor = 2;
  pc.pipeline = 2;
  const ParallelLayout layout = MakeParallelLayout(pc, cfg, 4).value();
  const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, cfg, 3));
  std::vector<float> want(shard.total), got(shard.total / 3 + 1);
  ExtractShard(shard, whole.params(), want);
  const size_t lo = shard.total / 3, hi = lo + got.size();
  EXPECT_EQ(GenerateInitialRuns(cfg, 5, LogicalRunsOf(shard, lo, hi, got.data())), got.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + static_cast<std::ptrdiff_t>(lo)));
}

INSTANTIATE_TEST_SUITE_P(Layouts, ZeroInLayoutTest,
                         ::testing::Values(Layout{2, 1, 2, 2}, Layout{2, 1, 2, 3},
                                           Layout{1, 2, 2, 2}, Layout{1, 2, 2, 3}),
                         [](const auto& info) { return info.param.Name(); });

TEST(ZeroInLayoutPrefetchTest, PrefetchGivesTheSameBitsAsNoPrefetch) {
  for (Layout l : {Layout{2, 1, 2, 3}, Layout{1, 2, 2, 3}}) {
    Layout off = l;
    off.prefetch = false;
    const ZeroRun with = Train(l, 0, 3, {});
    const ZeroRun without = Train(off, 0, 3, {});
    EXPECT_EQ(with.losses, without.losses) << l.Name();
    EXPECT_EQ(with.norms, without.norms) << l.Name();
    EXPECT_EQ(with.state.params, without.state.params) << l.Name();
    EXPECT_EQ(with.state.adam_v, without.state.adam_v) << l.Name();
  }
}

// A checkpoint of (tensor 2, data 2, ZeRO-3), written by range, resumes with (pipeline 2,
// data 2, ZeRO-2) and then on one rank without ZeRO; the losses continue the uninterrupted
// (tensor 2, data 2, ZeRO-3) run's.
TEST(ZeroInLayoutCheckpointTest, ResumesInOtherLayoutsAndStages) {
  const Layout tp_z3{2, 1, 2, 3}, pp_z2{1, 2, 2, 2}, one{1, 1, 1, 0};
  const ZeroRun whole = Train(tp_z3, 0, 6, {});
  const ZeroRun a = Train(tp_z3, 0, 2, {});
  ASSERT_TRUE(a.problems.empty()) << a.problems.front();
  ExpectLossesClose(a, whole, 0, "first part");
  const ZeroRun b = Train(pp_z2, 2, 2, InMemory(&a.state));
  ASSERT_TRUE(b.problems.empty()) << b.problems.front();
  ExpectLossesClose(b, whole, 2, "resumed with pipeline 2 x data 2, ZeRO-2");
  EXPECT_EQ(b.state.adam_t, 4);
  const ZeroRun c = Train(one, 4, 2, InMemory(&b.state));
  ExpectLossesClose(c, whole, 4, "resumed on one rank without ZeRO");
  ExpectParamsClose(c.state.params, whole.state.params, 1e-5, "after the chain");
}

using testing::TempDir;

void ExpectSameRun(const ZeroRun& got, const ZeroRun& want, const std::string& what) {
  EXPECT_EQ(got.losses, want.losses) << what;
  EXPECT_EQ(got.norms, want.norms) << what;
  EXPECT_EQ(got.state.params, want.state.params) << what;
  EXPECT_EQ(got.state.adam_m, want.state.adam_m) << what;
  EXPECT_EQ(got.state.adam_v, want.state.adam_v) << what;
  EXPECT_EQ(got.state.adam_t, want.state.adam_t) << what;
}

// Resume by range: every rank reads only the written ranges it overlaps (LoadCheckpointRanges
// with the model's RestoreRequest), and trains on bit for bit as when rank 0 holds the whole
// checkpoint in memory and broadcasts it (RestoreState), across layouts: data 4 with ZeRO-3
// -> data 4 with ZeRO-3 (each rank reads exactly its shard of the three arrays: 12 bytes per
// parameter of its shard) -> tensor 2 x data 2 with ZeRO-3 -> pipeline 2 x data 2 with ZeRO-2
// -> one rank without ZeRO, the losses continuing those of the uninterrupted data 4 ZeRO-3 run.
TEST(ZeroInLayoutCheckpointTest, EachRankReadsItsOwnRangesInAnyLayout) {
  const Layout d4_z3{1, 1, 4, 3}, tp_z3{2, 1, 2, 3}, pp_z2{1, 2, 2, 2}, one{1, 1, 1, 0};
  const size_t n = Tiny().num_parameters();
  const ZeroRun whole = Train(d4_z3, 0, 8, {});
  TempDir dir[4];
  const ZeroRun a = Train(d4_z3, 0, 2, WriteTo(dir[0].path()));
  ExpectLossesClose(a, whole, 0, "first part");
  // The same layout: each rank reads its shard, nothing else.
  const ZeroRun b = Train(d4_z3, 2, 2, ByRange(dir[0].path(), dir[1].path()));
  const ZeroRun b_whole = Train(d4_z3, 2, 2, InMemory(&a.state));
  ExpectSameRun(b, b_whole, "data 4 ZeRO-3 resumed by range");
  ExpectLossesClose(b, whole, 2, "data 4 ZeRO-3 resumed");
  const ZeroPartition part{n, 4};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(b.bytes_read[r], 12 * part.size(r)) << "rank " << r << " of data 4 ZeRO-3";
    EXPECT_EQ(b.resumed[r], "step_00000002");
  }
  const ZeroRun c = Train(tp_z3, 4, 2, ByRange(dir[1].path(), dir[2].path()));
  ExpectSameRun(c, Train(tp_z3, 4, 2, InMemory(&b.state)), "tensor 2 x data 2 ZeRO-3 by range");
  ExpectLossesClose(c, whole, 4, "resumed with tensor 2 x data 2, ZeRO-3");
  const ZeroRun d = Train(pp_z2, 6, 1, ByRange(dir[2].path(), dir[3].path()));
  ExpectSameRun(d, Train(pp_z2, 6, 1, InMemory(&c.state)), "pipeline 2 x data 2 ZeRO-2 by range");
  ExpectLossesClose(d, whole, 6, "resumed with pipeline 2 x data 2, ZeRO-2");
  for (int r = 0; r < 4; ++r) {
    // A rank reads each written range it needs part of whole (to check its CRC), so across
    // layouts it reads more than it keeps, but not the whole checkpoint.
    EXPECT_LT(c.bytes_read[r], 12 * n) << "rank " << r << " of tensor 2 x data 2";
    EXPECT_LT(d.bytes_read[r], 12 * n) << "rank " << r << " of pipeline 2 x data 2";
  }
  const ZeroRun e = Train(one, 7, 1, ByRange(dir[3].path()));
  ExpectSameRun(e, Train(one, 7, 1, InMemory(&d.state)), "one rank by range");
  ExpectLossesClose(e, whole, 7, "resumed on one rank");
  EXPECT_EQ(e.bytes_read[0], 12 * n) << "one rank holds everything";
  ExpectParamsClose(e.state.params, whole.state.params, 1e-5, "after the chain");
}

// A damaged range that only one rank reads invalidates the checkpoint on every rank: data 4
// with ZeRO-3 writes steps 2 and 4, a byte of rank 2's parameter shard in step 4 is flipped,
// and every rank resumes from step 2 (rank 2 alone read the damaged range; the ranks agree
// through the group), rank 0 naming the range; the run goes on as one resumed from step 2.
TEST(ZeroInLayoutCheckpointTest, ADamagedRangeOneRankReadsFallsBackOnEveryRank) {
  const Layout d4_z3{1, 1, 4, 3};
  TempDir dir;
  const ZeroRun a = Train(d4_z3, 0, 2, WriteTo(dir.path()));
  (void)Train(d4_z3, 2, 2, InMemory(&a.state, dir.path()));
  const size_t n = Tiny().num_parameters();
  const ZeroPartition part{n, 4};
  {
    std::fstream f(dir.path() + "/step_00000004/params.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    const std::streamoff at = static_cast<std::streamoff>(4 * (part.begin(2) + 7));
    f.seekg(at);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    f.seekp(at);
    f.write(&byte, 1);
  }
  const ZeroRun got = Train(d4_z3, 2, 2, ByRange(dir.path()));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got.resumed[r], "step_00000002") << "rank " << r;
  ASSERT_EQ(got.warnings.size(), 1u);
  EXPECT_NE(got.warnings[0].find("step_00000004 is damaged"), std::string::npos)
      << got.warnings[0];
  EXPECT_NE(got.warnings[0].find(fmt::format("params.bin bytes [{}, {}) written by rank 2",
                                             4 * part.begin(2), 4 * part.end(2))),
            std::string::npos)
      << got.warnings[0];
  EXPECT_NE(got.warnings[0].find("using step_00000002"), std::string::npos) << got.warnings[0];
  ExpectSameRun(got, Train(d4_z3, 2, 2, InMemory(&a.state)), "resumed from step 2");
}

}  // namespace
}  // namespace cohort::engine
