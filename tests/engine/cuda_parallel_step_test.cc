// How a CUDA tensor/pipeline layout moves a step's data (issue 14; ParallelStepOptions,
// trainer/train_model.h), on MakeParallelCudaTrainModel directly, every rank a thread:
//   - pipeline messages sent device to device (the links split from the world that reaches
//     device memory: nccl send/recv on GPUs) give the bits of the host path (device -> host,
//     gloo, host -> device): every loss, gradient norm and parameter of pipeline 2 under 1F1B
//     and interleaved 1F1B, and of tensor 2 x pipeline 2 (the message is the same float32
//     bytes either way);
//   - the data-parallel reduction overlapped with the backward (each bucket averaged on the
//     reducer's thread once the last micro-batch's backward has written it, the device's
//     events waited for first) gives the bits of the reduction after the step, in tensor 2 x
//     data 2 and pipeline 2 x data 2, and issues buckets before the backward ends.
// Built twice: against the CPU emulator (cuda_emu.cmake, label engine: device memory is host
// memory, so one gloo communicator is both worlds) and against the real CUDA engine (label
// gpu: the world over nccl, the host values over a second, gloo, communicator; one GPU per
// rank, skipping with fewer). The model is tiny (d_model 64, 4 heads, context 16) so that the
// emulator takes seconds.
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "comm_test_util.h"
#include "engine/model/gpt.h"
#include "engine/parallel/layout.h"
#include "engine/trainer/train_model.h"
#include "parallel_step_util.h"

namespace cohort::engine {
namespace {

#ifdef COHORT_CUDA_EMULATED
constexpr const char* kBackend = "gloo";  // emulated device memory is host memory
constexpr Millis kTimeout{900'000};       // emulated kernels: a peer can be minutes behind
#else
constexpr const char* kBackend = "nccl";
constexpr Millis kTimeout{60'000};
#endif

constexpr int kB = 2, kT = 16, kMicro = 2, kSteps = 2;

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
// the same ranks over gloo (the same communicator where kBackend is gloo).
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
      if (std::string(kBackend) != "gloo") {
        comm::CommOptions h = comm::commtest::LocalOptions("gloo", r, ranks, store, kTimeout);
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

}  // namespace
}  // namespace cohort::engine
