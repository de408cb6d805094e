// ZeRO stages 1 to 3 and the offloads on the CUDA TrainModel (trainer/cuda_zero.h), two
// data-parallel ranks (issue 15):
//   - ZeRO-1, 2, 3, offloaded (optimizer) and ZeRO-3 with optimizer+params train as CUDA DDP
//     does (the trainer's DdpReducer, GptCudaAdamW over the whole model): per-step losses to
//     relative 1e-5 and the final state (ZeRO-1 bitwise on the emulator); offloaded stage 1,
//     each bucket's gradients reach the host during the backward (the step fails otherwise);
//   - the model-state bytes per rank equal the formula for each (stage 2's gradients below
//     stage 1's by 4Ψ − 4·size(r), the scratch counted apart); ZeRO-3's gathers prefetched;
//   - resume by range across layouts (the trainer's path): the state after step 2, written
//     by CPU data 4 ZeRO-3, resumes ZeRO-1, 2, 3 and the offloads on 2 CUDA ranks, every
//     rank reading only what it holds (exact byte counts) and step 3 bitwise on the
//     emulator; their checkpoint resumes CPU data 4 ZeRO-3 into the same state, bit for bit;
//   - a ZeRO-2 and a ZeRO-3 checkpoint resume on the CPU model on one rank (ZeRO-0), and a
//     CPU checkpoint resumes CUDA ZeRO-2 and ZeRO-3 on two ranks as CUDA DDP resumes it;
//   - under all of them, the model without its buffers (gpt_cuda.h GptCudaStorage): the
//     gradient pieces it hands a sink (wte in several row chunks) are the whole buffer's
//     gradient and the loss read through a parameter source is the whole model's.
// One test process per stage (CudaZeroStageTest/zero1, zero2, zero3): CUDA DDP runs once in
// each, and each variant trains once, its state after step 2 taken midway for the resume and
// the move to the CPU, so ctest runs three processes instead of one per check.
// Built twice: against the CPU emulator over shm (cuda_emu.cmake; runs in CI) and against
// the real CUDA engine over NCCL (label gpu; skips with fewer than 2 GPUs). The model is tiny
// (2 layers, d_model 64, 4 heads, context 16, vocab 96) so the emulator takes seconds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "cuda_test_util.h"
#include "temp_dir.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/cuda_arena.h"
#include "engine/model/gpt_cuda.h"
#include "engine/parallel/zero.h"
#include "engine/parallel/ddp.h"
#include "engine/trainer/train_model.h"

namespace cohort::engine {
namespace {

#ifdef COHORT_CUDA_EMULATED
constexpr const char* kBackend = "shm";  // device memory is host memory here
constexpr Millis kTimeout{900'000};
#else
constexpr const char* kBackend = "nccl";
constexpr Millis kTimeout{30'000};
#endif

constexpr int kB = 2, kT = 16, kAccum = 2, kRanks = 2;
constexpr double kMaxNorm = 0.5;  // small enough that every step clips: the global norm matters

GptConfig TinyConfig() {
  GptConfig c;
  c.vocab_size = 96;
  c.max_seq_len = kT;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  return c;
}

AdamWConfig Adam() { return AdamWConfig{}; }

float Lr(int step) { return 3e-3f / static_cast<float>(step); }

// Micro-batch `a` of data rank `rank` at `step`: random tokens, targets the next token.
void Load(int step, int rank, int a, std::span<int32_t> in, std::span<int32_t> out) {
  uint64_t x = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(1 + step * 131 + rank * 17 + a);
  for (size_t i = 0; i < in.size(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    in[i] = static_cast<int32_t>(x % 96);
  }
  for (size_t i = 0; i < in.size(); ++i) out[i] = (in[i] * 5 + 1) % 96;
}

GptModel Initial() {
  auto m = GptModel::Create(TinyConfig());
  EXPECT_TRUE(m.has_value());
  m->InitRandom(11);
  return std::move(*m);
}

struct Variant {
  const char* name;
  int stage;
  bool offload;
  bool offload_params = false;
};

// The whole logical state, assembled from every rank's checkpoint ranges.
struct State {
  std::vector<float> params, m, v;
  int64_t t = 0;
};

struct RankRun {
  std::vector<double> losses;  // per step
  TrainModel::ModelStateBytes bytes;
  bool model_parallel = false;
};

// Rank r's checkpoint ranges into `into` (under `mu`).
void Save(TrainModel& model, int r, std::mutex& mu, State& into) {
  int64_t t = 0;
  auto ranges = model.CheckpointRanges(r, kRanks, &t);
  ASSERT_TRUE(ranges.has_value()) << ranges.error().ToString();
  std::lock_guard lock(mu);
  into.t = t;
  for (const CheckpointRange& range : *ranges) {
    ASSERT_EQ(range.runs, 1u);
    std::vector<float>& array = range.array == CheckpointArray::kParams  ? into.params
                                : range.array == CheckpointArray::kAdamM ? into.m
                                                                         : into.v;
    std::copy(range.values.begin(), range.values.end(),
              array.begin() + static_cast<std::ptrdiff_t>(range.offset));
  }
}

// Checkpoints on disk for a run (Train): resumed from the newest in `from`, every rank
// reading its own ranges (LoadCheckpointRanges with the model's RestoreRequest: the
// trainer's path), and written by range into `to` after the last step (SaveCheckpointRanges).
// `bytes_read` receives what each rank read of the tensor files.
struct Disk {
  std::string from, to;
  std::vector<uint64_t> bytes_read = std::vector<uint64_t>(kRanks);
};

// Trains `steps` steps (numbered from first_step) on kRanks ranks with `v` (stage 0: CUDA
// DDP), from `start` when given (in memory: rank 0 holds it, RestoreState), from
// `disk->from` when given, or from Initial(). `saved`, when given, receives the state after
// the last step; `midway`, when given, the state after step `midway_step` as well (what a
// checkpoint written then holds: every rank's ranges), taken without stopping the run.
std::vector<RankRun> Train(const Variant& v, int first_step, int steps, const State* start,
                           State* saved, State* midway = nullptr, int midway_step = 0,
                           Disk* disk = nullptr) {
  std::vector<RankRun> runs(kRanks);
  const GptModel initial = Initial();
  const size_t n = initial.params().size();
  std::mutex mu;
  for (State* st : {saved, midway}) {
    if (st) *st = State{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  }
  comm::commtest::RunRanks(kBackend, kRanks, [&](comm::Communicator& comm) {
    const int r = comm.rank();
#if !defined(COHORT_CUDA_EMULATED)
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
#endif
    auto made = MakeCudaTrainModel(initial, Adam(), kB, kT, nullptr,
                                   CudaZeroOptions{&comm, v.stage, v.offload, v.offload_params});
    ASSERT_TRUE(made.has_value()) << made.error().ToString();
    TrainModel& model = **made;
    TrainModelCheckpointGroup group(model, comm);
    if (disk && !disk->from.empty()) {
      auto loaded = LoadCheckpointRanges(&group, disk->from, TinyConfig(), model.RestoreRequest());
      ASSERT_TRUE(loaded.has_value()) << loaded.error().ToString();
      auto finished = model.FinishRestore(loaded->adam_t);
      ASSERT_TRUE(finished.has_value()) << finished.error().ToString();
      std::lock_guard lock(mu);
      disk->bytes_read[static_cast<size_t>(r)] = loaded->bytes_read;
    } else if (start) {
      Checkpoint ckpt;
      if (r == 0) {
        ckpt.params = start->params;
        ckpt.adam_m = start->m;
        ckpt.adam_v = start->v;
      }
      auto restored = model.RestoreState(&comm, r == 0 ? &ckpt : nullptr, start->t);
      ASSERT_TRUE(restored.has_value()) << restored.error().ToString();
    } else {
      auto same = model.BroadcastParams(comm);  // a fresh start, as the trainer's
      ASSERT_TRUE(same.has_value()) << same.error().ToString();
    }
    // Small buckets, so that they straddle the layers and the shards' boundary. Stages 2 and
    // 3 reduce their own gradient pieces (the trainer makes no reducer for them).
    std::optional<DdpReducer> reducer;
    if (v.stage < 2) {
      reducer.emplace(comm, model.grads(), 16 << 10, model.grad_wait(), model.grad_reduced());
      ASSERT_GT(reducer->num_buckets(), 3u);
    } else {
      EXPECT_TRUE(model.grads().empty()) << "ZeRO-" << v.stage << " holds a whole gradient buffer";
    }
    RankRun& run = runs[static_cast<size_t>(r)];
    run.bytes = model.model_state_bytes();
    run.model_parallel = model.model_parallel();
    for (int s = first_step; s < first_step + steps; ++s) {
      auto loss = model.TrainMicrobatches(
          kAccum, kB, kT,
          [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
            Load(s, r, a, in, out);
            return {};
          },
          reducer ? &*reducer : nullptr);
      ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
      auto norm = model.ClipAndStep(kMaxNorm, Lr(s));
      ASSERT_TRUE(norm.has_value()) << norm.error().ToString();
      EXPECT_GT(*norm, kMaxNorm) << "step " << s << " did not clip";
      run.losses.push_back(*loss);
      if (midway && s == midway_step) Save(model, r, mu, *midway);
    }
    if (saved) Save(model, r, mu, *saved);
    if (disk && !disk->to.empty()) {
      CheckpointHeader header;
      header.config = TinyConfig();
      auto ranges = model.CheckpointRanges(r, kRanks, &header.adam_t);
      ASSERT_TRUE(ranges.has_value()) << ranges.error().ToString();
      header.progress.step = first_step + steps - 1;
      auto written = SaveCheckpointRanges(&group, disk->to, header, *ranges, 0);
      ASSERT_TRUE(written.has_value()) << written.error().ToString();
    }
  }, [](comm::CommOptions& o) { o.timeout = kTimeout; });
  return runs;
}

// The CPU layout the CUDA runs' checkpoints cross to and from: data 4 with ZeRO-3 (each rank
// its quarter of every array; a CUDA data 2 shard is two of them: ZeroPartition's bounds
// agree).
constexpr int kCpuRanks = 4;

// CPU data 4 ZeRO-3 writes `state` by range into `dir` as step `step` (every rank its shard,
// as `cohort train` writes).
void WriteOnCpuZero3(const State& state, int step, const std::string& dir) {
  comm::commtest::RunRanks("shm", kCpuRanks, [&](comm::Communicator& comm) {
    auto model = MakeZero3CpuTrainModelFromSeed(TinyConfig(), 5, Adam(), comm).value();
    Checkpoint whole;
    if (comm.rank() == 0) {
      whole.params = state.params;
      whole.adam_m = state.m;
      whole.adam_v = state.v;
    }
    auto restored = model->RestoreState(&comm, comm.rank() == 0 ? &whole : nullptr, state.t);
    ASSERT_TRUE(restored.has_value()) << restored.error().ToString();
    CheckpointHeader header;
    header.config = TinyConfig();
    auto ranges = model->CheckpointRanges(comm.rank(), kCpuRanks, &header.adam_t);
    ASSERT_TRUE(ranges.has_value()) << ranges.error().ToString();
    header.progress.step = step;
    TrainModelCheckpointGroup group(*model, comm);
    auto written = SaveCheckpointRanges(&group, dir, header, *ranges, 0);
    ASSERT_TRUE(written.has_value()) << written.error().ToString();
  });
}

// CPU data 4 ZeRO-3 resumes by range from `dir`: the state it then holds (its ranks' ranges
// assembled) into *state; returns what each rank read of the tensor files.
std::vector<uint64_t> ReadOnCpuZero3(const std::string& dir, State* state) {
  const size_t n = TinyConfig().num_parameters();
  *state = State{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  std::vector<uint64_t> bytes(kCpuRanks);
  std::mutex mu;
  comm::commtest::RunRanks("shm", kCpuRanks, [&](comm::Communicator& comm) {
    auto model = MakeZero3CpuTrainModelFromSeed(TinyConfig(), 5, Adam(), comm).value();
    TrainModelCheckpointGroup group(*model, comm);
    auto loaded = LoadCheckpointRanges(&group, dir, TinyConfig(), model->RestoreRequest());
    ASSERT_TRUE(loaded.has_value()) << loaded.error().ToString();
    ASSERT_TRUE(model->FinishRestore(loaded->adam_t).has_value());
    int64_t t = 0;
    auto ranges = model->CheckpointRanges(comm.rank(), kCpuRanks, &t);
    ASSERT_TRUE(ranges.has_value()) << ranges.error().ToString();
    std::lock_guard lock(mu);
    bytes[static_cast<size_t>(comm.rank())] = loaded->bytes_read;
    state->t = t;
    for (const CheckpointRange& range : *ranges) {
      std::vector<float>& array = range.array == CheckpointArray::kParams  ? state->params
                                  : range.array == CheckpointArray::kAdamM ? state->m
                                                                           : state->v;
      std::copy(range.values.begin(), range.values.end(),
                array.begin() + static_cast<std::ptrdiff_t>(range.offset));
    }
  });
  return bytes;
}


double RelDiff(double a, double b) { return std::abs(a - b) / std::max(1e-30, std::abs(b)); }

// ||a − b|| / ||b||.
double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    scale += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / scale);
}

#define COHORT_SKIP_WITHOUT_TWO_GPUS()                                                \
  do {                                                                                \
    COHORT_SKIP_WITHOUT_GPU();                                                        \
    if (std::string(kBackend) == "nccl") {                                            \
      int devices = 0;                                                                \
      COHORT_ASSERT_CUDA(cudaGetDeviceCount(&devices));                               \
      if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, this process sees " << devices; \
    }                                                                                 \
  } while (0)

constexpr int kSteps = 3;
const Variant kDdp{"ddp", 0, false};

// CUDA DDP's run, computed once for the suite.
const std::vector<RankRun>& DdpRun(State* state = nullptr) {
  static State saved;
  static const std::vector<RankRun> runs = Train(kDdp, 1, kSteps, nullptr, &saved);
  if (state) *state = saved;
  return runs;
}

// `v`'s run (`zero`, ending in state `got`) against CUDA DDP's: losses, state and bytes.
void ExpectTrainsAsCudaDdpWithItsFormulaOfBytes(const Variant& v, const std::vector<RankRun>& zero,
                                               const State& got) {
  State want;
  const std::vector<RankRun>& ddp = DdpRun(&want);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(zero[r].losses.size(), static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) {
      // The gradients are DDP's up to the order of the sums (stages 2 and 3 average each
      // micro-batch's pieces before accumulating them into the shard); the global norm sums
      // the shards' squares (float partials per block of each shard) in another order, so
      // the clip factor, and what follows, may differ in the last bits.
      EXPECT_LT(RelDiff(zero[r].losses[s], ddp[r].losses[s]), 1e-5)
          << v.name << " rank " << r << " step " << s + 1 << ": " << zero[r].losses[s]
          << " vs DDP " << ddp[r].losses[s];
    }
  }
  EXPECT_LT(zero[0].losses.back(), zero[0].losses.front()) << "did not learn";
  EXPECT_EQ(got.t, kSteps);
  std::printf("%s: state against DDP's: params %.2e, m %.2e, v %.2e (relative L2)\n", v.name,
              RelError(got.params, want.params), RelError(got.m, want.m), RelError(got.v, want.v));
  if (!v.offload && v.stage == 1) {
    // The same gradients and the same device update: DDP's state (bitwise on the emulator).
    EXPECT_LT(RelError(got.params, want.params), 1e-6) << v.name << ": parameters";
    EXPECT_LT(RelError(got.m, want.m), 1e-6) << v.name << ": adam m";
    EXPECT_LT(RelError(got.v, want.v), 1e-6) << v.name << ": adam v";
  } else {
    // Last-bit differences that Adam amplifies where a gradient is near zero (its update is
    // about ±lr whatever the gradient's size), while the losses agree to 1e-5: the CPU's
    // AdamW rounds the update differently from the device's (relative 1e-8 after one step on
    // the emulator, m and v bitwise), and stages 2 and 3 average every micro-batch's
    // gradient before accumulating it (avg(g1) + avg(g2) rather than DDP's avg(g1 + g2)).
    // Measured after 3 steps: offload 2.5e-4 (params) and 1.5e-3 (moments).
    EXPECT_LT(RelError(got.params, want.params), 1e-3) << v.name << ": parameters";
    EXPECT_LT(RelError(got.m, want.m), 1e-2) << v.name << ": adam m";
    EXPECT_LT(RelError(got.v, want.v), 1e-2) << v.name << ": adam v";
  }

  // Model states per rank (bytes, as allocated): parameters 4Ψ float32 + 2Ψ bf16 on every
  // rank (stage 3: the shards, 6·size(r)); moments 8·size(r) (offloaded stages 1 and 2: plus
  // the 4·size(r) master shard on the host; stage 3's master is its parameter shard);
  // gradients the whole buffer 4Ψ (stage 1) or the shard 4·size(r) (stages 2 and 3). Apart,
  // the scratch: two gradient piece buffers of MaxGradPiece floats and a receive buffer of
  // min(MaxGradPiece, size(r)) (stages 2, 3), two gather buffers of MaxParamPiece bf16 (stage
  // 3; with optimizer+params a device send buffer of min(MaxParamPiece, size(r)) bf16), and
  // offload's pinned gradient shard (and offloaded stage 3's pinned bf16 staging).
  const size_t psi = TinyConfig().num_parameters();
  const size_t piece = GptModel::MaxGradPiece(TinyConfig());
  const size_t gather = GptCudaModel::MaxParamPiece(TinyConfig());
  const ZeroPartition part{psi, kRanks};
  for (int r = 0; r < kRanks; ++r) {
    const size_t shard = part.size(r);
    const TrainModel::ModelStateBytes& b = zero[r].bytes;
    EXPECT_EQ(b.params, v.stage == 3 ? 6 * shard : 6 * psi) << v.name << " rank " << r;
    EXPECT_EQ(b.optimizer, (v.offload && v.stage < 3 ? 12 : 8) * shard) << v.name << " rank " << r;
    EXPECT_EQ(b.grads, v.stage >= 2 ? 4 * shard : 4 * psi) << v.name << " rank " << r;
    size_t scratch = v.offload ? 4 * shard : 0;
    if (v.stage >= 2) scratch += 4 * (2 * piece + std::min(piece, shard));
    if (v.stage == 3) scratch += 2 * 2 * gather + (v.offload_params ? 2 * std::min(gather, shard) : 0);
    if (v.stage == 3 && v.offload && !v.offload_params) scratch += 2 * shard;  // bf16 staging
    EXPECT_EQ(b.scratch, scratch) << v.name << " rank " << r;
    // In host memory: the moments, the master, the pinned gradient shard (16·size(r)), and
    // stage 3's bf16 shard or its pinned staging (2·size(r)).
    EXPECT_EQ(b.host, v.offload ? (v.stage == 3 ? 18 : 16) * shard : 0) << v.name << " rank " << r;
    EXPECT_EQ(ddp[r].bytes.optimizer, 8 * psi);
    EXPECT_EQ(zero[r].model_parallel, v.stage == 3) << v.name;
    if (v.stage >= 2) {
      // Stage 2's saving over stage 1, by the formula: the gradients 4Ψ − 4·size(r).
      EXPECT_EQ(ddp[r].bytes.grads - b.grads, 4 * psi - 4 * shard) << v.name;
      std::printf("%s rank %d: gradients %zu bytes (stage 1: %zu; 4Ψ − 4·size(r) = %zu saved), "
                  "scratch %zu bytes\n",
                  v.name, r, b.grads, ddp[r].bytes.grads, 4 * psi - 4 * shard, b.scratch);
    }
  }
}


// Resume by range across layouts, both ways: the state after step 2, written by CPU data 4
// ZeRO-3, resumes `v` on 2 CUDA ranks, every rank reading only what it holds (the
// parameters whole, or with ZeRO-3 its shard; its shard of the moments, or without ZeRO the
// whole moments: byte counts exact, as the CPU shards pair up into the CUDA ones), and step
// 3 is the uninterrupted run's (`straight`, ending in `straight_state`) bit for bit on the
// emulator; the checkpoint `v` writes after it resumes CPU data 4 ZeRO-3, each CPU rank
// reading the one written range per array that holds its shard, into the state `v` ended
// in, bit for bit.
void ExpectResumesByRangeAcrossLayouts(const Variant& v, const std::vector<RankRun>& straight,
                                       const State& straight_state, const State& at2) {
  testing::TempDir from, to;
  WriteOnCpuZero3(at2, 2, from.path());
  ASSERT_FALSE(::testing::Test::HasFailure());
  State resumed_state;
  Disk disk{from.path(), to.path()};
  const auto resumed = Train(v, 3, 1, nullptr, &resumed_state, nullptr, 0, &disk);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const size_t psi = TinyConfig().num_parameters();
  const ZeroPartition cuda{psi, kRanks}, cpu{psi, kCpuRanks};
  for (int r = 0; r < kRanks; ++r) {
    const size_t shard = cuda.size(r);
    const size_t want = v.stage == 0 ? 12 * psi : v.stage < 3 ? 4 * psi + 8 * shard : 12 * shard;
    EXPECT_EQ(disk.bytes_read[r], want) << v.name << " rank " << r << " (Ψ " << psi << ")";
#ifdef COHORT_CUDA_EMULATED
    EXPECT_EQ(resumed[r].losses[0], straight[r].losses[2]) << v.name << " rank " << r;
#else
    // On a GPU attention's dq sums with float atomics: not bitwise repeatable.
    EXPECT_LT(RelDiff(resumed[r].losses[0], straight[r].losses[2]), 1e-5) << v.name;
#endif
  }
#ifdef COHORT_CUDA_EMULATED
  EXPECT_EQ(resumed_state.params, straight_state.params) << v.name;
  EXPECT_EQ(resumed_state.m, straight_state.m) << v.name;
  EXPECT_EQ(resumed_state.v, straight_state.v) << v.name;
#endif
  EXPECT_EQ(resumed_state.t, kSteps);

  State on_cpu;
  const std::vector<uint64_t> cpu_read = ReadOnCpuZero3(to.path(), &on_cpu);
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(on_cpu.params, resumed_state.params) << v.name << " -> CPU data 4 ZeRO-3";
  EXPECT_EQ(on_cpu.m, resumed_state.m) << v.name << " -> CPU data 4 ZeRO-3";
  EXPECT_EQ(on_cpu.v, resumed_state.v) << v.name << " -> CPU data 4 ZeRO-3";
  EXPECT_EQ(on_cpu.t, kSteps);
  for (int r = 0; r < kCpuRanks; ++r) {
    EXPECT_EQ(cpu_read[r], 12 * cuda.size(r / 2))
        << v.name << " -> CPU rank " << r << " (its shard " << cpu.size(r) << " values)";
  }
}


// The CPU reference on one rank (ZeRO-0) stepping `steps` steps from `start`, each step the
// two ranks' micro-batches (rank 0's, then rank 1's: the same mean loss). Returns the
// per-step losses and leaves the state in *end.
std::vector<double> CpuRun(int first_step, int steps, const State& start, State* end) {
  auto made = MakeCpuTrainModel(Initial(), Adam());
  EXPECT_TRUE(made.has_value());
  TrainModel& model = **made;
  Checkpoint ckpt;
  ckpt.params = start.params;
  ckpt.adam_m = start.m;
  ckpt.adam_v = start.v;
  auto restored = model.RestoreState(nullptr, &ckpt, start.t);
  EXPECT_TRUE(restored.has_value()) << restored.error().ToString();
  std::vector<double> losses;
  for (int s = first_step; s < first_step + steps; ++s) {
    auto loss = model.TrainMicrobatches(
        kRanks * kAccum, kB, kT,
        [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
          Load(s, a / kAccum, a % kAccum, in, out);
          return {};
        },
        nullptr);
    EXPECT_TRUE(loss.has_value());
    EXPECT_TRUE(model.ClipAndStep(kMaxNorm, Lr(s)).has_value());
    losses.push_back(loss.value_or(0));
  }
  int64_t t = 0;
  auto ranges = model.CheckpointRanges(0, 1, &t);
  EXPECT_TRUE(ranges.has_value());
  *end = State{};
  end->t = t;
  for (const CheckpointRange& range : ranges.value_or(std::vector<CheckpointRange>{})) {
    std::vector<float>& into = range.array == CheckpointArray::kParams  ? end->params
                               : range.array == CheckpointArray::kAdamM ? end->m
                                                                        : end->v;
    into.assign(range.values.begin(), range.values.end());
  }
  return losses;
}

// A CUDA ZeRO-2 (ZeRO-3) checkpoint on 2 ranks resumes on the CPU on 1 rank, and a CPU
// checkpoint resumes CUDA ZeRO-2 (ZeRO-3) on 2 ranks as it resumes CUDA DDP. bf16 against float32: the
// CPU and the GPU agree to ~1e-2 (cuda_trainer_test's tolerance).
// A sink and a source over plain device allocations, one rank: what the model hands out and
// asks for, against the whole buffers.
class RecordingSink final : public CudaGradSink {
 public:
  RecordingSink(GptCudaModel& model, size_t n) : model_(model), grads_(n, 0.0f), seen_(n, 0) {}
  Result<float*> Acquire(size_t offset, size_t count) override {
    void* p = nullptr;
    COHORT_CUDA_CHECK(cudaMalloc(&p, count * sizeof(float)));
    pieces_.push_back({offset, count});
    buffer_ = static_cast<float*>(p);
    return buffer_;
  }
  Result<void> Done(size_t offset, size_t count) override {
    COHORT_TRY_VOID(model_.Synchronize());
    COHORT_CUDA_CHECK(cudaMemcpy(grads_.data() + offset, buffer_, count * sizeof(float),
                                 cudaMemcpyDeviceToHost));
    for (size_t i = offset; i < offset + count; ++i) ++seen_[i];
    COHORT_CUDA_CHECK(cudaFree(buffer_));
    return {};
  }
  GptCudaModel& model_;
  std::vector<float> grads_;
  std::vector<int> seen_;  // how many pieces covered each element
  std::vector<ParamPiece> pieces_;
  float* buffer_ = nullptr;
};

class CopyingSource final : public CudaParamSource {
 public:
  CopyingSource(GptCudaModel& model, const std::vector<float>& params) : model_(model) {
    for (float f : params) bits_.push_back(FloatToBf16Bits(f));
  }
  Result<void> BeginPass(size_t pass) override {
    expected_ = GptCudaModel::ParamPieces(model_.config(), /*backward=*/pass == 1);
    next_ = 0;
    return {};
  }
  Result<const cuda::bf16*> Gather(size_t offset, size_t count) override {
    if (next_ >= expected_.size() || !(expected_[next_] == ParamPiece{offset, count})) {
      return Errorf(ErrorCode::kInternal, "piece [{}, +{}) out of order", offset, count);
    }
    ++next_;
    void* p = nullptr;
    COHORT_CUDA_CHECK(cudaMalloc(&p, count * sizeof(uint16_t)));
    COHORT_CUDA_CHECK(cudaMemcpy(p, bits_.data() + offset, count * sizeof(uint16_t),
                                 cudaMemcpyHostToDevice));
    held_[offset] = p;
    max_held_ = std::max(max_held_, held_.size());
    return static_cast<const cuda::bf16*>(p);
  }
  Result<void> Release(size_t offset, size_t) override {
    COHORT_TRY_VOID(model_.Synchronize());
    COHORT_CUDA_CHECK(cudaFree(held_.at(offset)));
    held_.erase(offset);
    return {};
  }
  GptCudaModel& model_;
  std::vector<uint16_t> bits_;
  std::vector<ParamPiece> expected_;
  size_t next_ = 0;
  std::map<size_t, void*> held_;
  size_t max_held_ = 0;
};

// The stage-1 optimizer offload on one rank (no reducer, as the trainer runs a single GPU):
// the last micro-batch's backward hands each finished piece to the CUDA TrainModel's copy
// thread, which brings it to the host while the backward goes on, so the whole shard arrives
// before the step (TrainModel::offload_copies) and the step copies nothing more. It trains
// as the device optimizer: losses to 1e-5 over 3 steps of kAccum micro-batches.
TEST(CudaZeroTest, OneRankOffloadBringsTheGradientDuringTheBackward) {
  COHORT_SKIP_WITHOUT_GPU();
#if !defined(COHORT_CUDA_EMULATED)
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
#endif
  const GptModel initial = Initial();
  auto train = [&](CudaZeroOptions o, TrainModel::OffloadCopies* copies) {
    std::vector<double> losses;
    auto made = MakeCudaTrainModel(initial, Adam(), kB, kT, nullptr, o);
    EXPECT_TRUE(made.has_value()) << made.error().ToString();
    if (!made) return losses;
    TrainModel& model = **made;
    for (int s = 1; s <= 3; ++s) {
      auto loss = model.TrainMicrobatches(
          kAccum, kB, kT,
          [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
            Load(s, 0, a, in, out);
            return {};
          },
          nullptr);
      EXPECT_TRUE(loss.has_value()) << loss.error().ToString();
      auto norm = model.ClipAndStep(kMaxNorm, Lr(s));
      EXPECT_TRUE(norm.has_value()) << norm.error().ToString();
      if (!loss || !norm) break;
      losses.push_back(*loss);
      if (copies) *copies = model.offload_copies();
    }
    return losses;
  };
  const std::vector<double> device = train(CudaZeroOptions{nullptr, 0, false, false}, nullptr);
  TrainModel::OffloadCopies copies;
  const std::vector<double> host = train(CudaZeroOptions{nullptr, 1, true, false}, &copies);
  ASSERT_EQ(device.size(), 3u);
  ASSERT_EQ(host.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(host[s], device[s], 1e-5 * std::abs(device[s])) << "step " << s + 1;
  }
  EXPECT_EQ(copies.part, initial.params().size());
  EXPECT_EQ(copies.during_backward, copies.part) << "the step copied the gradient itself";
}

TEST(CudaZeroTest, PiecesAreTheWholeBuffers) {
  COHORT_SKIP_WITHOUT_GPU();
  // A vocabulary large enough that wte's gradient comes in several chunks of rows.
  GptConfig c = TinyConfig();
  c.vocab_size = 1000;
  c.n_layer = 1;
  auto host = GptModel::Create(c);
  ASSERT_TRUE(host.has_value());
  host->InitRandom(5);
  const std::vector<float> params(host->params().begin(), host->params().end());
  const size_t n = params.size();
  std::vector<int32_t> in(kB * kT), out(kB * kT);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>((i * 37 + 11) % 1000);
    out[i] = static_cast<int32_t>((i * 53 + 7) % 1000);
  }
  const float scale = 0.5f;

  auto whole = GptCudaModel::Create(c, kB, kT);
  ASSERT_TRUE(whole.has_value()) << whole.error().ToString();
  ASSERT_TRUE((*whole)->CopyParamsFromHost(params).has_value());
  auto loss = (*whole)->Forward(in, out, kB, kT);
  ASSERT_TRUE(loss.has_value()) << loss.error().ToString();
  ASSERT_TRUE((*whole)->Backward(scale).has_value());
  std::vector<float> want(n);
  ASSERT_TRUE((*whole)->CopyGradsToHost(want).has_value());

  auto bare = GptCudaModel::Create(c, kB, kT, {}, GptCudaStorage{false, false});
  ASSERT_TRUE(bare.has_value()) << bare.error().ToString();
  GptCudaModel& model = **bare;
  EXPECT_TRUE(model.params_device().empty());
  EXPECT_TRUE(model.grads_device().empty());
  auto none = model.Forward(in, out, kB, kT);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code, ErrorCode::kFailedPrecondition) << none.error().ToString();
  RecordingSink sink(model, n);
  CopyingSource source(model, params);
  model.SetGradSink(&sink);
  model.SetParamSource(&source);
  auto bare_loss = model.Forward(in, out, kB, kT);
  ASSERT_TRUE(bare_loss.has_value()) << bare_loss.error().ToString();
  auto backward = model.Backward(scale);
  ASSERT_TRUE(backward.has_value()) << backward.error().ToString();
  EXPECT_EQ(source.max_held_, 2u);  // a layer and the next piece's LayerNorm
  EXPECT_TRUE(source.held_.empty());

  // The pieces: GradPieces' order, each element once, none above MaxGradPiece, wte in
  // several chunks.
  EXPECT_EQ(sink.pieces_, GptCudaModel::GradPieces(c));
  size_t wte_chunks = 0;
  for (const ParamPiece& p : sink.pieces_) {
    EXPECT_LE(p.count, GptCudaModel::MaxGradPiece(c));
    if (p.offset < static_cast<size_t>(c.padded_vocab_size()) * c.n_embd) ++wte_chunks;
  }
  EXPECT_GE(wte_chunks, 2u);
  EXPECT_TRUE(std::all_of(sink.seen_.begin(), sink.seen_.end(), [](int k) { return k == 1; }));
#ifdef COHORT_CUDA_EMULATED
  EXPECT_EQ(*bare_loss, *loss);
  EXPECT_EQ(sink.grads_, want);  // the same sums in the same order
#else
  EXPECT_LT(RelDiff(*bare_loss, *loss), 1e-6);
  EXPECT_LT(RelError(sink.grads_, want), 1e-4);  // attention's dq sums with float atomics
#endif
}

// `zero`'s state after step 2 resumes on the CPU on one rank (step 3 against `gpu`'s, the
// uninterrupted run's), and the CPU's state after it resumes `zero` as it resumes CUDA DDP.
void ExpectMovesBetweenCudaZeroAndTheCpu(const Variant& zero, const std::vector<RankRun>& gpu,
                                         const State& at2) {
  State cpu_end;
  ASSERT_EQ(at2.t, 2);
  const std::vector<double> cpu = CpuRun(3, 1, at2, &cpu_end);
  const double gpu_step3 = (gpu[0].losses[2] + gpu[1].losses[2]) / 2;
  EXPECT_LT(RelDiff(cpu[0], gpu_step3), 2e-2) << cpu[0] << " vs " << gpu_step3;
  EXPECT_EQ(cpu_end.t, 3);

  // The reverse: the CPU's state after its step 3 into ZeRO-2 (3) and into DDP on the GPU.
  State z_end, d_end;
  const auto z = Train(zero, 4, 1, &cpu_end, &z_end);
  const auto d = Train(kDdp, 4, 1, &cpu_end, &d_end);
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_LT(RelDiff(z[r].losses[0], d[r].losses[0]), 1e-5) << "rank " << r;
  }
  EXPECT_LT(RelError(z_end.params, d_end.params), 1e-5);
  EXPECT_EQ(z_end.t, 4);
}

// One process per stage (the DDP run computed once in each, every variant's run shared by
// its checks): each variant's 3 steps, with the state after step 2 taken midway, against
// DDP; the same-layout resume from that state for the variants listed; and the move to the
// CPU and back for the stage without offload (stages 2 and 3).
struct StageCase {
  const char* name;
  std::vector<Variant> variants;
  std::vector<bool> resume;  // per variant: resumed by range from step 2, to and from the CPU
  bool moves = false;        // variants[0] moves to the CPU and back
};
void PrintTo(const StageCase& c, std::ostream* os) { *os << c.name; }

class CudaZeroStageTest : public ::testing::TestWithParam<StageCase> {};

TEST_P(CudaZeroStageTest, TrainsAsCudaDdpResumesAndMovesToTheCpu) {
  COHORT_SKIP_WITHOUT_TWO_GPUS();
  const StageCase& c = GetParam();
  for (size_t i = 0; i < c.variants.size(); ++i) {
    const Variant& v = c.variants[i];
    SCOPED_TRACE(v.name);
    State end, at2;
    const std::vector<RankRun> runs = Train(v, 1, kSteps, nullptr, &end, &at2, 2);
    ASSERT_FALSE(HasFailure());
    ExpectTrainsAsCudaDdpWithItsFormulaOfBytes(v, runs, end);
    if (c.resume[i]) ExpectResumesByRangeAcrossLayouts(v, runs, end, at2);
    if (c.moves && i == 0) ExpectMovesBetweenCudaZeroAndTheCpu(v, runs, at2);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Stages, CudaZeroStageTest,
    ::testing::Values(
        StageCase{"zero1", {Variant{"zero1", 1, false}, Variant{"zero1_offload", 1, true}},
                  {true, true}},
        StageCase{"zero2", {Variant{"zero2", 2, false}, Variant{"zero2_offload", 2, true}},
                  {true, true}, true},
        StageCase{"zero3",
                  {Variant{"zero3", 3, false}, Variant{"zero3_offload", 3, true},
                   Variant{"zero3_offload_params", 3, true, true}},
                  {true, false, true}, true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cohort::engine
