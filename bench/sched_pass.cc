// Times one full scheduling pass (sched::Schedule) on a large, deterministic snapshot:
// 1,000 nodes with 8 GPUs each (about 30% of the GPUs busy, a few nodes draining or
// down) and 10,000 pending jobs of mixed shapes (1, 2, 4, 8 GPUs; 2x8 and 4x8 multi-node;
// CPU-only). Prints the median and p90 of the passes. A figure to compare, not a test.
//
// Usage: bench_sched_pass [passes=20]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace {

using cohort::sched::JobRequest;
using cohort::sched::kNever;
using cohort::sched::NodeView;
using cohort::sched::Placement;
using cohort::sched::RunningJob;
using cohort::sched::Snapshot;
using cohort::sched::Usage;

constexpr int kNodes = 1000;
constexpr int kGpusPerNode = 8;
constexpr int kCpusPerNode = 128;
constexpr int kCpusPerGpu = 8;
constexpr int kPending = 10000;
constexpr double kBusyFraction = 0.3;
constexpr int64_t kNow = 1'800'000'000'000;
constexpr int64_t kHour = 3'600'000;

Snapshot MakeSnapshot() {
  std::mt19937_64 rng(20240611);
  Snapshot snap;
  snap.now_ms = kNow;
  std::bernoulli_distribution busy(kBusyFraction);
  std::uniform_int_distribution<int64_t> end_in(1, 48 * kHour);
  int64_t running_id = 1;
  for (int n = 0; n < kNodes; ++n) {
    NodeView node;
    node.id = fmt::format("node-{:04d}", n);
    node.total_gpus = kGpusPerNode;
    node.total_cpus = kCpusPerNode;
    int used = 0;
    for (int g = 0; g < kGpusPerNode; ++g) {
      if (busy(rng)) {
        ++used;
      } else {
        node.free_gpus.push_back(g);
      }
    }
    node.free_cpus = kCpusPerNode - used * kCpusPerGpu;
    if (n % 100 == 7) node.unavailable = "draining";
    if (n % 200 == 13) node.unavailable = "down";
    if (used > 0) {
      // One running job per busy node; one in five has no time limit.
      RunningJob job;
      job.id = running_id++;
      job.end_ms = rng() % 5 == 0 ? kNever : kNow + end_in(rng);
      job.usage.push_back(Usage{node.id, used, used * kCpusPerGpu});
      snap.running.push_back(std::move(job));
    }
    snap.nodes.push_back(std::move(node));
  }

  struct Shape {
    int nodes, gpus, cpus_per_task, weight;
  };
  const std::vector<Shape> shapes = {
      {1, 1, kCpusPerGpu, 30}, {1, 2, kCpusPerGpu, 20}, {1, 4, kCpusPerGpu, 15},
      {1, 8, kCpusPerGpu, 10}, {2, 8, kCpusPerGpu, 6},  {4, 8, kCpusPerGpu, 4},
      {1, 0, 4, 15},
  };
  std::vector<int> weights;
  for (const Shape& s : shapes) weights.push_back(s.weight);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  const std::vector<int64_t> limits = {0, kHour, 4 * kHour, 24 * kHour};
  for (int j = 0; j < kPending; ++j) {
    const Shape& s = shapes[pick(rng)];
    JobRequest job;
    job.id = 100000 + j;
    job.priority = static_cast<int>(rng() % 4);
    job.submit_ms = kNow - static_cast<int64_t>(rng() % (24 * kHour));
    job.nodes = s.nodes;
    job.gpus_per_node = s.gpus;
    job.tasks_per_node = std::max(s.gpus, 1);
    job.cpus_per_task = s.cpus_per_task;
    job.placement = rng() % 5 == 0 ? Placement::kSpread : Placement::kPack;
    job.time_limit_ms = limits[rng() % limits.size()];
    snap.pending.push_back(job);
  }
  return snap;
}

}  // namespace

int main(int argc, char** argv) {
  const int passes = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const Snapshot snap = MakeSnapshot();
  int free_gpus = 0;
  for (const NodeView& n : snap.nodes) free_gpus += static_cast<int>(n.free_gpus.size());

  std::vector<double> ms;
  cohort::sched::Decision decision;
  for (int i = 0; i < passes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    decision = cohort::sched::Schedule(snap);
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const double p90 = ms[std::min(ms.size() - 1, ms.size() * 9 / 10)];
  size_t backfilled = 0;
  for (const auto& p : decision.start) backfilled += p.backfilled;

  fmt::print(
      "sched pass: nodes={} gpus={} free_gpus={} pending={} started={} (backfilled {}, "
      "reservation {})  median {:.2f} ms  p90 {:.2f} ms  min {:.2f} ms  over {} passes  "
      "(target < 50 ms)\n",
      snap.nodes.size(), snap.nodes.size() * kGpusPerNode, free_gpus, snap.pending.size(),
      decision.start.size(), backfilled, decision.reservation ? "yes" : "no", median, p90,
      ms.front(), ms.size());
  return 0;
}
