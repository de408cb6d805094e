// bench_parallel_train: tensor and pipeline parallelism on CPU ranks (one thread per rank,
// gloo over loopback, or shm with COHORT_BENCH_COMM=shm, in one process), printed beside
// their targets.
//
//   bench_parallel_train [--section bubble|memory|throughput|layouts|all] [--steps S]
//                        [--stages P] [--baseline-threads N] [--bucket-mb MB] [--rounds R]
//
// bubble      P (default 4) ranks as pipeline P: GPipe, 1F1B and interleaved (2 chunks per stage), the
//             bubble measured from each stage's compute timeline (1 − time in forward and
//             backward / the step's span, averaged over the stages; median over S steps)
//             beside (p − 1) / (v·m + p − 1). Target: within 3 points.
// memory      parameters, gradients and AdamW moments per rank at tensor 4 against one rank
//             (GPT-2 small's shape; target 1/4 within 10%, the replicated LayerNorms, biases
//             and wpe aside), and the activations stashed at once per rank, 1F1B against
//             GPipe on pipeline 4 (target: 1F1B holds at most p micro-batches).
// throughput  tokens/s of a d_model 768, 12-layer model (GPT-2 vocabulary) on 4 ranks as data
//             4, tensor 4, pipeline 4 and tensor 2 x pipeline 2, beside one rank using all the
//             machine's cores, in one run (median step over S steps after one warm-up).
// layouts     step time, measured bubble and tokens/s of a small model (d_model 256, 6 layers,
//             byte vocabulary, 8 micro-batches of 2 x 128 tokens per step) per layout and
//             schedule, beside the analytic bubble (p − 1) / (v·m + p − 1) and beside data
//             parallelism on as many ranks: data 2, tensor 2, pipeline 2 (GPipe, 1F1B,
//             interleaved) on 2 ranks; data 4, tensor 2 x data 2 and pipeline 2 x data 2 on 4
//             ranks, each with the data-parallel reduction overlapped with the backward and
//             after it (parallel.overlap_grad_reduce; R rounds, default 3, alternating the two so
//             that both see the same load), and how many buckets went out during the backward.
//             Buckets of --bucket-mb (default 1) for DDP and the layouts alike.
//
// Each rank runs one OpenMP thread; the one-rank baseline runs as many as the machine has
// cores (or --baseline-threads). On a machine with fewer cores than ranks the ranks share the cores, which the
// figures then include (the log says so).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/communicator.h"
#include "comm/store.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/ddp.h"
#include "engine/parallel/layout.h"
#include "engine/trainer/train_model.h"
#include "engine_bench_util.h"

namespace {

using namespace cohort;
using namespace cohort::engine;
using Clock = std::chrono::steady_clock;
using namespace cohort::engine::bench;

struct RunFigures {
  std::vector<double> step_s;                    // rank 0
  std::vector<double> bubble;                    // per step
  std::vector<TrainModel::ParallelStats> stats;  // per rank, last step
};

// `steps` training steps of `m` micro-batches of B x T per replica in `layout` on its world
// (a data-parallel layout's DdpReducer and a split model's reduction in buckets of
// step.bucket_bytes).
RunFigures RunLayout(const GptConfig& cfg, const ParallelConfig& pc, int world, int m, int B,
                     int T, int steps, const ParallelStepOptions& step = {}) {
  RunFigures out;
  out.stats.resize(world);
  std::mutex mu;
  RunRanks(world, [&](comm::Communicator& comm) {
    auto layout = Check(MakeParallelLayout(pc, cfg, world), "layout");
    std::unique_ptr<TrainModel> model;
    std::unique_ptr<DdpReducer> reducer;
    if (layout.model_parallel()) {
      model = Check(MakeParallelCpuTrainModel(cfg, InitialParams{1, nullptr}, AdamWConfig{},
                                              layout, comm, nullptr, 0, false, step),
                    "parallel model");
    } else {
      GptModel init = Check(GptModel::Create(cfg), "model");
      init.InitRandom(1);
      model = Check(MakeCpuTrainModel(std::move(init), AdamWConfig{}), "model");
      reducer = std::make_unique<DdpReducer>(comm, model->grads(), step.bucket_bytes);
    }
    const int replica = layout.CoordsOf(comm.rank()).data;
    for (int step = 0; step < steps; ++step) {
      Check(comm.Barrier(), "barrier");
      const auto t0 = Clock::now();
      auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> tg) -> Result<void> {
        Fill(step * 1000 + replica * m + a, in, tg, cfg.vocab_size);
        return {};
      };
      Check(model->TrainMicrobatches(m, B, T, load, reducer.get()), "step");
      Check(model->ClipAndStep(1.0, 1e-4f), "optimizer");
      Check(comm.Barrier(), "barrier");
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (comm.rank() == 0) {
        std::lock_guard lock(mu);
        out.step_s.push_back(s);
        if (auto ps = model->parallel_stats()) out.bubble.push_back(ps->bubble);
      }
    }
    if (auto ps = model->parallel_stats()) {
      std::lock_guard lock(mu);
      out.stats[comm.rank()] = *ps;
    }
  });
  return out;
}

void Bubble(int steps, int p) {
  // Compute-heavy blocks, a cheap head (byte vocabulary): stages of equal cost.
  const GptConfig cfg = Model(8, 512, 8, 256, 128);
  const int m = 8, B = 2;
  std::printf("\n== pipeline bubble: %d ranks as pipeline %d, d_model %d, %d layers, %d "
              "micro-batches of %d x %d tokens ==\n",
              p, p, cfg.n_embd, cfg.n_layer, m, B, cfg.max_seq_len);
  std::printf("%-12s %10s %10s %10s %8s\n", "schedule", "measured", "theory", "diff", "target");
  for (auto [name, v] : {std::pair{"gpipe", 1}, std::pair{"1f1b", 1}, std::pair{"interleaved", 2}}) {
    ParallelConfig pc;
    pc.pipeline = p;
    pc.schedule = name;
    pc.virtual_stages = v;
    RunFigures f = RunLayout(cfg, pc, p, m, B, cfg.max_seq_len, steps + 1);
    f.bubble.erase(f.bubble.begin());  // the warm-up step
    const double measured = Median(f.bubble) * 100, theory = f.stats[0].theory * 100;
    std::printf("%-12s %9.1f%% %9.1f%% %+9.1f  %s\n", name, measured, theory, measured - theory,
                std::abs(measured - theory) <= 3 ? "within 3 points" : "MISSED (3 points)");
  }
}

void Memory() {
  const GptConfig gpt2 = Model(12, 768, 12, 50257, 1024);
  std::printf("\n== memory per rank: GPT-2 small (124M), tensor 4 vs one rank ==\n");
  const size_t full = gpt2.num_parameters();
  ParallelConfig pc;
  pc.tensor = 4;
  const ParallelLayout layout = Check(MakeParallelLayout(pc, gpt2, 4), "layout");
  size_t worst = 0, replicated = 0;
  for (int r = 0; r < 4; ++r) {
    const GptShardLayout shard = GptShardLayout::Build(ShardSpecFor(layout, gpt2, r));
    worst = std::max(worst, shard.total);
    if (r == 0) {
      for (const ShardTensor& t : shard.tensors) {
        if (t.local.numel == static_cast<size_t>(t.logical_rows * t.logical_cols)) {
          replicated += t.local.numel;  // whole on every tensor rank
        }
      }
    }
  }
  // Parameters, gradients, AdamW m and v: four float32 buffers of the shard's size.
  const double one = 16.0 * full / 1e6, per = 16.0 * worst / 1e6;
  const double ratio = double(worst) / full;
  const double sharded_ratio = double(worst - replicated) / double(full - replicated);
  std::printf("one rank: %.1f MB (params + grads + AdamW m, v); tensor 4: %.1f MB per rank = "
              "%.3f of one rank (target 0.25 +- 10%%: %s)\n",
              one, per, ratio, std::abs(ratio - 0.25) <= 0.025 ? "met" : "missed");
  std::printf("replicated on every tensor rank (LayerNorms, row-parallel biases, wpe): %.2fM "
              "floats; the rest: %.4f of one rank's\n",
              replicated / 1e6, sharded_ratio);

  // Activations stashed at once on each stage, 1F1B against GPipe.
  const GptConfig cfg = Model(8, 256, 4, 256, 64);
  const int m = 8, B = 2;
  std::printf("\n== activations stashed per rank: pipeline 4, %d micro-batches ==\n", m);
  std::printf("%-6s %-8s %14s %14s %12s\n", "stage", "schedule", "peak MB", "one m-b MB",
              "micro-batches");
  for (const char* name : {"gpipe", "1f1b"}) {
    ParallelConfig p4;
    p4.pipeline = 4;
    p4.schedule = name;
    RunFigures f = RunLayout(cfg, p4, 4, m, B, cfg.max_seq_len, 1);
    for (int s = 0; s < 4; ++s) {
      const auto& st = f.stats[s];
      const double held = double(st.peak_activation_bytes) / st.microbatch_activation_bytes;
      std::printf("%-6d %-8s %14.2f %14.2f %12.1f%s\n", s, name, st.peak_activation_bytes / 1e6,
                  st.microbatch_activation_bytes / 1e6, held,
                  std::string(name) == "1f1b" ? (held <= 4.0 + 1e-9 ? "  (<= p = 4: met)" : "  (> p: MISSED)") : "");
    }
  }
}

void Throughput(int steps, int baseline_threads) {
  const GptConfig cfg = Model(12, 768, 12, 50257, 64);
  const int B = 1, T = 64, global = 8;  // 8 sequences of 64 tokens per step
  const int cores = baseline_threads > 0 ? baseline_threads
                                         : static_cast<int>(std::thread::hardware_concurrency());
  std::printf("\n== tokens/s: d_model 768, 12 layers, GPT-2 vocabulary, %d tokens per step "
              "(%d sequences of %d), %d cores ==\n",
              global * T, global, T, cores);
  // One rank with every core.
  double base = 0;
  {
    omp_set_num_threads(cores);
    GptModel init = Check(GptModel::Create(cfg), "model");
    init.InitRandom(1);
    auto model = Check(MakeCpuTrainModel(std::move(init), AdamWConfig{}), "model");
    std::vector<double> times;
    for (int step = 0; step <= steps; ++step) {
      const auto t0 = Clock::now();
      auto load = [&](int a, std::span<int32_t> in, std::span<int32_t> tg) -> Result<void> {
        Fill(step * 1000 + a, in, tg, cfg.vocab_size);
        return {};
      };
      Check(model->TrainMicrobatches(global, B, T, load, nullptr), "step");
      Check(model->ClipAndStep(1.0, 1e-4f), "optimizer");
      if (step > 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    base = global * T / Median(times);
    std::printf("%-34s %10.0f tokens/s (%d threads)\n", "1 rank", base, cores);
  }
  struct Case {
    const char* name;
    int tensor, pipeline;
    const char* schedule;
  };
  for (const Case& c : {Case{"4 ranks: data 4", 1, 1, "1f1b"}, Case{"4 ranks: tensor 4", 4, 1, "1f1b"},
                        Case{"4 ranks: pipeline 4 (1f1b)", 1, 4, "1f1b"},
                        Case{"4 ranks: tensor 2 x pipeline 2", 2, 2, "1f1b"}}) {
    ParallelConfig pc;
    pc.tensor = c.tensor;
    pc.pipeline = c.pipeline;
    pc.schedule = c.schedule;
    const int data = 4 / (c.tensor * c.pipeline);
    RunFigures f = RunLayout(cfg, pc, 4, global / data, B, T, steps + 1);
    f.step_s.erase(f.step_s.begin());
    const double rate = global * T / Median(f.step_s);
    std::printf("%-34s %10.0f tokens/s = %.2fx one rank (1 thread per rank)\n", c.name, rate,
                rate / base);
  }
}

void Layouts(int steps, double bucket_mb, int rounds) {
  // Blocks dominate (byte vocabulary), six of them so that two stages of three and four
  // interleaved chunks all exist.
  const GptConfig cfg = Model(6, 256, 4, 256, 128);
  const int B = 2, T = 128, global = 8;  // 8 micro-batches of 2 x 128 tokens per step
  ParallelStepOptions step;
  step.bucket_bytes = static_cast<size_t>(bucket_mb * (1 << 20));
  std::printf("\n== layouts: d_model %d, %d layers, vocab %d, %d micro-batches of %d x %d tokens "
              "(%d tokens) per step, buckets of %.2g MB; median of %d steps ==\n",
              cfg.n_embd, cfg.n_layer, cfg.vocab_size, global, B, T, global * B * T, bucket_mb,
              steps);
  std::printf("%-34s %9s %9s %9s %11s %9s %10s\n", "layout", "step ms", "bubble", "theory",
              "tokens/s", "vs data", "overlap");
  struct Case {
    const char* name;
    int world, tensor, pipeline;
    const char* schedule;
    int v;
  };
  const Case cases[] = {
      {"2 ranks: data 2", 2, 1, 1, "1f1b", 1},
      {"2 ranks: tensor 2", 2, 2, 1, "1f1b", 1},
      {"2 ranks: pipeline 2 gpipe", 2, 1, 2, "gpipe", 1},
      {"2 ranks: pipeline 2 1f1b", 2, 1, 2, "1f1b", 1},
      {"2 ranks: pipeline 2 interleaved", 2, 1, 2, "interleaved", 2},
      {"4 ranks: data 4", 4, 1, 1, "1f1b", 1},
      {"4 ranks: tensor 2 x data 2", 4, 2, 1, "1f1b", 1},
      {"4 ranks: pipeline 2 x data 2", 4, 1, 2, "1f1b", 1},
  };
  double baseline = 0;  // tokens/s of data parallelism on the same ranks
  for (const Case& c : cases) {
    ParallelConfig pc;
    pc.tensor = c.tensor;
    pc.pipeline = c.pipeline;
    pc.schedule = c.schedule;
    pc.virtual_stages = c.v;
    const int data = c.world / (c.tensor * c.pipeline);
    const bool data_only = c.tensor == 1 && c.pipeline == 1;
    // With data parallelism inside a split layout: the reduction after the step, then
    // overlapped, alternating for `rounds` rounds so that both see the same load.
    const bool pair = !data_only && data > 1;
    std::vector<bool> variants = pair ? std::vector<bool>{false, true} : std::vector<bool>{true};
    std::vector<std::vector<double>> times(variants.size()), bubbles(variants.size());
    std::vector<RunFigures> last(variants.size());
    for (int round = 0; round < (pair ? rounds : 1); ++round) {
      for (size_t i = 0; i < variants.size(); ++i) {
        ParallelStepOptions opts = step;
        opts.overlap_grad_reduce = variants[i];
        RunFigures f = RunLayout(cfg, pc, c.world, global / data, B, T, steps + 1, opts);
        times[i].insert(times[i].end(), f.step_s.begin() + 1, f.step_s.end());  // no warm-up
        if (f.bubble.size() > 1) bubbles[i].insert(bubbles[i].end(), f.bubble.begin() + 1, f.bubble.end());
        last[i] = std::move(f);
      }
    }
    for (size_t i = 0; i < variants.size(); ++i) {
      const double step_s = Median(times[i]), rate = global * B * T / step_s;
      if (data_only) baseline = rate;
      std::string bubble = "-", theory = "-", overlap = "-";
      if (c.pipeline > 1) {
        bubble = fmt::format("{:.1f}%", Median(bubbles[i]) * 100);
        theory = fmt::format("{:.1f}%", last[i].stats[0].theory * 100);
      }
      if (pair) {
        size_t early = 0, all = 0;
        for (const auto& st : last[i].stats) {
          early += st.reduce_buckets_overlapped;
          all += st.reduce_buckets;
        }
        overlap = variants[i] ? fmt::format("{}/{} b", early, all) : "after";
      }
      std::printf("%-34s %9.1f %9s %9s %11.0f %8.2fx %10s\n", c.name, step_s * 1e3,
                  bubble.c_str(), theory.c_str(), rate, data_only ? 1.0 : rate / baseline,
                  overlap.c_str());
    }
  }
  std::printf("(overlap: buckets the ranks issued while their backward still ran / all their "
              "buckets, or \"after\": reduced after the step (%d alternating rounds of %d "
              "steps each); data parallelism alone always overlaps, DdpReducer)\n",
              rounds, steps);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // figures appear as they are measured
  std::string section = "all";
  int steps = 3, stages = 4, baseline_threads = 0;
  double bucket_mb = 1;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--section" && i + 1 < argc) {
      section = argv[++i];
    } else if (a == "--baseline-threads" && i + 1 < argc) {
      baseline_threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--stages" && i + 1 < argc) {
      stages = std::clamp(std::atoi(argv[++i]), 2, 8);
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--bucket-mb" && i + 1 < argc) {
      bucket_mb = std::clamp(std::atof(argv[++i]), 0.001, 4096.0);
    } else {
      std::fprintf(stderr,
                   "usage: bench_parallel_train [--section bubble|memory|throughput|layouts|all] "
                   "[--steps S] [--stages P] [--baseline-threads N] [--bucket-mb MB] [--rounds R]\n");
      return 2;
    }
  }
  std::printf("bench_parallel_train: %u cores; each rank is a thread with one OpenMP thread\n",
              std::thread::hardware_concurrency());
  if (section == "bubble" || section == "all") Bubble(steps, stages);
  if (section == "memory" || section == "all") Memory();
  if (section == "throughput" || section == "all") Throughput(steps, baseline_threads);
  if (section == "layouts" || section == "all") Layouts(steps, bucket_mb, rounds);
  return 0;
}
