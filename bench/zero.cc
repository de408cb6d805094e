// bench_zero: ZeRO in the data-parallel group and checkpoints by range, on CPU ranks (one
// thread per rank, gloo over loopback or shm with COHORT_BENCH_COMM=shm, in one process),
// printed beside their targets.
//
//   bench_zero [--section memory|memory-cuda|step|prefetch|checkpoint|resume|resume-cuda|
//              offload|all] [--ranks N] [--steps S]
//
// memory      model-state bytes per rank for ZeRO stages 0, 1 and 2 on N (4) ranks, counted
//             where the model allocates them (TrainModel::model_state_bytes), beside the
//             ZeRO paper's formula for float32 training (Ψ parameters: parameters 4Ψ,
//             gradients 4Ψ, AdamW moments 8Ψ; stage 1 shards the moments, stage 2 also the
//             gradients, stage 3 also the parameters). Target: within 5%. The scratch of
//             stages 2 and 3 (gradient piece buffers and a receive buffer; stage 3's buffer
//             of gathered parameters) is printed beside, not in the total: the formula has no
//             term for it.
// memory-cuda model-state bytes per rank for ZeRO stages 0 to 3 inside a CUDA tensor 2 x
//             data N/2 layout (trainer/cuda_shard_engine.cc; not part of `all`; skipped
//             without a CUDA engine and device), counted where the engine allocates them,
//             beside the formula for its precision over the position's shard of Ψ_s floats
//             and N_d data ranks: float32 master and bf16 copy 6Ψ_s, float32 gradients 4Ψ_s,
//             AdamW moments 8Ψ_s; stage 1 shards the moments, 2 also the gradients, 3 also
//             the parameters (18Ψ_s/N_d). Target: the formula exactly (ratio 1.000). The
//             scratch (stages 2, 3: the whole accumulation buffer 4Ψ_s, a receive buffer;
//             stage 3's two gather buffers) beside it. The ranks are threads over gloo, the
//             models constructed only (no step), all on device 0: bench_zero_emu runs it on
//             the CPU emulator with a tiny model. Then the offloads' device and host bytes,
//             and optimizer+params with one data replica (tensor 2 x data 1).
// step        median step time (forward, backward with the bucket reduction, clip and
//             AdamW; S steps after one warm-up) of stages 1, 2 and 3 beside DDP (stage 0) on
//             N ranks (stages 2 and 3 reduce-scatter their gradient pieces: no DdpReducer;
//             stage 3 prefetches, as cohort train's default).
//             Target on CPU: within 1.3x of DDP (the figure for stage 3).
// prefetch    ZeRO-3's gathers with and without the prefetch of the next piece
//             (parallel.prefetch, parallel/zero_params.h), side by side in one run: data
//             parallel on N ranks (the step section's model) and tensor 2 x data N/2 (the
//             shard model, trainer/shard_zero.h); median step time, the training thread's
//             wait for gathers per step (rank 0) and the prefetches that hit. No target (the
//             issue asks that the wait shrink; on a machine with fewer cores than ranks the
//             communication thread competes with the compute it would hide behind).
// checkpoint  a checkpoint of a GPT-2-vocabulary model's state written by N ranks by range
//             (SaveCheckpointRanges: each its 1/N of every array, in parallel) beside one
//             process writing the same bytes (SaveCheckpoint), and the load time. Target:
//             the parallel write at least as fast.
// resume      resuming data 4 (N) with ZeRO-3 from its checkpoint (a GPT-2-vocabulary model,
//             d_model 256, 4 layers, 16M parameters), each rank a process of its own (this
//             program re-run), before and after side by side: rank 0 loading the whole
//             checkpoint and sending every rank its shard (LoadLatestCheckpoint, RestoreState:
//             the path before resume by range) against every rank reading and verifying only
//             the written ranges it needs (LoadCheckpointRanges). Per rank: bytes read from the
//             checkpoint files, the peak RSS during the resume above the RSS before it (VmHWM
//             reset through /proc/self/clear_refs), and the seconds. Target: each rank's
//             bytes and memory its shard's (12 bytes per parameter of its shard), not the
//             model's.
// resume-cuda the CUDA model (trainer/cuda_train_model.cc; not part of `all`; skipped without
//             a CUDA engine and device) resuming with data N/2 and ZeRO-3, then ZeRO-1, from a
//             checkpoint written by CPU data N with ZeRO-3 (another layout; vocab 8192,
//             d_model 128, 2 layers, 1.5M parameters, small enough for the CPU emulator),
//             each rank a process over gloo, before and after side by side as in `resume`:
//             rank 0 loading the whole checkpoint (RestoreState) against every rank reading
//             what it holds (LoadCheckpointRanges with the model's RestoreRequest). Target:
//             each rank reads its shard (ZeRO-3) or the parameters and its shard of the
//             moments (ZeRO-1), not the whole checkpoint. bench_zero_emu runs it on the CPU
//             emulator, where device memory is host memory and so counts in the RSS.
// offload     on one GPU (skipped without one; not part of `all`): GPT-2 small (124M, B 4,
//             T 1024, 2 micro-batches) trained by the CUDA model with AdamW on the device
//             beside AdamW offloaded to the host (trainer/cuda_zero.h: parallel.offload
//             optimizer with stages 1 and 2, optimizer+params with stage 3): median step
//             time, its tail (ClipAndStep: the host step and the copies back, overlapped
//             chunk by chunk), device and host model-state bytes, and the last loss beside
//             the device optimizer's. No target (the issue sets none): what offload costs in
//             time for the bytes it moves off the device. bench_zero_emu (built with the CPU
//             emulator, tests/engine/cuda_emu.cmake) runs this section on a tiny model for
//             correctness only.
//
// Each rank runs one OpenMP thread; on a machine with fewer cores than ranks they share the
// cores, which the figures then include.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "engine/checkpoint/checkpoint.h"
#include "engine/model/gpt_shard.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/ddp.h"
#include "engine/parallel/layout.h"
#include "engine/parallel/zero.h"
#include "engine/trainer/train_model.h"
#include "engine_bench_util.h"

namespace {

using namespace cohort;
using namespace cohort::engine;
using namespace cohort::engine::bench;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::unique_ptr<TrainModel> MakeModel(const GptConfig& c, comm::Communicator& comm, int stage,
                                      bool prefetch = false) {
  GptModel init = Check(GptModel::Create(c), "model");
  init.InitRandom(7);
  if (stage == 0) return Check(MakeCpuTrainModel(std::move(init), AdamWConfig{}), "model");
  return Check(MakeZeroCpuTrainModel(std::move(init), AdamWConfig{}, comm, stage, prefetch),
               "model");
}

void Memory(int ranks) {
  const GptConfig c = Model(4, 256, 4, 50257, 128);
  const double psi = static_cast<double>(c.num_parameters());
  fmt::print("== model states per rank: {} ranks, {:.2f}M parameters (vocab 50257, d_model 256, "
             "4 layers), float32 ==\n",
             ranks, psi / 1e6);
  fmt::print("{:<8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>8} {:>11}  {}\n", "stage",
             "params MB", "grads MB", "optim MB", "total MB", "formula MB", "ratio", "scratch MB",
             "target (within 5%)");
  for (int stage = 0; stage <= 3; ++stage) {
    // The paper's formula for float32 AdamW (no separate master copy: the parameters are).
    const double nd = ranks;
    const double formula = stage == 0   ? 16 * psi
                           : stage == 1 ? 4 * psi + 4 * psi + 8 * psi / nd
                           : stage == 2 ? 4 * psi + (4 + 8) * psi / nd
                                        : 16 * psi / nd;
    std::mutex mu;
    TrainModel::ModelStateBytes worst;
    RunRanks(ranks, [&](comm::Communicator& comm) {
      auto model = MakeModel(c, comm, stage);
      const TrainModel::ModelStateBytes b = model->model_state_bytes();
      std::lock_guard lock(mu);
      if (b.params + b.grads + b.optimizer > worst.params + worst.grads + worst.optimizer) worst = b;
    });
    const double total = static_cast<double>(worst.params + worst.grads + worst.optimizer);
    const double ratio = total / formula;
    fmt::print("{:<8} {:>12.1f} {:>12.1f} {:>12.1f} {:>12.1f} {:>12.1f} {:>8.3f} {:>11.1f}  {}\n",
               fmt::format("ZeRO-{}", stage), worst.params / 1e6, worst.grads / 1e6,
               worst.optimizer / 1e6, total / 1e6, formula / 1e6, ratio, worst.scratch / 1e6,
               std::abs(ratio - 1) <= 0.05 ? "met" : "MISSED");
  }
  if (ranks < 4 || ranks % 2 != 0) return;
  // ZeRO 2 and 3 inside tensor/pipeline layouts (trainer/shard_zero.h): the same model split
  // over tensor 2 or pipeline 2, ZeRO over the data group of each position. Formula per rank
  // for its position's shard of Ψ_s floats over N_d data ranks: stage 2 4Ψ_s + 12Ψ_s/N_d,
  // stage 3 16Ψ_s/N_d. The scratch beside it: as held now (no whole gradient buffer: two
  // piece buffers, a receive buffer, wte's slices, stage 3's gathered pieces) and as the code
  // before this change held it, counted from the same layout (the whole gradient buffer
  // 4Ψ_s, a receive buffer, and for stage 3 two gather buffers of the largest piece, wte +
  // wpe on the first stage).
  fmt::print("== ZeRO in layouts: model states and scratch per rank (the largest rank), {} ranks "
             "==\n",
             ranks);
  fmt::print("{:<26} {:>10} {:>10} {:>10} {:>11} {:>8} {:>13} {:>16}\n", "layout", "params MB",
             "grads MB", "optim MB", "formula MB", "ratio", "scratch MB", "before: scratch MB");
  for (int pipeline : {1, 2}) {
    for (int stage : {2, 3}) {
      ParallelConfig pc;
      pc.tensor = 3 - pipeline;
      pc.pipeline = pipeline;
      pc.zero = stage;
      const ParallelLayout layout = Check(MakeParallelLayout(pc, c, ranks), "layout");
      std::mutex mu;
      TrainModel::ModelStateBytes worst;
      double worst_formula = 0, worst_before = 0;
      RunRanks(ranks, [&](comm::Communicator& comm) {
        auto model = Check(MakeParallelCpuTrainModel(c, InitialParams{7, nullptr}, AdamWConfig{},
                                                     layout, comm, nullptr, stage, false),
                           "model");
        const TrainModel::ModelStateBytes b = model->model_state_bytes();
        const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, c, comm.rank()));
        const double ps = static_cast<double>(shard.total), nd = layout.data;
        const ZeroPartition part{shard.total, layout.data};
        const double mine = static_cast<double>(part.size(layout.CoordsOf(comm.rank()).data));
        const double formula = stage == 2 ? 4 * ps + 12 * ps / nd : 16 * ps / nd;
        size_t old_piece = 1;  // the largest piece before: the embeddings were one
        for (size_t k = 0; k < shard.chunks.size(); ++k) {
          const ShardChunkPieces p = ShardParamPieces(shard, static_cast<int>(k));
          old_piece = std::max({old_piece, p.wte.size() + p.wpe.size(), p.ln_f.size(),
                                p.head_wte.size() + (p.head_wte.begin == p.wte.begin ? p.wpe.size() : 0)});
          for (const ShardBlockOffsets& w : shard.chunks[k].blocks) {
            old_piece = std::max(old_piece, w.end - w.begin);
          }
        }
        const double before = 4 * ps + 4 * std::min<double>(old_piece, mine) +
                              (stage == 3 ? 4.0 * 2 * old_piece : 0.0);
        std::lock_guard lock(mu);
        if (b.params + b.grads + b.optimizer > worst.params + worst.grads + worst.optimizer) {
          worst = b;
          worst_formula = formula;
          worst_before = before;
        }
      });
      const double total = static_cast<double>(worst.params + worst.grads + worst.optimizer);
      fmt::print("{:<26} {:>10.1f} {:>10.1f} {:>10.1f} {:>11.1f} {:>8.3f} {:>13.1f} {:>16.1f}\n",
                 fmt::format("{} 2 x data {}, ZeRO-{}", pipeline == 1 ? "tensor" : "pipeline",
                             ranks / 2, stage),
                 worst.params / 1e6, worst.grads / 1e6, worst.optimizer / 1e6, worst_formula / 1e6,
                 total / worst_formula, worst.scratch / 1e6, worst_before / 1e6);
    }
  }
}

// ZeRO 0-3 in a CUDA tensor 2 x data N/2 layout: model-state bytes beside the formula.
void MemoryCuda(int ranks) {
  if (!CudaTrainingBuilt() || !SelectCudaDevice(0)) {
    fmt::print("== memory-cuda: skipped (no CUDA engine or device) ==\n");
    return;
  }
  if (ranks < 4 || ranks % 2 != 0) {
    fmt::print("== memory-cuda: skipped (needs an even --ranks >= 4) ==\n");
    return;
  }
#ifdef COHORT_CUDA_EMULATED
  const GptConfig c = Model(2, 64, 4, 512, 32);
  const char* what = "d_model 64, 2 layers, vocab 512 (CPU emulator)";
#else
  const GptConfig c = Model(4, 256, 4, 4096, 128);
  const char* what = "d_model 256, 4 layers, vocab 4096";
#endif
  fmt::print("== ZeRO in a CUDA tensor 2 x data {} layout: model states per rank (the largest "
             "rank), {:.2f}M parameters ({}) ==\n",
             ranks / 2, c.num_parameters() / 1e6, what);
  fmt::print("{:<8} {:>10} {:>10} {:>10} {:>10} {:>11} {:>8} {:>11}  {}\n", "stage", "params MB",
             "grads MB", "optim MB", "total MB", "formula MB", "ratio", "scratch MB",
             "target (the formula)");
  for (int stage = 0; stage <= 3; ++stage) {
    ParallelConfig pc;
    pc.tensor = 2;
    pc.zero = stage;
    const ParallelLayout layout = Check(MakeParallelLayout(pc, c, ranks), "layout");
    std::mutex mu;
    TrainModel::ModelStateBytes worst;
    double worst_formula = 0;
    RunRanks(ranks, [&](comm::Communicator& comm) {
      Check(SelectCudaDevice(0), "device");
      auto model = Check(MakeParallelCudaTrainModel(c, InitialParams{7, nullptr}, AdamWConfig{},
                                                    layout, comm, comm, nullptr,
                                                    ParallelStepOptions{}, stage),
                         "model");
      const TrainModel::ModelStateBytes b = model->model_state_bytes();
      const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, c, comm.rank()));
      const double ps = static_cast<double>(shard.total), nd = layout.data;
      const double formula = stage == 0   ? 18 * ps
                             : stage == 1 ? 10 * ps + 8 * ps / nd
                             : stage == 2 ? 6 * ps + 12 * ps / nd
                                          : 18 * ps / nd;
      std::lock_guard lock(mu);
      if (b.params + b.grads + b.optimizer > worst.params + worst.grads + worst.optimizer) {
        worst = b;
        worst_formula = formula;
      }
    });
    const double total = static_cast<double>(worst.params + worst.grads + worst.optimizer);
    const double ratio = total / worst_formula;
    fmt::print("{:<8} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>11.3f} {:>8.4f} {:>11.3f}  {}\n",
               fmt::format("ZeRO-{}", stage), worst.params / 1e6, worst.grads / 1e6,
               worst.optimizer / 1e6, total / 1e6, worst_formula / 1e6, ratio,
               worst.scratch / 1e6, std::abs(ratio - 1) <= 1e-3 ? "met" : "MISSED");
  }
  // The offloads (trainer/host_shard_adamw.h): the data rank's part of the AdamW state and
  // the float32 master on the host, with optimizer+params the bf16 part too. Device: every
  // byte the engine holds there (model states and scratch: the accumulation buffer 4Ψ_s, the
  // receive buffer and stage 3's gather buffers are beside the formula); host: the moments and
  // master, the pinned gradient part, stage 3's bf16 part or its pinned staging.
  fmt::print("== offloaded in the same layout: device and host bytes per rank (the largest rank) "
             "==\n");
  fmt::print("{:<31} {:>10} {:>11} {:>11} {:>10} {:>11} {:>8}  {}\n", "stage", "device MB",
             "formula MB", "scratch MB", "host MB", "formula MB", "ratio",
             "target (host: the formula)");
  // The last row: optimizer+params with one data replica (tensor 2 x data 1, two ranks), the
  // parameters on the host and stage 3's pieces over the replica itself.
  struct Offloaded {
    int stage;
    bool params;
    bool one_replica = false;
  };
  for (const Offloaded o : {Offloaded{1, false}, Offloaded{2, false}, Offloaded{3, false},
                            Offloaded{3, true}, Offloaded{3, true, true}}) {
    ParallelConfig pc;
    pc.tensor = 2;
    pc.zero = o.stage;
    const int world = o.one_replica ? 2 : ranks;
    const ParallelLayout layout = Check(MakeParallelLayout(pc, c, world), "layout");
    std::mutex mu;
    size_t device = 0, host = 0;
    double device_formula = 0, host_formula = 0;
    RunRanks(world, [&](comm::Communicator& comm) {
      Check(SelectCudaDevice(0), "device");
      auto model = Check(MakeParallelCudaTrainModel(c, InitialParams{7, nullptr}, AdamWConfig{},
                                                    layout, comm, comm, nullptr,
                                                    ParallelStepOptions{}, o.stage, true, o.params),
                         "model");
      const TrainModel::ModelStateBytes b = model->model_state_bytes();
      const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, c, comm.rank()));
      const double ps = static_cast<double>(shard.total), nd = layout.data;
      const double on_device = o.stage == 1   ? 10 * ps
                               : o.stage == 2 ? 6 * ps + 4 * ps / nd
                               : o.params     ? 4 * ps / nd
                                              : 6 * ps / nd;
      const double on_host = (o.stage == 3 ? 18 : 16) * ps / nd;
      const size_t d = b.params + b.grads + b.optimizer + b.scratch - b.host;
      std::lock_guard lock(mu);
      if (d + b.host > device + host) {
        device = d;
        host = b.host;
        device_formula = on_device;
        host_formula = on_host;
      }
    });
    const double ratio = static_cast<double>(host) / host_formula;
    fmt::print("{:<31} {:>10.3f} {:>11.3f} {:>11.3f} {:>10.3f} {:>11.3f} {:>8.4f}  {}\n",
               fmt::format("ZeRO-{} {}{}", o.stage, o.params ? "optimizer+params" : "optimizer",
                           o.one_replica ? ", data 1" : ""),
               device / 1e6, device_formula / 1e6, (device - device_formula) / 1e6, host / 1e6,
               host_formula / 1e6, ratio, std::abs(ratio - 1) <= 1e-3 ? "met" : "MISSED");
  }
}

void Step(int ranks, int steps) {
  const GptConfig c = Model(4, 256, 4, 4096, 128);
  const int B = 4, T = 128;
  fmt::print("== step time: {} ranks, d_model 256, 4 layers, vocab 4096, {} x {} tokens per rank, "
             "median of {} steps ==\n",
             ranks, B, T, steps);
  fmt::print("{:<8} {:>10} {:>10}  {}\n", "stage", "step ms", "vs DDP", "target (<= 1.3x DDP)");
  double ddp = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    std::vector<double> times;
    RunRanks(ranks, [&](comm::Communicator& comm) {
      auto model = MakeModel(c, comm, stage, /*prefetch=*/true);  // as cohort train
      const size_t bucket = size_t{4} << 20;
      std::unique_ptr<DdpReducer> reducer =
          stage >= 2 ? nullptr : std::make_unique<DdpReducer>(comm, model->grads(), bucket);
      auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
        Fill(a + comm.rank() * 1000, in, out, c.vocab_size);
        return {};
      };
      for (int s = 0; s <= steps; ++s) {
        Check(comm.Barrier(), "barrier");
        const auto t0 = Clock::now();
        Check(model->TrainMicrobatches(1, B, T, load, reducer.get()), "step");
        Check(model->ClipAndStep(1.0, 1e-4f), "optimizer");
        Check(comm.Barrier(), "barrier");
        if (comm.rank() == 0 && s > 0) times.push_back(Seconds(t0));
      }
    });
    const double ms = Median(times) * 1000;
    if (stage == 0) ddp = ms;
    fmt::print("{:<8} {:>10.1f} {:>9.2f}x  {}\n", fmt::format("ZeRO-{}", stage), ms, ms / ddp,
               stage == 0 ? "baseline" : (ms <= 1.3 * ddp ? "met" : "MISSED"));
  }
}

void Prefetch(int ranks, int steps) {
  const GptConfig c = Model(4, 256, 4, 4096, 128);
  const int B = 4, T = 128;
  fmt::print("== ZeRO-3 prefetch: {} ranks, d_model 256, 4 layers, vocab 4096, {} x {} tokens per "
             "rank, median of {} steps ==\n",
             ranks, B, T, steps);
  fmt::print("{:<22} {:<10} {:>10} {:>14} {:>10} {:>10} {:>13}  {}\n", "layout", "prefetch",
             "step ms", "gather wait ms", "hits", "misses", "gathered MB", "vs no prefetch");
  struct Setup {
    std::string name;
    int tensor;
  };
  std::vector<Setup> setups = {{fmt::format("data {}", ranks), 1}};
  if (ranks >= 4 && ranks % 2 == 0) setups.push_back({fmt::format("tensor 2 x data {}", ranks / 2), 2});
  for (const Setup& setup : setups) {
    double base_ms = 0;
    for (bool prefetch : {false, true}) {
      std::vector<double> times;
      TrainModel::GatherStats before, after;
      RunRanks(ranks, [&](comm::Communicator& comm) {
        std::unique_ptr<TrainModel> model;
        if (setup.tensor > 1) {
          ParallelConfig pc;
          pc.tensor = setup.tensor;
          pc.zero = 3;
          const ParallelLayout layout = Check(MakeParallelLayout(pc, c, ranks), "layout");
          model = Check(MakeParallelCpuTrainModel(c, InitialParams{7, nullptr}, AdamWConfig{},
                                                  layout, comm, nullptr, 3, prefetch),
                        "model");
        } else {
          model = MakeModel(c, comm, 3, prefetch);
        }
        const int replica = comm.rank() / setup.tensor;
        auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
          Fill(a + replica * 1000, in, out, c.vocab_size);
          return {};
        };
        for (int s = 0; s <= steps; ++s) {
          Check(comm.Barrier(), "barrier");
          if (s == 1 && comm.rank() == 0) before = model->gather_stats().value_or(before);
          const auto t0 = Clock::now();
          Check(model->TrainMicrobatches(1, B, T, load, nullptr), "step");
          Check(model->ClipAndStep(1.0, 1e-4f), "optimizer");
          Check(comm.Barrier(), "barrier");
          if (comm.rank() == 0 && s > 0) times.push_back(Seconds(t0));
        }
        if (comm.rank() == 0) after = model->gather_stats().value_or(after);
      });
      const double ms = Median(times) * 1000;
      if (!prefetch) base_ms = ms;
      const double wait_ms = (after.wait_seconds - before.wait_seconds) * 1000 / steps;
      fmt::print("{:<22} {:<10} {:>10.1f} {:>14.1f} {:>10} {:>10} {:>13.2f}  {}\n", setup.name,
                 prefetch ? "on" : "off", ms, wait_ms, after.hits - before.hits,
                 after.misses - before.misses, after.peak_gathered_bytes / 1e6,
                 prefetch ? fmt::format("{:.2f}x step time", ms / base_ms) : "baseline");
    }
  }
}

// The world's ranks as a CheckpointGroup over a gloo communicator.
class CommGroup : public CheckpointGroup {
 public:
  explicit CommGroup(comm::Communicator& c) : c_(c) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  Result<void> Broadcast(std::span<int64_t> v) override {
    return c_.Broadcast(v.data(), v.size(), comm::DataType::kInt64, 0);
  }
  Result<void> Max(std::span<float> v) override {
    return c_.AllReduce(v.data(), v.data(), v.size(), comm::DataType::kFloat32, comm::ReduceOp::kMax);
  }

 private:
  comm::Communicator& c_;
};

void CheckpointIo(int ranks) {
  const GptConfig c = Model(12, 768, 12, 50257, 1024);  // GPT-2 small: 124M parameters
  const size_t n = c.num_parameters();
  std::vector<float> params(n, 0.5f), m(n, 0.25f), v(n, 0.125f);
  for (size_t i = 0; i < n; ++i) params[i] += static_cast<float>(i % 1021) * 1e-4f;
  const std::string dir = (std::filesystem::temp_directory_path() /
                           fmt::format("cohort-bench-zero-ckpt-{}", ::getpid()))
                              .string();
  std::filesystem::remove_all(dir);
  CheckpointHeader header;
  header.config = c;
  header.progress.step = 1;
  const double gb = 3.0 * n * sizeof(float) / 1e9;
  fmt::print("== checkpoint of GPT-2 small's state ({:.2f} GB: parameters and AdamW moments) in "
             "{} ==\n",
             gb, std::filesystem::temp_directory_path().string());
  // One process writes everything.
  CheckpointView view;
  view.config = c;
  view.params = params;
  view.adam_m = m;
  view.adam_v = v;
  view.progress = header.progress;
  auto t0 = Clock::now();
  Check(SaveCheckpoint(dir + "/one", view, 1), "one-process checkpoint");
  const double one = Seconds(t0);
  // N ranks, each its 1/N of every array, in parallel.
  double parallel = 0;
  RunRanks(ranks, [&](comm::Communicator& comm) {
    CommGroup group(comm);
    const ZeroPartition p{n, comm.size()};
    const size_t lo = p.begin(comm.rank()), k = p.size(comm.rank());
    const CheckpointRange mine[] = {
        {CheckpointArray::kParams, lo, k, k, 1, std::span<const float>(params).subspan(lo, k)},
        {CheckpointArray::kAdamM, lo, k, k, 1, std::span<const float>(m).subspan(lo, k)},
        {CheckpointArray::kAdamV, lo, k, k, 1, std::span<const float>(v).subspan(lo, k)}};
    Check(comm.Barrier(), "barrier");
    const auto start = Clock::now();
    Check(SaveCheckpointRanges(&group, dir + "/ranks", header, mine, 1), "parallel checkpoint");
    if (comm.rank() == 0) parallel = Seconds(start);
  });
  t0 = Clock::now();
  auto loaded = Check(LoadLatestCheckpoint(dir + "/ranks", c), "load");
  const double load = Seconds(t0);
  std::filesystem::remove_all(dir);
  fmt::print("{:<34} {:>8} {:>9}  {}\n", "write", "seconds", "GB/s", "target");
  fmt::print("{:<34} {:>8.2f} {:>9.2f}  baseline\n", "one process (SaveCheckpoint)", one, gb / one);
  fmt::print("{:<34} {:>8.2f} {:>9.2f}  {}\n",
             fmt::format("{} ranks by range", ranks), parallel, gb / parallel,
             parallel <= one ? "met (at least as fast)" : "MISSED (slower than one process)");
  fmt::print("{:<34} {:>8.2f} {:>9.2f}  (rank 0 reads and verifies every range)\n",
             "load (verify ranges)", load, gb / load);
  if (loaded.params.size() != n) std::exit(1);
}

// The resume section's model and its ZeRO-3 ranks.
GptConfig ResumeModel() { return Model(4, 256, 4, 50257, 128); }

// This process's resident memory: now and at most since the last ResetPeakRss (bytes).
size_t StatusBytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, field, len) == 0) kb = std::strtoull(line + len + 1, nullptr, 10);
  }
  std::fclose(f);
  return kb * 1024;
}
void ResetPeakRss() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

// The resume-cuda section's model: small enough for the CPU emulator of the CUDA kernels.
GptConfig ResumeCudaModel() { return Model(2, 128, 4, 8192, 128); }

// The request of a model's RestoreRequest (std::optional before every model read by range).
template <typename R>
const CheckpointReadRequest* RequestOf(const R& r) {
  if constexpr (std::is_same_v<R, CheckpointReadRequest>) {
    return &r;
  } else {
    return r ? &*r : nullptr;
  }
}

// One rank of the resume sections, in a process of its own: `mode` "write" makes the
// checkpoint (CPU ZeRO-3 over `ranks`); "whole" resumes through rank 0 (before), "ranges" by
// range (after), with the CPU's ZeRO-3 model (`stage` -1: the resume section) or the CUDA
// model with ZeRO `stage` (resume-cuda). Prints "RESUME <rank> <bytes read> <peak RSS above
// the start> <seconds>", or "RESUME <rank> none" when the model cannot read by range.
int ResumeChild(const std::string& mode, int rank, int ranks, const std::string& dir, int stage) {
  std::shared_ptr<comm::Store> store(
      comm::OpenStore(fmt::format("file://{}/store-{}{}", dir, mode, stage), false, Millis(60000))
          .value()
          .release());
  comm::CommOptions o;
  o.backend = "gloo";
  o.rank = rank;
  o.world_size = ranks;
  o.store = store;
  o.prefix = "resume";
  o.timeout = Millis(600000);
  o.iface_host = "127.0.0.1";
  std::unique_ptr<comm::Communicator> comm = Check(comm::CreateCommunicator(o), "communicator");
  omp_set_num_threads(1);
  const GptConfig c = stage < 0 ? ResumeModel() : ResumeCudaModel();
  std::unique_ptr<TrainModel> model;
  if (stage < 0 || mode == "write") {
    model = Check(MakeZero3CpuTrainModelFromSeed(c, 7, AdamWConfig{}, *comm, false), "model");
  } else {
    // One GPU per rank where there are enough, else all on the first (the emulator's one).
    const CudaDeviceChoice first = Check(SelectCudaDevice(0), "device");
    if (first.visible > 1) Check(SelectCudaDevice(rank % first.visible), "device");
    GptModel initial = Check(GptModel::Create(c), "model");
    initial.InitRandom(7);
    model = Check(MakeCudaTrainModel(initial, AdamWConfig{}, 1, 16, nullptr,
                                     CudaZeroOptions{comm.get(), stage, false, false}),
                  "CUDA model");
  }  // the initial model freed before the resume is measured
  TrainModelCheckpointGroup group(*model, *comm);
  const std::string ckpt_dir = dir + "/checkpoints";
  if (mode == "write") {
    CheckpointHeader header;
    header.config = c;
    header.progress.step = 1;
    auto mine = Check(model->CheckpointRanges(rank, ranks, &header.adam_t), "ranges");
    Check(SaveCheckpointRanges(&group, ckpt_dir, header, mine, 0), "checkpoint");
    return 0;
  }
  Check(comm->Barrier(), "barrier");
  const size_t before = StatusBytes("VmRSS:");
  ResetPeakRss();
  const auto t0 = Clock::now();
  uint64_t read = 0;
  if (mode == "whole") {
    std::optional<Checkpoint> ckpt;
    if (rank == 0) {
      ckpt = Check(LoadLatestCheckpoint(ckpt_dir, c), "load");
      read = 12 * c.num_parameters();  // LoadLatestCheckpoint reads both files whole
    }
    Check(model->RestoreState(comm.get(), ckpt ? &*ckpt : nullptr, 0), "restore");
  } else {
    const auto request = model->RestoreRequest();
    if (RequestOf(request) == nullptr) {
      fmt::print("RESUME {} none\n", rank);
      return 0;
    }
    const CheckpointShard got =
        Check(LoadCheckpointRanges(&group, ckpt_dir, c, *RequestOf(request)), "load");
    Check(model->FinishRestore(got.adam_t), "restore");
    read = got.bytes_read;
  }
  const double seconds = Seconds(t0);
  const size_t peak = StatusBytes("VmHWM:");
  Check(comm->Barrier(), "barrier");
  fmt::print("RESUME {} {} {} {:.3f}\n", rank, read, peak > before ? peak - before : 0, seconds);
  return 0;
}

// Runs `ranks` processes of this program in `mode` (ResumeChild's `stage`); their RESUME
// lines by rank.
std::vector<std::string> RunResumeRanks(const std::string& mode, int ranks, const std::string& dir,
                                        int stage = -1) {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) Check(MakeError(ErrorCode::kUnavailable, "readlink /proc/self/exe"), "resume");
  exe[len] = 0;
  std::vector<std::FILE*> pipes;
  for (int r = 0; r < ranks; ++r) {
    const std::string cmd =
        fmt::format("'{}' --resume-child {} {} {} '{}' {}", exe, mode, r, ranks, dir, stage);
    pipes.push_back(popen(cmd.c_str(), "r"));
    if (!pipes.back()) Check(MakeError(ErrorCode::kUnavailable, "popen " + cmd), "resume");
  }
  std::vector<std::string> lines(static_cast<size_t>(ranks));
  bool failed = false;
  for (int r = 0; r < ranks; ++r) {
    char line[512];
    while (std::fgets(line, sizeof(line), pipes[r])) {
      if (std::strncmp(line, "RESUME ", 7) == 0) lines[r] = line + 7;
    }
    failed |= pclose(pipes[r]) != 0;
  }
  if (failed) Check(MakeError(ErrorCode::kInternal, "a rank failed (" + mode + ")"), "resume");
  return lines;
}

// A fresh folder for a resume section's checkpoint and stores, removed on destruction.
class ResumeDir {
 public:
  explicit ResumeDir(const char* name)
      : path_((std::filesystem::temp_directory_path() /
               fmt::format("cohort-bench-zero-{}-{}", name, ::getpid()))
                  .string()) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ResumeDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The table of a resume: per rank its shard's bytes (`shard_bytes(r)`), then before's and
// after's bytes read, peak RSS above the start and seconds. Returns whether every rank read
// at most `want_bytes(r)` (+5%) after.
template <typename Shard, typename Want>
bool PrintResume(int ranks, const std::vector<std::string>& before,
                 const std::vector<std::string>& after, Shard shard_bytes, Want want_bytes) {
  fmt::print("{:<6} {:>10} | {:>12} {:>14} {:>8} | {:>12} {:>14} {:>8}\n", "rank", "shard MB",
             "before: read", "peak RSS +MB", "s", "after: read", "peak RSS +MB", "s");
  bool met = true;
  for (int r = 0; r < ranks; ++r) {
    unsigned long long b_read = 0, b_peak = 0, a_read = 0, a_peak = 0;
    double b_s = 0, a_s = 0;
    int ignore = 0;
    std::sscanf(before[r].c_str(), "%d %llu %llu %lf", &ignore, &b_read, &b_peak, &b_s);
    if (std::sscanf(after[r].c_str(), "%d %llu %llu %lf", &ignore, &a_read, &a_peak, &a_s) < 4) {
      fmt::print("{:<6} {:>10.1f} | {:>12.1f} {:>14.1f} {:>8.2f} | {:>38}\n", r,
                 shard_bytes(r) / 1e6, b_read / 1e6, b_peak / 1e6, b_s, "(no resume by range)");
      met = false;
      continue;
    }
    met &= a_read <= want_bytes(r) * 1.05;
    fmt::print("{:<6} {:>10.1f} | {:>12.1f} {:>14.1f} {:>8.2f} | {:>12.1f} {:>14.1f} {:>8.2f}\n", r,
               shard_bytes(r) / 1e6, b_read / 1e6, b_peak / 1e6, b_s, a_read / 1e6, a_peak / 1e6,
               a_s);
  }
  return met;
}

void Resume(int ranks) {
  const GptConfig c = ResumeModel();
  const double psi = static_cast<double>(c.num_parameters());
  std::vector<std::string> before, after;
  {
    const ResumeDir dir("resume");
    RunResumeRanks("write", ranks, dir.path());
    before = RunResumeRanks("whole", ranks, dir.path());
    after = RunResumeRanks("ranges", ranks, dir.path());
  }
  fmt::print("== resume of data {} with ZeRO-3: {:.2f}M parameters (vocab 50257, d_model 256, 4 "
             "layers), a checkpoint of {:.1f} MB; each rank a process ==\n",
             ranks, psi / 1e6, 12 * psi / 1e6);
  const ZeroPartition part{c.num_parameters(), ranks};
  const auto shard = [&](int r) { return 12.0 * part.size(r); };
  const bool met = PrintResume(ranks, before, after, shard, shard);
  fmt::print("target (each rank reads its shard's bytes, not the model's): {}\n",
             met ? "met" : "MISSED");
}

// The CUDA model resuming from a checkpoint written by CPU data `ranks` ZeRO-3, on half as
// many ranks (another layout) with ZeRO-3 and ZeRO-1 (see the header).
void ResumeCuda(int ranks) {
  if (!CudaTrainingBuilt() || !SelectCudaDevice(0)) {
    fmt::print("== resume-cuda: skipped (no CUDA engine or device) ==\n");
    return;
  }
  const GptConfig c = ResumeCudaModel();
  const size_t psi = c.num_parameters();
  const int readers = std::max(1, ranks / 2);
  const ZeroPartition part{psi, readers};
  for (int stage : {3, 1}) {
    std::vector<std::string> before, after;
    {
      const ResumeDir dir("resume-cuda");
      RunResumeRanks("write", ranks, dir.path(), stage);  // the CPU's ZeRO-3, this model
      before = RunResumeRanks("whole", readers, dir.path(), stage);
      after = RunResumeRanks("ranges", readers, dir.path(), stage);
    }
#ifdef COHORT_CUDA_EMULATED
    const char* where = " (CPU emulator: device memory is host memory, counted in the RSS)";
#else
    const char* where = "";
#endif
    fmt::print("== resume of CUDA data {} with ZeRO-{} from CPU data {} ZeRO-3: {:.2f}M "
               "parameters (vocab 8192, d_model 128, 2 layers), a checkpoint of {:.1f} MB; each "
               "rank a process{} ==\n",
               readers, stage, ranks, psi / 1e6, 12.0 * psi / 1e6, where);
    const auto shard = [&](int r) { return 12.0 * part.size(r); };
    // ZeRO-1 (and 2) hold the whole parameters: 4Ψ besides their shard of the moments.
    const auto want = [&](int r) {
      return stage == 3 ? 12.0 * part.size(r) : 4.0 * psi + 8.0 * part.size(r);
    };
    const bool met = PrintResume(readers, before, after, shard, want);
    fmt::print("target (each rank reads what it holds: {}): {}\n",
               stage == 3 ? "its shard" : "the parameters and its shard of the moments",
               met ? "met" : "MISSED");
  }
}

// One GPU: the device optimizer against the offloaded ones (see the header).
void Offload(int steps) {
  if (!CudaTrainingBuilt()) {
    fmt::print("== offload: skipped (this build has no CUDA engine) ==\n");
    return;
  }
  auto gpu = SelectCudaDevice(0);
  if (!gpu) {
    fmt::print("== offload: skipped ({}) ==\n", gpu.error().message);
    return;
  }
#ifdef COHORT_CUDA_EMULATED
  // The CPU emulator of the CUDA kernels runs every thread on the host: a tiny model, and
  // the figures say nothing about a GPU's speed (correctness only).
  const GptConfig c = Model(2, 64, 4, 512, 32);
  const int B = 2, T = 32;
  const char* what = "tiny model on the CPU emulator (correctness only: no speed claim)";
#else
  const GptConfig c = Model(12, 768, 12, 50257, 1024);
  const int B = 4, T = 1024;
  const char* what = "GPT-2 small";
#endif
  fmt::print("== offload on {}: {} ({:.2f}M parameters), {} x {} tokens, median of {} steps, {} "
             "OpenMP threads for the host AdamW ==\n",
             gpu->name, what, c.num_parameters() / 1e6, B, T, steps, omp_get_max_threads());
  fmt::print("{:<34} {:>9} {:>9} {:>10} {:>13} {:>13} {:>11}\n", "optimizer", "step ms", "tail ms",
             "vs device", "device MB", "host MB", "last loss");
  struct Case {
    const char* name;
    int stage;
    bool offload, offload_params;
  };
  double device_ms = 0, device_loss = 0;
  for (const Case& k : {Case{"on the device (ZeRO-0)", 0, false, false},
                        Case{"offload: optimizer (stage 1)", 1, true, false},
                        Case{"offload: optimizer (stage 2)", 2, true, false},
                        Case{"offload: optimizer+params (stage 3)", 3, true, true}}) {
    GptModel init = Check(GptModel::Create(c), "model");
    init.InitRandom(7);
    CudaZeroOptions zero;
    zero.stage = k.stage;
    zero.offload = k.offload;
    zero.offload_params = k.offload_params;
    auto model = Check(MakeCudaTrainModel(init, AdamWConfig{}, B, T, nullptr, zero), "model");
    auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> out) -> Result<void> {
      Fill(a, in, out, c.vocab_size);
      return {};
    };
    std::vector<double> times, tails;
    double loss = 0;
    for (int s = 0; s <= steps; ++s) {
      const auto t0 = Clock::now();
      loss = Check(model->TrainMicrobatches(2, B, T, load, nullptr), "step");
      const auto t1 = Clock::now();
      Check(model->ClipAndStep(1.0, 1e-4f), "optimizer");  // returns when the step is done
      if (s > 0) {
        times.push_back(Seconds(t0));
        tails.push_back(Seconds(t1));
      }
    }
    const TrainModel::ModelStateBytes b = model->model_state_bytes();
    // Offloaded: the moments (and stages 1, 2's master shard) and the pinned gradient shard
    // are host memory; stage 3 with optimizer+params holds its float32 master and bf16
    // shards there too (and stage 3's pinned bf16 staging is counted as the device's here:
    // it is not used with optimizer+params).
    const size_t shard = c.num_parameters();  // one rank: the shard is the model
    double host = 0;
    if (k.offload) host = static_cast<double>(b.optimizer) + 4.0 * shard;
    if (k.offload_params) host += static_cast<double>(b.params);
    const double device = static_cast<double>(b.params + b.grads + b.optimizer + b.scratch) - host;
    const double ms = Median(times) * 1000;
    if (k.stage == 0) {
      device_ms = ms;
      device_loss = loss;
    }
    fmt::print("{:<34} {:>9.1f} {:>9.1f} {:>9.2f}x {:>13.2f} {:>13.2f} {:>11.6f}{}\n", k.name, ms,
               Median(tails) * 1000, ms / device_ms, device / 1e6, host / 1e6, loss,
               std::abs(loss - device_loss) <= 1e-4 * std::abs(device_loss)
                   ? ""
                   : "  (differs from the device optimizer's by more than 1e-4)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 7 && std::string(argv[1]) == "--resume-child") {
    return ResumeChild(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), argv[5],
                       std::atoi(argv[6]));
  }
  std::string section = "all";
  int ranks = 4, steps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--section") section = argv[i + 1];
    else if (flag == "--ranks") ranks = std::atoi(argv[i + 1]);
    else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_zero [--section memory|memory-cuda|step|prefetch|checkpoint|resume|resume-cuda|offload|all] [--ranks N] [--steps S]\n");
      return 2;
    }
  }
  if (ranks < 1 || steps < 1) {
    std::fprintf(stderr, "--ranks and --steps must be >= 1\n");
    return 2;
  }
  fmt::print("bench_zero: {} ranks as threads, {} cores online\n", ranks, sysconf(_SC_NPROCESSORS_ONLN));
  if (section == "memory" || section == "all") Memory(ranks);
  if (section == "memory-cuda") MemoryCuda(ranks);
  if (section == "step" || section == "all") Step(ranks, steps);
  if (section == "prefetch" || section == "all") Prefetch(ranks, steps);
  if (section == "checkpoint" || section == "all") CheckpointIo(ranks);
  if (section == "resume" || section == "all") Resume(ranks);
  if (section == "resume-cuda") ResumeCuda(ranks);
  if (section == "offload") Offload(steps);
  return 0;
}
