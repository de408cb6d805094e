#include "engine/parallel/pipeline_schedule.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace cohort::engine {
namespace {

// The forward (or backward) ops of `stage` in order: micro-batches in groups of p; within a
// group the stage's chunks in model order (forward) or reverse (backward).
std::vector<PipelineOp> PassOrder(const ParallelLayout& layout, int stage, int m, bool forward) {
  const std::vector<int> chunks = layout.ChunksOf(stage);
  const int p = layout.pipeline, v = static_cast<int>(chunks.size());
  std::vector<PipelineOp> ops;
  for (int g0 = 0; g0 < m; g0 += p) {
    const int size = std::min(p, m - g0);
    for (int i = 0; i < v; ++i) {
      const int chunk = chunks[forward ? i : v - 1 - i];
      for (int j = 0; j < size; ++j) ops.push_back({forward, chunk, g0 + j});
    }
  }
  return ops;
}

// One stage's ops with `warmup` forwards before the one-forward-one-backward phase.
std::vector<PipelineOp> OpsWithWarmup(const ParallelLayout& layout, int stage, int m, int warmup) {
  std::vector<PipelineOp> fwd = PassOrder(layout, stage, m, true);
  std::vector<PipelineOp> bwd = PassOrder(layout, stage, m, false);
  warmup = std::min<int>(warmup, static_cast<int>(fwd.size()));
  std::vector<PipelineOp> ops;
  ops.reserve(2 * fwd.size());
  size_t f = 0, b = 0;
  for (; f < static_cast<size_t>(warmup); ++f) ops.push_back(fwd[f]);
  while (f < fwd.size()) {
    ops.push_back(fwd[f++]);
    ops.push_back(bwd[b++]);
  }
  while (b < bwd.size()) ops.push_back(bwd[b++]);
  return ops;
}

// Runs every stage's ops against each other; `stuck` receives, on a deadlock, the index of
// the op each stage waits at (ops.size() for a finished stage).
struct Run {
  ScheduleSimulation sim;
  bool deadlock = false;
  std::vector<size_t> at;
};

Run Simulate(const ParallelLayout& layout, const std::vector<std::vector<PipelineOp>>& ops,
             double forward, double backward) {
  const int p = layout.pipeline, last = layout.num_chunks() - 1;
  const double v = layout.virtual_stages;
  std::map<std::tuple<bool, int, int>, double> done;  // finish time of each op done
  Run run;
  run.at.assign(p, 0);
  std::vector<double> clock(p, 0.0);
  ScheduleSimulation& sim = run.sim;
  sim.busy.assign(p, 0.0);
  sim.peak_in_flight.assign(p, 0);
  std::vector<int> in_flight(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (run.at[s] < ops[s].size()) {
        const PipelineOp& op = ops[s][run.at[s]];
        double ready = clock[s];
        // A forward needs the previous chunk's output; a backward the next chunk's gradient
        // (and its own forward, which precedes it on this stage).
        const bool has_input = op.forward ? op.chunk > 0 : op.chunk < last;
        if (has_input) {
          const auto dep = done.find({op.forward, op.forward ? op.chunk - 1 : op.chunk + 1,
                                      op.microbatch});
          if (dep == done.end()) break;
          ready = std::max(ready, dep->second);
        }
        if (!op.forward && !done.contains({true, op.chunk, op.microbatch})) break;
        const double cost = (op.forward ? forward : backward) / v;
        clock[s] = ready + cost;
        sim.busy[s] += cost;
        done[{op.forward, op.chunk, op.microbatch}] = clock[s];
        in_flight[s] += op.forward ? 1 : -1;
        sim.peak_in_flight[s] = std::max(sim.peak_in_flight[s], in_flight[s]);
        ++run.at[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) run.deadlock |= run.at[s] < ops[s].size();
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  double busy = 0;
  for (double b : sim.busy) busy += b;
  sim.bubble = sim.makespan > 0 ? 1.0 - busy / (p * sim.makespan) : 0.0;
  return run;
}

// Warm-up forwards per stage. GPipe: all; 1F1B: p − s − 1; interleaved: Megatron's
// 2·(p − s − 1) + (v − 1)·g. With a last group of fewer than p micro-batches the interleaved
// count can leave a stage waiting for a gradient that needs one of its own later forwards;
// then every stage stuck at a backward gets one more warm-up forward until the schedule
// completes (all forwards first, GPipe, always does).
std::vector<int> Warmups(const ParallelLayout& layout, int m) {
  const int p = layout.pipeline, total = m * layout.virtual_stages;
  std::vector<int> warmup(p, total);
  for (int s = 0; s < p; ++s) {
    if (layout.schedule == PipelineScheduleKind::kOneFOneB) {
      warmup[s] = std::min(p - s - 1, total);
    } else if (layout.schedule == PipelineScheduleKind::kInterleaved) {
      warmup[s] = std::min(2 * (p - s - 1) + (layout.virtual_stages - 1) * std::min(p, m), total);
    }
  }
  if (layout.schedule != PipelineScheduleKind::kInterleaved || m % p == 0) return warmup;
  for (;;) {
    std::vector<std::vector<PipelineOp>> ops(p);
    for (int s = 0; s < p; ++s) ops[s] = OpsWithWarmup(layout, s, m, warmup[s]);
    const Run run = Simulate(layout, ops, 1.0, 2.0);
    if (!run.deadlock) return warmup;
    bool grew = false;
    for (int s = 0; s < p; ++s) {
      if (run.at[s] < ops[s].size() && !ops[s][run.at[s]].forward && warmup[s] < total) {
        ++warmup[s];
        grew = true;
      }
    }
    if (!grew) return std::vector<int>(p, total);
  }
}

}  // namespace

std::string OpName(const PipelineOp& op) {
  return fmt::format("{}{}.{}", op.forward ? 'F' : 'B', op.chunk, op.microbatch);
}

std::vector<PipelineOp> BuildSchedule(const ParallelLayout& layout, int stage, int m,
                                      bool forward_only) {
  if (forward_only) return PassOrder(layout, stage, m, true);
  return OpsWithWarmup(layout, stage, m, Warmups(layout, m)[stage]);
}

Result<ScheduleSimulation> SimulateSchedule(const ParallelLayout& layout, int m, double forward,
                                            double backward) {
  const int p = layout.pipeline;
  std::vector<std::vector<PipelineOp>> ops(p);
  const std::vector<int> warmup = Warmups(layout, m);
  for (int s = 0; s < p; ++s) ops[s] = OpsWithWarmup(layout, s, m, warmup[s]);
  Run run = Simulate(layout, ops, forward, backward);
  if (run.deadlock) {
    std::string waits;
    for (int t = 0; t < p; ++t) {
      if (run.at[t] < ops[t].size()) {
        waits += fmt::format("{}stage {} waits at {}", waits.empty() ? "" : ", ", t,
                             OpName(ops[t][run.at[t]]));
      }
    }
    return Errorf(ErrorCode::kInternal,
                  "pipeline schedule {} deadlocks (pipeline {}, {} chunks per stage, {} "
                  "micro-batches): {}",
                  ScheduleName(layout.schedule), p, layout.virtual_stages, m, waits);
  }
  return std::move(run.sim);
}

}  // namespace cohort::engine
