// How a CUDA tensor/pipeline layout moves a step's data (issue 14; ParallelStepOptions,
// trainer/train_model.h), on MakeParallelCudaTrainModel directly, every rank a thread:
//   - pipeline messages sent device to device (the links split from the world that reaches
//     device memory: nccl send/recv on GPUs) give the bits of the host path (device -> host,
//     a host communicator, host -> device): every loss, gradient norm and parameter of pipeline 2 under 1F1B
//     and interleaved 1F1B, and of tensor 2 x pipeline 2 (the message is the same float32
//     bytes either way);
//   - the data-parallel reduction overlapped with the backward (each bucket averaged on the
//     reducer's thread once the last micro-batch's backward has written it, the device's
//     events waited for first) gives the bits of the reduction after the step, in tensor 2 x
//     data 2 and pipeline 2 x data 2, and issues buckets before the backward ends;
//   - ZeRO 1 and 2 inside a CUDA layout (trainer/cuda_shard_engine.cc; tensor 2 x data 2, and
//     ZeRO-2 in pipeline 2 x data 2):
//     losses and gradient norms as ZeRO-0 of the same layout (ZeRO-1 bit for bit: the same
//     averaged gradients and the same update, by part; ZeRO-2 to 1e-5: the data average is a
//     reduce-scatter and the norm sums the shards), model-state bytes per rank by the ZeRO
//     formula over the position's shard, and a ZeRO-2 checkpoint (every rank's ranges) that
//     resumes on the CPU on one rank, whose state resumes ZeRO-2 in the CUDA layout as it
//     resumes ZeRO-0 there;
//   - ZeRO-3 inside a CUDA layout (each piece of the shard's bf16 parameters gathered over the
//     data group as the model uses it): ZeRO-2's bits in tensor 2 x data 2, ZeRO-0's losses
//     to 1e-5 there and in pipeline 2 x data 2, bytes per rank by the formula, and its
//     checkpoint resumed by range (each rank reading its part only), on the CPU, and back;
//   - the offloads inside a CUDA layout (trainer/host_shard_adamw.h; tensor 2 x data 2 and
//     pipeline 2 x data 2, ZeRO 1-3 offloaded and ZeRO-3 with optimizer+params): ZeRO-0's
//     losses and norms to 1e-5, device and host bytes per rank by the formula, the
//     optimizer+params checkpoint resumed bit for bit with and without offload, and the
//     offloaded ZeRO-3 state on the CPU and back.
// Built twice: against the CPU emulator (cuda_emu.cmake, label engine: device memory is host
// memory, so one shm communicator is both worlds) and against the real CUDA engine (label
// gpu: the world over nccl, the host values over a second, shm, communicator; one GPU per
// rank, skipping with fewer). The model is tiny (d_model 64, 4 heads, context 16) so that the
// emulator takes seconds.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_shard_cuda.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/layout.h"
#include "engine/parallel/zero.h"
#include "engine/trainer/train_model.h"
#include "parallel_step_util.h"
#include "temp_dir.h"

namespace cohort::engine {
namespace {

#ifdef COHORT_CUDA_EMULATED
constexpr const char* kBackend = "shm";  // emulated device memory is host memory
constexpr Millis kTimeout{900'000};       // emulated kernels: a peer can be minutes behind
#else
constexpr const char* kBackend = "nccl";
constexpr Millis kTimeout{60'000};
#endif

constexpr int kB = 1, kT = 16, kMicro = 2, kSteps = 2;  // B 1: the bits compared do not need more

GptConfig TinyConfig(int layers) {
  GptConfig c;
  c.vocab_size = 96;
  c.max_seq_len = kT;
  c.n_layer = layers;
  c.n_head = 4;
  c.n_embd = 64;
  return c;
}

// Micro-batch `k` of `step`: random tokens, each target the next token of a sequence.
void Load(int step, int k, std::span<int32_t> in, std::span<int32_t> out, int vocab) {
  uint64_t x = 0x2545f4914f6cdd1dULL * (step * 1000 + k + 1);
  for (int b = 0; b < kB; ++b) {
    std::vector<int32_t> seq(kT + 1);
    for (int32_t& v : seq) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
    }
    for (int t = 0; t < kT; ++t) {
      in[b * kT + t] = seq[t];
      out[b * kT + t] = seq[t + 1];
    }
  }
}

// Whether `ranks` CUDA ranks can run here: on the emulator always; on GPUs one each.
bool HaveGpus(int ranks) {
  if (std::string(kBackend) != "nccl") return true;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return false;
  return devices >= ranks;
}

// Runs body(world, host) on `ranks` threads: `world` over kBackend (on GPU r for nccl), `host`
// the same ranks over shm (the same communicator where kBackend is a host backend).
void RunCudaRanks(int ranks,
                  const std::function<void(comm::Communicator&, comm::Communicator&)>& body) {
  auto store = std::make_shared<comm::commtest::MemStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      if (std::string(kBackend) == "nccl") {
        ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      }
      comm::CommOptions w = comm::commtest::LocalOptions(kBackend, r, ranks, store, kTimeout);
      w.prefix = "world";
      auto world = comm::CreateCommunicator(w);
      ASSERT_TRUE(world.has_value()) << world.error().ToString();
      std::unique_ptr<comm::Communicator> host;
      if (std::string(kBackend) == "nccl") {
        comm::CommOptions h = comm::commtest::LocalOptions("shm", r, ranks, store, kTimeout);
        h.prefix = "host";
        auto made = comm::CreateCommunicator(h);
        ASSERT_TRUE(made.has_value()) << made.error().ToString();
        host = std::move(*made);
      }
      body(**world, host ? *host : **world);
    });
  }
  for (auto& t : threads) t.join();
}

using testing::ExpectSameBits;
using testing::Trained;

Trained Train(const GptConfig& cfg, const ParallelConfig& pc, int world,
              const ParallelStepOptions& step) {
  Trained out;
  out.buckets.resize(world);
  out.overlapped.resize(world);
  std::mutex mu;
  RunCudaRanks(world, [&](comm::Communicator& comm, comm::Communicator& host) {
    auto layout = MakeParallelLayout(pc, cfg, world);
    ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
    auto made = MakeParallelCudaTrainModel(cfg, InitialParams{11, nullptr}, AdamWConfig{},
                                           *layout, comm, host, nullptr, step);
    ASSERT_TRUE(made.has_value()) << made.error().ToString();
    auto fill = [&](int s, int k, std::span<int32_t> in, std::span<int32_t> tg) {
      Load(s, k, in, tg, cfg.vocab_size);
    };
    testing::TrainAndRecord(**made, comm.rank(), layout->CoordsOf(comm.rank()).data, kSteps,
                            kMicro, kB, kT, fill, mu, out);
  });
  return out;
}

TEST(CudaParallelStepTest, DevicePipelineMessagesGiveTheHostPathsBits) {
  struct Case {
    int tensor, pipeline, layers;
    const char* schedule;
    int virtual_stages;
  };
  int ran = 0;
  for (const Case c : {Case{1, 2, 2, "1f1b", 1}, Case{1, 2, 4, "interleaved", 2},
                       Case{2, 2, 2, "1f1b", 1}}) {
    const int world = c.tensor * c.pipeline;
    if (!HaveGpus(world)) {
      std::printf("tensor %d x pipeline %d skipped: needs %d GPUs\n", c.tensor, c.pipeline, world);
      continue;
    }
    ++ran;
    const GptConfig cfg = TinyConfig(c.layers);
    ParallelConfig pc;
    pc.tensor = c.tensor;
    pc.pipeline = c.pipeline;
    pc.schedule = c.schedule;
    pc.virtual_stages = c.virtual_stages;
    ParallelStepOptions host;
    host.host_pipeline_messages = true;
    const Trained via_host = Train(cfg, pc, world, host);
    const Trained device = Train(cfg, pc, world, ParallelStepOptions{});
    ExpectSameBits(device, via_host, kSteps,
                   fmt::format("tensor {} x pipeline {} {}", c.tensor, c.pipeline, c.schedule));
  }
  if (ran == 0) GTEST_SKIP() << "needs 2 GPUs";
}

TEST(CudaParallelStepTest, OverlappedReductionGivesTheBitsOfTheReductionAfterTheStep) {
  if (!HaveGpus(4)) GTEST_SKIP() << "needs 4 GPUs";
  for (auto [tensor, pipeline] : {std::pair{2, 1}, std::pair{1, 2}}) {
    // Two blocks per stage: a stage's buckets wait for its last piece only (with one block,
    // the last stage's block is that piece and nothing could go out earlier).
    const GptConfig cfg = TinyConfig(pipeline == 2 ? 4 : 2);
    ParallelConfig pc;
    pc.tensor = tensor;
    pc.pipeline = pipeline;
    pc.schedule = "1f1b";
    const int world = tensor * pipeline * 2;  // data 2
    ParallelStepOptions after;
    after.overlap_grad_reduce = false;
    ParallelStepOptions during;
    during.bucket_bytes = 32 << 10;  // several buckets in a rank's shard
    const Trained a = Train(cfg, pc, world, after);
    const Trained d = Train(cfg, pc, world, during);
    const std::string what = fmt::format("tensor {} x pipeline {} x data 2", tensor, pipeline);
    ExpectSameBits(d, a, kSteps, what);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(a.buckets[r], 0u) << what << ", rank " << r;
      EXPECT_GE(d.buckets[r], 2u) << what << ", rank " << r;
      EXPECT_GE(d.overlapped[r], 1u) << what << ", rank " << r << ": " << d.overlapped[r]
                                     << " of " << d.buckets[r] << " buckets during the backward";
    }
  }
}

// A run of a layout with ZeRO: the data-replica mean loss and the norm of each step, the
// logical state assembled from every rank's checkpoint ranges, each rank's model-state bytes.
struct ZeroRun {
  std::vector<double> losses, norms;
  Checkpoint state;
  std::vector<TrainModel::ModelStateBytes> bytes;
  size_t untiled = 0;  // elements the ranges did not write exactly once
  std::vector<uint64_t> bytes_read;  // per rank, resuming from a checkpoint on disk
  // Per rank, the last step's (stages 0 and 1 offloaded): gradient values the buckets brought
  // to the host during the backward, and the part's.
  std::vector<size_t> offload_by_buckets, offload_part;
};

// Checkpoints on disk (the trainer's path): resumed from `from` by range, every rank reading
// what its engine asks for (RestoreRequest); written by range into `to` after the last step.
struct ZeroDisk {
  std::string from, to;
};

// `parallel.offload` (trainer/host_shard_adamw.h): optimizer, and optimizer+params (`params`).
struct Offload {
  bool optimizer = false, params = false;
};

// `steps` steps numbered from `first` of tensor `tensor` x pipeline `pipeline` x data `data`
// (1F1B) with ZeRO `zero` (and `offload`), from `from` (rank 0 restores it, as the trainer does)
// or the seed.
ZeroRun TrainZero(const GptConfig& cfg, int tensor, int pipeline, int zero, int first, int steps,
                  const Checkpoint* from = nullptr, const ZeroDisk* disk = nullptr,
                  Offload offload = {}, int data = 2) {
  const size_t n = cfg.num_parameters();
  const int kWorld = tensor * pipeline * data;
  ZeroRun run;
  run.state.config = cfg;
  run.state.params.assign(n, 0.0f);
  run.state.adam_m.assign(n, 0.0f);
  run.state.adam_v.assign(n, 0.0f);
  run.bytes.resize(kWorld);
  run.bytes_read.resize(kWorld);
  run.offload_by_buckets.resize(kWorld);
  run.offload_part.resize(kWorld);
  std::vector<int> written(3 * n, 0);
  std::mutex mu;
  RunCudaRanks(kWorld, [&](comm::Communicator& comm, comm::Communicator& host) {
    ParallelConfig pc;
    pc.tensor = tensor;
    pc.pipeline = pipeline;
    pc.schedule = "1f1b";
    pc.zero = zero;
    auto layout = MakeParallelLayout(pc, cfg, kWorld);
    ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
    auto made = MakeParallelCudaTrainModel(cfg, InitialParams{11, nullptr}, AdamWConfig{},
                                           *layout, comm, host, nullptr, ParallelStepOptions{},
                                           zero, offload.optimizer, offload.params);
    ASSERT_TRUE(made.has_value()) << made.error().ToString();
    TrainModel& model = **made;
    // The offload without ZeRO is ZeRO-1's (as the single-device model's); one replica has
    // no ZeRO but the parameter offload's stage 3.
    EXPECT_EQ(model.zero_shape().stage, data == 1   ? (offload.params ? 3 : 0)
                                        : offload.optimizer ? std::max(zero, 1)
                                                            : zero);
    EXPECT_EQ(model.zero_shape().offload, offload.optimizer);
    TrainModelCheckpointGroup group(model, comm);
    if (from) {
      Checkpoint copy = *from;
      auto restored = model.RestoreState(&comm, comm.rank() == 0 ? &copy : nullptr, from->adam_t);
      ASSERT_TRUE(restored.has_value()) << restored.error().ToString();
    } else if (disk && !disk->from.empty()) {
      auto loaded = LoadCheckpointRanges(&group, disk->from, cfg, model.RestoreRequest());
      ASSERT_TRUE(loaded.has_value()) << loaded.error().ToString();
      auto finished = model.FinishRestore(loaded->adam_t);
      ASSERT_TRUE(finished.has_value()) << finished.error().ToString();
      std::lock_guard lock(mu);
      run.bytes_read[static_cast<size_t>(comm.rank())] = loaded->bytes_read;
    }
    const int replica = layout->CoordsOf(comm.rank()).data;
    std::vector<double> losses, norms;
    for (int s = first; s < first + steps; ++s) {
      auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> tg) -> Result<void> {
        Load(s, replica * kMicro + a, in, tg, cfg.vocab_size);
        return {};
      };
      auto loss = model.TrainMicrobatches(kMicro, kB, kT, load, nullptr);
      ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
      float mean = static_cast<float>(*loss);
      ASSERT_TRUE(host.AllReduce(&mean, &mean, 1, comm::DataType::kFloat32, comm::ReduceOp::kAvg));
      auto norm = model.ClipAndStep(0.5, 3e-3f);
      ASSERT_TRUE(norm.has_value()) << norm.error().ToString();
      losses.push_back(mean);
      norms.push_back(*norm);
    }
    int64_t t = 0;
    auto ranges = model.CheckpointRanges(replica, layout->data, &t);
    ASSERT_TRUE(ranges.has_value()) << ranges.error().ToString();
    if (disk && !disk->to.empty()) {
      CheckpointHeader header;
      header.config = cfg;
      header.adam_t = t;
      header.progress.step = first + steps - 1;
      auto saved = SaveCheckpointRanges(&group, disk->to, header, *ranges, 0);
      ASSERT_TRUE(saved.has_value()) << saved.error().ToString();
    }
    const TrainModel::OffloadCopies copies = model.offload_copies();
    std::lock_guard lock(mu);
    run.bytes[static_cast<size_t>(comm.rank())] = model.model_state_bytes();
    run.offload_by_buckets[static_cast<size_t>(comm.rank())] = copies.during_backward;
    run.offload_part[static_cast<size_t>(comm.rank())] = copies.part;
    for (const CheckpointRange& r : *ranges) {
      const size_t a = static_cast<size_t>(r.array);
      std::vector<float>& out = a == 0 ? run.state.params : a == 1 ? run.state.adam_m
                                                                   : run.state.adam_v;
      for (size_t k = 0; k < r.runs; ++k) {
        for (size_t i = 0; i < r.width; ++i) {
          out[r.offset + k * r.stride + i] = r.values[k * r.width + i];
          ++written[a * n + r.offset + k * r.stride + i];
        }
      }
    }
    run.state.adam_t = t;
    if (comm.rank() == 0) {
      run.losses = losses;
      run.norms = norms;
    }
  });
  for (int w : written) run.untiled += w != 1;
  return run;
}

// Rank r's position shard in `layout`: its Ψ_s floats, its data rank's part size(r) of them,
// and the largest piece ZeRO-3's gathers hold.
struct RankShard {
  size_t psi = 0, mine = 0, piece = 0;
};
RankShard ShardOf(const ParallelLayout& layout, const GptConfig& cfg, int r) {
  const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, cfg, r));
  RankShard out{shard.total, ZeroPartition{shard.total, layout.data}.size(layout.CoordsOf(r).data)};
  for (const auto& pass : GptShardCudaModel::ParamPasses(shard)) {
    for (const ParamPiece& p : pass) out.piece = std::max(out.piece, p.count);
  }
  return out;
}

// The values of rank r's data-rank part that are its stage's tied wte copy (0 off the first
// and last stage, and without a pipeline).
size_t TiedInPart(const ParallelLayout& layout, const GptConfig& cfg, int r) {
  const RankCoords at = layout.CoordsOf(r);
  if (layout.pipeline == 1 || (at.stage != 0 && at.stage != layout.pipeline - 1)) return 0;
  const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, cfg, r));
  const ShardChunkOffsets& co = at.stage == 0 ? shard.chunks.front() : shard.chunks.back();
  const size_t lo = at.stage == 0 ? co.wte : co.head_wte;
  const size_t hi = lo + static_cast<size_t>(shard.vocab_end - shard.vocab_begin) * cfg.n_embd;
  const ZeroPartition part{shard.total, layout.data};
  const size_t a = std::max(lo, part.begin(at.data)), b = std::min(hi, part.end(at.data));
  return b > a ? b - a : 0;
}

double RelDiff(double a, double b) { return std::abs(a - b) / std::max(1e-30, std::abs(b)); }

// The CPU model on one rank, every replica's micro-batches (replica 0's, then 1's), one step
// numbered `step` from `from`; the loss, the state after it in *end.
double CpuStep(const GptConfig& cfg, int step, const Checkpoint& from, Checkpoint* end) {
  GptModel init = GptModel::Create(cfg).value();
  auto made = MakeCpuTrainModel(std::move(init), AdamWConfig{});
  EXPECT_TRUE(made.has_value());
  TrainModel& model = **made;
  Checkpoint copy = from;
  EXPECT_TRUE(model.RestoreState(nullptr, &copy, from.adam_t).has_value());
  auto loss = model.TrainMicrobatches(
      2 * kMicro, kB, kT,
      [&](int k, std::span<int32_t> in, std::span<int32_t> tg) -> Result<void> {
        Load(step, k, in, tg, cfg.vocab_size);
        return {};
      },
      nullptr);
  EXPECT_TRUE(loss.has_value());
  EXPECT_TRUE(model.ClipAndStep(0.5, 3e-3f).has_value());
  int64_t t = 0;
  auto ranges = model.CheckpointRanges(0, 1, &t);
  EXPECT_TRUE(ranges.has_value());
  *end = Checkpoint{};
  end->config = cfg;
  end->adam_t = t;
  for (const CheckpointRange& r : ranges.value_or(std::vector<CheckpointRange>{})) {
    std::vector<float>& into = r.array == CheckpointArray::kParams  ? end->params
                               : r.array == CheckpointArray::kAdamM ? end->adam_m
                                                                    : end->adam_v;
    into.assign(r.values.begin(), r.values.end());
  }
  return loss.value_or(0);
}

// The ZeRO-`stage` state `state` after step kSteps of tensor 2 x data 2 resumes on the CPU on
// one rank (float32 against bf16: cuda_zero_test's 2e-2), and the CPU's state after that step
// resumes ZeRO-`stage` in the CUDA layout as it resumes ZeRO-0 there.
void ExpectCrossesToTheCpuAndBack(const GptConfig& cfg, int stage, const Checkpoint& state,
                                  Offload offload = {}) {
  ASSERT_EQ(state.adam_t, kSteps);
  Checkpoint cpu_end;
  const double cpu_loss = CpuStep(cfg, kSteps, state, &cpu_end);
  const ZeroRun cuda_next = TrainZero(cfg, 2, 1, stage, kSteps, 1, &state, nullptr, offload);
  EXPECT_LT(RelDiff(cpu_loss, cuda_next.losses[0]), 2e-2) << cpu_loss << " vs " << cuda_next.losses[0];
  EXPECT_EQ(cpu_end.adam_t, kSteps + 1);
  const ZeroRun z = TrainZero(cfg, 2, 1, stage, kSteps + 1, 1, &cpu_end, nullptr, offload);
  const ZeroRun d = TrainZero(cfg, 2, 1, 0, kSteps + 1, 1, &cpu_end);
  EXPECT_LT(RelDiff(z.losses[0], d.losses[0]), 1e-5) << z.losses[0] << " vs " << d.losses[0];
  EXPECT_LT(RelDiff(z.norms[0], d.norms[0]), 1e-5);
  EXPECT_EQ(z.state.adam_t, kSteps + 2);
}

// Pipeline 2 x data 2 with ZeRO-`stage`: each chunk's pieces are reduce-scattered in its last
// backward of the step, the pieces holding wte (the first stage's embedding, the last
// stage's head copy) only after the embedding group's sum of the tied copies; losses and
// norms ZeRO-0's to 1e-5, the checkpoint ranges tiling the model.
// `pp_plain` is pipeline 2 x data 2's ZeRO-0 run (TrainZero(cfg, 1, 2, 0, 0, kSteps)).
void ExpectPipelineTrainsAsZero0(const GptConfig& cfg, int stage, const ZeroRun& pp_plain) {
  const ZeroRun pp_zero = TrainZero(cfg, 1, 2, stage, 0, kSteps);
  EXPECT_EQ(pp_zero.untiled, 0u);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LT(RelDiff(pp_zero.losses[s], pp_plain.losses[s]), 1e-5) << "pipeline 2, step " << s + 1;
    EXPECT_LT(RelDiff(pp_zero.norms[s], pp_plain.norms[s]), 1e-5) << "pipeline 2, step " << s + 1;
  }
}

// ZeRO 1 and 2 inside a CUDA layout, then ZeRO-3 (below). One test: ZeRO-3's checks compare
// with the same ZeRO-0 and ZeRO-2 runs of tensor 2 x data 2 and the same ZeRO-0 run of
// pipeline 2 x data 2 that ZeRO 1 and 2 are checked against (two tests computed each of
// them twice, 6 of the 26 emulated steps).
void ExpectZero3InsideACudaLayoutTrainsAsZero2ReadsItsPartAndCrossesToTheCpu(
    const GptConfig& cfg, const ZeroRun& plain, const ZeroRun& zero2, const ZeroRun& pp_plain);

TEST(CudaParallelStepTest, ZeroStagesInsideACudaLayoutTrainAsWithoutItInTheFormulasBytes) {
  if (!HaveGpus(4)) GTEST_SKIP() << "needs 4 GPUs";
  const GptConfig cfg = TinyConfig(2);
  const ZeroRun plain = TrainZero(cfg, 2, 1, 0, 0, kSteps);
  ASSERT_EQ(plain.untiled, 0u);
  const ZeroRun pp_plain = TrainZero(cfg, 1, 2, 0, 0, kSteps);
  ParallelConfig pc;
  pc.tensor = 2;
  const ParallelLayout layout = MakeParallelLayout(pc, cfg, 4).value();
  ZeroRun zero2;
  for (int zero : {1, 2}) {
    const ZeroRun got = TrainZero(cfg, 2, 1, zero, 0, kSteps);
    const std::string what = fmt::format("tensor 2 x data 2, ZeRO-{}", zero);
    ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << what;
    EXPECT_EQ(got.untiled, 0u) << what << ": checkpoint ranges";
    for (int s = 0; s < kSteps; ++s) {
      if (zero == 1) {
        EXPECT_EQ(got.losses[s], plain.losses[s]) << what << " step " << s + 1;
        EXPECT_EQ(got.norms[s], plain.norms[s]) << what << " step " << s + 1;
      } else {
        EXPECT_LT(RelDiff(got.losses[s], plain.losses[s]), 1e-5) << what << " step " << s + 1;
        EXPECT_LT(RelDiff(got.norms[s], plain.norms[s]), 1e-5) << what << " step " << s + 1;
      }
    }
    if (zero == 1) {
      EXPECT_EQ(got.state.params, plain.state.params) << what;
      EXPECT_EQ(got.state.adam_m, plain.state.adam_m) << what;
    } else {
      zero2 = got;
    }
    // Model states per rank, counted where allocated, over the position's shard of Ψ_s
    // floats cut over the data group (size(r) of it): parameters 6Ψ_s (float32 and bf16),
    // gradients 4Ψ_s (stage 1) or 4·size(r) (stage 2), moments 8·size(r); stage 2's whole
    // accumulation buffer and receive buffer are scratch.
    for (int r = 0; r < 4; ++r) {
      const size_t psi = GptShardLayout::Build(ShardSpecFor(layout, cfg, r)).total;
      const ZeroPartition part{psi, layout.data};
      const size_t mine = part.size(layout.CoordsOf(r).data);
      const TrainModel::ModelStateBytes& b = got.bytes[static_cast<size_t>(r)];
      EXPECT_EQ(b.params, 6 * psi) << what << " rank " << r;
      EXPECT_EQ(b.grads, 4 * (zero == 2 ? mine : psi)) << what << " rank " << r;
      EXPECT_EQ(b.optimizer, 8 * mine) << what << " rank " << r;
      EXPECT_EQ(plain.bytes[static_cast<size_t>(r)].optimizer, 8 * psi) << "rank " << r;
      if (zero == 2) {
        EXPECT_GT(b.scratch, 4 * psi) << what << " rank " << r;
        EXPECT_LE(b.scratch, 4 * psi + 4 * mine) << what << " rank " << r;
      }
    }
  }

  ExpectCrossesToTheCpuAndBack(cfg, 2, zero2.state);
  ExpectPipelineTrainsAsZero0(cfg, 2, pp_plain);
  ExpectZero3InsideACudaLayoutTrainsAsZero2ReadsItsPartAndCrossesToTheCpu(cfg, plain, zero2,
                                                                          pp_plain);
}

// ZeRO-3 inside CUDA layouts (trainer/cuda_shard_engine.cc): the model reads each piece of
// its chunks' bf16 parameters gathered over the data group, the rank keeps its part only.
// Tensor 2 x data 2: the same gradients and update as ZeRO-2 (the same reduce-scatter of the
// same accumulated buffer, the same fused update of the part, whose bf16 copy the gathers
// read), so on the emulator every loss, norm and the state are ZeRO-2's bit for bit, and
// ZeRO-0's to 1e-5; model-state bytes per rank by the formula (6, 4 and 8 bytes per element
// of the rank's part); its checkpoint ranges tile the model, resume by range with every rank
// reading its part only (12 bytes an element) into the same state bit for bit, resume on the
// CPU on one rank, whose state resumes ZeRO-3 as it resumes ZeRO-0. Pipeline 2 x data 2
// (the tied wte copies of the first and last stage, summed over the embedding group before
// the reduce-scatter, keep one value): as ZeRO-0 to 1e-5.
// `plain` and `zero2` are tensor 2 x data 2's ZeRO-0 and ZeRO-2 runs of kSteps, `pp_plain`
// pipeline 2 x data 2's ZeRO-0 run.
void ExpectZero3InsideACudaLayoutTrainsAsZero2ReadsItsPartAndCrossesToTheCpu(
    const GptConfig& cfg, const ZeroRun& plain, const ZeroRun& zero2, const ZeroRun& pp_plain) {
  SCOPED_TRACE("ZeRO-3");
  testing::TempDir dir;
  const ZeroDisk write{"", dir.path()};
  const ZeroRun got = TrainZero(cfg, 2, 1, 3, 0, kSteps, nullptr, &write);
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(got.untiled, 0u) << "checkpoint ranges";
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LT(RelDiff(got.losses[s], plain.losses[s]), 1e-5) << "step " << s + 1;
    EXPECT_LT(RelDiff(got.norms[s], plain.norms[s]), 1e-5) << "step " << s + 1;
#ifdef COHORT_CUDA_EMULATED
    EXPECT_EQ(got.losses[s], zero2.losses[s]) << "step " << s + 1;
    EXPECT_EQ(got.norms[s], zero2.norms[s]) << "step " << s + 1;
#endif
  }
#ifdef COHORT_CUDA_EMULATED
  EXPECT_EQ(got.state.params, zero2.state.params);
  EXPECT_EQ(got.state.adam_m, zero2.state.adam_m);
  EXPECT_EQ(got.state.adam_v, zero2.state.adam_v);
#endif
  ParallelConfig pc;
  pc.tensor = 2;
  const ParallelLayout layout = MakeParallelLayout(pc, cfg, 4).value();
  for (int r = 0; r < 4; ++r) {
    // The largest piece the gathers hold (bf16, two buffers).
    const auto [psi, mine, piece] = ShardOf(layout, cfg, r);
    const TrainModel::ModelStateBytes& b = got.bytes[static_cast<size_t>(r)];
    EXPECT_EQ(b.params, 6 * mine) << "rank " << r;
    EXPECT_EQ(b.grads, 4 * mine) << "rank " << r;
    EXPECT_EQ(b.optimizer, 8 * mine) << "rank " << r;
    // Scratch: the accumulation buffer 4Ψ_s, the receive buffer, the two gather buffers.
    EXPECT_GE(b.scratch, 4 * psi + 2 * 2 * piece) << "rank " << r;
    EXPECT_LE(b.scratch, 4 * psi + 4 * mine + 2 * 2 * piece) << "rank " << r;
  }

  // Resume by range: each rank reads its part of the parameters and moments, no more, into
  // the state the checkpoint holds.
  const ZeroDisk read{dir.path(), ""};
  const ZeroRun resumed = TrainZero(cfg, 2, 1, 3, kSteps, 0, nullptr, &read);
  for (int r = 0; r < 4; ++r) {
    const size_t psi = GptShardLayout::Build(ShardSpecFor(layout, cfg, r)).total;
    const size_t mine = ZeroPartition{psi, layout.data}.size(layout.CoordsOf(r).data);
    EXPECT_EQ(resumed.bytes_read[static_cast<size_t>(r)], 12 * mine) << "rank " << r;
  }
  EXPECT_EQ(resumed.untiled, 0u);
  EXPECT_EQ(resumed.state.params, got.state.params);
  EXPECT_EQ(resumed.state.adam_m, got.state.adam_m);
  EXPECT_EQ(resumed.state.adam_v, got.state.adam_v);
  EXPECT_EQ(resumed.state.adam_t, kSteps);

  ExpectCrossesToTheCpuAndBack(cfg, 3, got.state);
  ExpectPipelineTrainsAsZero0(cfg, 3, pp_plain);
}

// The offloads inside CUDA layouts (issue 15; trainer/host_shard_adamw.h on
// cuda_shard_engine.cc): the data rank's part of the shard's AdamW moments and float32 master
// on the host, stepped on the CPU, and with optimizer+params (ZeRO-3) the bf16 part in pinned
// host memory, gathered from there. In tensor 2 x data 2 and pipeline 2 x data 2 (the tied
// wte copies of the first and last stage keeping one value), ZeRO 1 (in the pipeline as ZeRO-0
// with the offload, which is ZeRO-1's), 2 and 3 offloaded and ZeRO-3 with optimizer+params
// train as ZeRO-0 without offload: losses and norms to 1e-5, the state to cuda_zero_test's
// bounds for the host's AdamW (it rounds the update differently from the device's); model-
// state bytes per rank by the formula, the offloaded state counted as host bytes (device:
// stage 1 10Ψ_s, stage 2 6Ψ_s + 4·size(r), stage 3 2·size(r) + 4·size(r), optimizer+params
// 4·size(r); host 16·size(r) for stages 1 and 2, 18·size(r) for stage 3); at stage 1 the
// reducer's buckets bring the gradient part to the host during the backward (all but the
// tied copy, which crosses at the step). In tensor 2 x data
// 2, the optimizer+params checkpoint (written by range) resumes bit for bit without offload
// and offloaded at stage 2 (every rank reading its part only), and the stage 3 offload's
// state resumes on the CPU on one rank, whose state resumes the offload as it resumes ZeRO-0.
struct OffloadLayout {
  const char* name;
  int tensor, pipeline;
};
void PrintTo(const OffloadLayout& l, std::ostream* os) { *os << l.name; }

class CudaOffloadLayoutTest : public ::testing::TestWithParam<OffloadLayout> {};

double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(1e-30, den));
}

TEST_P(CudaOffloadLayoutTest, TrainsAsZero0CountsHostBytesAndResumesEitherWay) {
  if (!HaveGpus(4)) GTEST_SKIP() << "needs 4 GPUs";
  const OffloadLayout L = GetParam();
  const GptConfig cfg = TinyConfig(2);
  const ZeroRun plain = TrainZero(cfg, L.tensor, L.pipeline, 0, 0, kSteps);
  ASSERT_EQ(plain.untiled, 0u);
  ParallelConfig pc;
  pc.tensor = L.tensor;
  pc.pipeline = L.pipeline;
  const ParallelLayout layout = MakeParallelLayout(pc, cfg, 4).value();
  struct Variant {
    int zero;
    Offload offload;
  };
  // ZeRO-1 offloaded is asked for as zero 0 in the pipeline (the offload makes it ZeRO-1).
  const bool tensor = L.tensor == 2;
  testing::TempDir dir;
  Checkpoint zero3_state, params_state;
  for (const Variant v : {Variant{tensor ? 1 : 0, {true, false}}, Variant{2, {true, false}},
                          Variant{3, {true, false}}, Variant{3, {true, true}}}) {
    const int stage = std::max(1, v.zero);
    const std::string what = fmt::format("{}, ZeRO-{} offload {}", L.name, v.zero,
                                         v.offload.params ? "optimizer+params" : "optimizer");
    const bool write = tensor && v.offload.params;
    const ZeroDisk to{"", dir.path()};
    const ZeroRun got = TrainZero(cfg, L.tensor, L.pipeline, v.zero, 0, kSteps, nullptr,
                                  write ? &to : nullptr, v.offload);
    ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << what;
    EXPECT_EQ(got.untiled, 0u) << what << ": checkpoint ranges";
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_LT(RelDiff(got.losses[s], plain.losses[s]), 1e-5) << what << " step " << s + 1;
      EXPECT_LT(RelDiff(got.norms[s], plain.norms[s]), 1e-5) << what << " step " << s + 1;
    }
    std::printf("%s: state against ZeRO-0's: params %.2e, m %.2e, v %.2e (relative L2)\n",
                what.c_str(), RelError(got.state.params, plain.state.params),
                RelError(got.state.adam_m, plain.state.adam_m),
                RelError(got.state.adam_v, plain.state.adam_v));
    EXPECT_LT(RelError(got.state.params, plain.state.params), 1e-3) << what;
    EXPECT_LT(RelError(got.state.adam_m, plain.state.adam_m), 1e-2) << what;
    EXPECT_LT(RelError(got.state.adam_v, plain.state.adam_v), 1e-2) << what;
    EXPECT_EQ(got.state.adam_t, kSteps) << what;
    if (stage == 3) (v.offload.params ? params_state : zero3_state) = got.state;

    for (int r = 0; r < 4; ++r) {
      const auto [psi, mine, piece] = ShardOf(layout, cfg, r);
      const TrainModel::ModelStateBytes& b = got.bytes[static_cast<size_t>(r)];
      const std::string at = fmt::format("{} rank {}", what, r);
      // Stage 1: the reducer's buckets bring the gradient part to the host during the backward,
      // all of it in tensor 2 (no tied copy), in the pipeline all but the tied copy's values
      // (averaged after the buckets, then copied at the step); stages 2 and 3 bring theirs
      // through the reduce-scatter instead.
      const size_t by_buckets = got.offload_by_buckets[static_cast<size_t>(r)];
      if (stage == 1) {
        EXPECT_EQ(got.offload_part[static_cast<size_t>(r)], mine) << at;
        EXPECT_GT(by_buckets, 0u) << at;
        EXPECT_EQ(by_buckets, mine - TiedInPart(layout, cfg, r)) << at;
      } else {
        EXPECT_EQ(by_buckets, 0u) << at;
      }
      EXPECT_EQ(b.params, 6 * (stage == 3 ? mine : psi)) << at;
      EXPECT_EQ(b.grads, 4 * (stage >= 2 ? mine : psi)) << at;
      // The moments, and for stages 1 and 2 the host master (stage 3's is its parameters).
      EXPECT_EQ(b.optimizer, (stage < 3 ? 12 : 8) * mine) << at;
      // Host: the moments, the master, the pinned gradient part; stage 3 the bf16 part or its
      // pinned staging.
      EXPECT_EQ(b.host, (stage < 3 ? 16 : 18) * mine) << at;
      const size_t device_states = b.params + b.grads + b.optimizer + b.scratch - b.host;
      const size_t formula = stage == 1   ? 10 * psi
                             : stage == 2 ? 6 * psi + 4 * mine
                             : v.offload.params ? 4 * mine
                                                : 6 * mine;
      // The scratch on the device: stages 2 and 3 the accumulation buffer 4Ψ_s and the receive
      // buffer, stage 3 the two gather buffers and, optimizer+params, the send buffer.
      const size_t gathers = stage == 3 ? 2 * 2 * piece : 0;
      const size_t lo = formula + (stage >= 2 ? 4 * psi : 0) + gathers;
      const size_t hi = lo + (stage >= 2 ? 4 * mine : 0) + (v.offload.params ? 2 * mine : 0);
      EXPECT_GE(device_states, lo) << at;
      EXPECT_LE(device_states, hi) << at;
    }
  }
  if (!tensor) return;

  // The optimizer+params checkpoint resumes bit for bit as itself, without offload (ZeRO-3)
  // and offloaded at stage 2; every ZeRO-3 rank reads its part only (stage 2 the shard's
  // parameters and its part of the moments).
  const ZeroDisk read{dir.path(), ""};
  for (const Variant v : {Variant{3, {true, true}}, Variant{3, {}}, Variant{2, {true, false}}}) {
    const ZeroRun resumed = TrainZero(cfg, 2, 1, v.zero, kSteps, 0, nullptr, &read, v.offload);
    const std::string what =
        fmt::format("resumed as ZeRO-{}{}", v.zero,
                    v.offload.params ? " optimizer+params" : v.offload.optimizer ? " offloaded" : "");
    EXPECT_EQ(resumed.untiled, 0u) << what;
    EXPECT_EQ(resumed.state.params, params_state.params) << what;
    EXPECT_EQ(resumed.state.adam_m, params_state.adam_m) << what;
    EXPECT_EQ(resumed.state.adam_v, params_state.adam_v) << what;
    EXPECT_EQ(resumed.state.adam_t, kSteps) << what;
    for (int r = 0; r < 4; ++r) {
      const auto [psi, mine, piece] = ShardOf(layout, cfg, r);
      EXPECT_EQ(resumed.bytes_read[static_cast<size_t>(r)],
                v.zero == 3 ? 12 * mine : 4 * psi + 8 * mine)
          << what << " rank " << r;
    }
  }
  ExpectCrossesToTheCpuAndBack(cfg, 3, zero3_state, {true, false});
}

// optimizer+params with one data replica (ZeRO-Infinity's parameter offload on one GPU per
// position): stage 3's pieces run over the replica itself, the bf16 parameters in pinned host
// memory, each piece copied to the device as the model uses it. In tensor 2 and pipeline 2 (the
// tied copies keeping one value), it trains as the same layout's ZeRO-0: losses and norms to
// 1e-5, the state to the host AdamW's bounds; the device holds no parameters (8·Ψ_s of
// gradients, the shard and the buffer the backward accumulates into, and the two gather
// buffers); the host 18·Ψ_s; the checkpoint it writes by range resumes bit for bit without
// the offload and with it.
class CudaOneReplicaParamOffloadTest : public ::testing::TestWithParam<OffloadLayout> {};

TEST_P(CudaOneReplicaParamOffloadTest, TrainsAsZero0WithNoParametersOnTheDevice) {
  if (!HaveGpus(2)) GTEST_SKIP() << "needs 2 GPUs";
  const OffloadLayout L = GetParam();
  const GptConfig cfg = TinyConfig(2);
  const ZeroRun plain = TrainZero(cfg, L.tensor, L.pipeline, 0, 0, kSteps, nullptr, nullptr, {}, 1);
  testing::TempDir dir;
  const ZeroDisk to{"", dir.path()};
  const ZeroRun got = TrainZero(cfg, L.tensor, L.pipeline, 3, 0, kSteps, nullptr, &to,
                                {true, true}, 1);
  const std::string what = fmt::format("{} x data 1, ZeRO-3 optimizer+params", L.name);
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << what;
  EXPECT_EQ(got.untiled, 0u) << what << ": checkpoint ranges";
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LT(RelDiff(got.losses[s], plain.losses[s]), 1e-5) << what << " step " << s + 1;
    EXPECT_LT(RelDiff(got.norms[s], plain.norms[s]), 1e-5) << what << " step " << s + 1;
  }
  EXPECT_LT(RelError(got.state.params, plain.state.params), 1e-3) << what;
  EXPECT_LT(RelError(got.state.adam_m, plain.state.adam_m), 1e-2) << what;
  EXPECT_LT(RelError(got.state.adam_v, plain.state.adam_v), 1e-2) << what;
  EXPECT_EQ(got.state.adam_t, kSteps) << what;

  ParallelConfig pc;
  pc.tensor = L.tensor;
  pc.pipeline = L.pipeline;
  const ParallelLayout layout = MakeParallelLayout(pc, cfg, 2).value();
  for (int r = 0; r < 2; ++r) {
    const auto [psi, mine, piece] = ShardOf(layout, cfg, r);
    ASSERT_EQ(mine, psi);
    const TrainModel::ModelStateBytes& b = got.bytes[static_cast<size_t>(r)];
    const std::string at = fmt::format("{} rank {}", what, r);
    EXPECT_EQ(b.params, 6 * psi) << at;
    EXPECT_EQ(b.grads, 4 * psi) << at;
    EXPECT_EQ(b.optimizer, 8 * psi) << at;
    EXPECT_EQ(b.host, 18 * psi) << at;
    EXPECT_EQ(b.params + b.grads + b.optimizer + b.scratch - b.host, 8 * psi + 2 * 2 * piece) << at;
  }

  const ZeroDisk read{dir.path(), ""};
  for (const Offload o : {Offload{true, true}, Offload{}}) {
    const ZeroRun resumed = TrainZero(cfg, L.tensor, L.pipeline, o.params ? 3 : 0, kSteps, 0,
                                      nullptr, &read, o, 1);
    const std::string as = what + (o.params ? ", resumed as itself" : ", resumed as ZeRO-0");
    EXPECT_EQ(resumed.untiled, 0u) << as;
    EXPECT_EQ(resumed.state.params, got.state.params) << as;
    EXPECT_EQ(resumed.state.adam_m, got.state.adam_m) << as;
    EXPECT_EQ(resumed.state.adam_v, got.state.adam_v) << as;
    EXPECT_EQ(resumed.state.adam_t, kSteps) << as;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaOneReplicaParamOffloadTest,
                         ::testing::Values(OffloadLayout{"tensor2", 2, 1},
                                           OffloadLayout{"pipeline2", 1, 2}),
                         [](const ::testing::TestParamInfo<OffloadLayout>& info) {
                           return std::string(info.param.name);
                         });

INSTANTIATE_TEST_SUITE_P(Layouts, CudaOffloadLayoutTest,
                         ::testing::Values(OffloadLayout{"tensor2", 2, 1},
                                           OffloadLayout{"pipeline2", 1, 2}),
                         [](const ::testing::TestParamInfo<OffloadLayout>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace cohort::engine
