// Times one full scheduling pass (sched::Schedule) with issue 18's requests on a large,
// deterministic snapshot: 1,000 nodes x 8 GPUs (h100 on 9 nodes in 10, a100 on the rest),
// NVLink islands of 4 GPUs, 20 switches of 50 nodes; about 30% of the GPUs busy whole and
// 10% shared by running fractions. 10,000 pending jobs: 30% sharing (0.25/0.5 of a GPU,
// half of them with gpu_memory), 20% typed (h100:1..8 or a100:1..4), 10% multi-node gangs
// of 2-8 nodes x 8 GPUs placed over the fewest switches (a fifth with topology required),
// 5% plain 4-GPU tasks with topology required, and the rest plain 1/2/4/8-GPU jobs. Prints
// the median, p90 and min of the passes beside the target (median <= 50 ms), and the
// plain-only pass on the same cluster as a baseline. A third pass runs the same jobs with
// fair share and quotas (issue 17): 50 teams whose quotas split 80% of the GPUs by weight,
// with borrow limits of none, half the quota or unlimited; quotas count the sharing jobs'
// parts of GPUs (sched/gpu_units.h). A figure to compare, not a test.
//
// Usage: bench_sched_gpu_pass [passes=20]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace {

using namespace cohort::sched;  // NOLINT: a benchmark's one namespace

constexpr int kNodes = 1000;
constexpr int kGpus = 8;
constexpr int kPending = 10000;
constexpr int64_t kNow = 1'800'000'000'000;
constexpr int64_t kMiB80 = 80 * 1024;

Snapshot MakeSnapshot(bool detailed) {
  std::mt19937_64 rng(42);
  Snapshot snap;
  snap.now_ms = kNow;
  for (int n = 0; n < kNodes; ++n) {
    NodeView v;
    v.id = fmt::format("node-{:04d}", n);
    v.total_cpus = 128;
    v.free_cpus = 128;
    v.total_gpus = kGpus;
    if (detailed) v.network_switch = fmt::format("sw-{:02d}", n / 50);
    for (int g = 0; g < kGpus; ++g) {
      GpuView d;
      d.index = g;
      d.type = n % 10 == 9 ? "a100" : "h100";
      d.memory_mib = kMiB80;
      d.free_memory_mib = kMiB80;
      d.nvlink_island = g / 4;
      const uint64_t r = rng() % 100;
      if (r < 30) {
        d.free_share = 0;  // busy whole
        d.free_memory_mib = 0;
        v.free_cpus -= 8;
      } else if (r < 40 && detailed) {
        d.free_share = 2;  // half shared
        d.free_memory_mib = kMiB80 / 2;
      }
      if (d.free_share == kGpuShareUnits) v.free_gpus.push_back(g);
      v.gpus.push_back(d);
    }
    if (!detailed) v.gpus.clear();
    snap.nodes.push_back(std::move(v));
  }
  for (int i = 0; i < kPending; ++i) {
    JobRequest j;
    j.id = i + 1;
    j.submit_ms = kNow - (kPending - i) * 1000;
    j.priority = static_cast<int>(rng() % 3);
    j.cpus_per_task = 4;
    const uint64_t kind = detailed ? rng() % 100 : 99;
    static constexpr int kPlain[] = {1, 2, 4, 8};
    if (kind < 30) {
      j.gpu_share = rng() % 2 ? 1 : 2;
      if (rng() % 2) j.gpu_memory_mib = (5 + static_cast<int64_t>(rng() % 15)) * 1024;
    } else if (kind < 50) {
      const bool a100 = rng() % 5 == 0;
      j.gpu_type = a100 ? "a100" : "h100";
      j.gpus_per_node = a100 ? 1 + static_cast<int>(rng() % 4) : 1 + static_cast<int>(rng() % 8);
    } else if (kind < 60) {
      j.nodes = 2 + static_cast<int>(rng() % 7);
      j.gpus_per_node = kGpus;
      j.topology_required = rng() % 5 == 0;
    } else if (kind < 65) {
      j.gpus_per_node = 4;
      j.topology_required = true;
    } else {
      j.gpus_per_node = kPlain[rng() % 4];
    }
    snap.pending.push_back(std::move(j));
  }
  return snap;
}

// `snap` with fair share and quotas: 50 teams of weights 1-4 and decayed usage, a few of
// which submit most of the jobs (they borrow, and hit their limits).
Snapshot WithShares(Snapshot snap) {
  std::mt19937_64 rng(7);
  constexpr int kTeams = 50;
  SharePolicy p;
  std::vector<int64_t> weights;
  int64_t total = 0;
  for (int t = 0; t < kTeams; ++t) {
    weights.push_back(1 + static_cast<int64_t>(rng() % 4));
    total += weights.back();
  }
  const int64_t quota_gpus = int64_t{kNodes} * kGpus * 8 / 10;
  for (int t = 0; t < kTeams; ++t) {
    TeamView v;
    v.name = fmt::format("team-{:02d}", t);
    v.weight = weights[static_cast<size_t>(t)];
    v.quota_gpus = quota_gpus * v.weight / total;
    const int kind = static_cast<int>(rng() % 3);
    v.borrow_limit_gpus = kind == 0 ? 0 : kind == 1 ? v.quota_gpus / 2 : -1;
    v.usage_gpu_s = static_cast<double>(rng() % (200 * 24 * 3600));
    p.teams.push_back(std::move(v));
  }
  for (JobRequest& j : snap.pending) {
    const int t = rng() % 3 == 0 ? static_cast<int>(rng() % 5) : static_cast<int>(rng() % kTeams);
    j.team = fmt::format("team-{:02d}", t);
  }
  snap.shares = std::move(p);
  return snap;
}

struct Timing {
  double median = 0, p90 = 0, min = 0;
  size_t started = 0;
};

Timing Time(const Snapshot& snap, int passes) {
  std::vector<double> ms;
  Decision d;
  for (int i = 0; i < passes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    d = Schedule(snap);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 9 / 10)], ms.front(), d.start.size()};
}

}  // namespace

int main(int argc, char** argv) {
  const int passes = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const Snapshot plain = MakeSnapshot(false);
  const Snapshot detailed = MakeSnapshot(true);
  const Timing base = Time(plain, passes);
  const Timing t = Time(detailed, passes);
  const Timing shared = Time(WithShares(detailed), passes);
  fmt::print("scheduling pass, {} nodes x {} GPUs, {} pending, {} passes\n", kNodes, kGpus, kPending, passes);
  fmt::print("{:<44} {:>9} {:>9} {:>9} {:>8} {:>10}\n", "pass", "median ms", "p90 ms", "min ms", "started", "target");
  fmt::print("{:<44} {:>9.1f} {:>9.1f} {:>9.1f} {:>8} {:>10}\n", "plain whole-GPU jobs (baseline)", base.median,
             base.p90, base.min, base.started, "-");
  fmt::print("{:<44} {:>9.1f} {:>9.1f} {:>9.1f} {:>8} {:>10}\n", "fractions, types, islands, switches", t.median,
             t.p90, t.min, t.started, "<= 50");
  fmt::print("{:<44} {:>9.1f} {:>9.1f} {:>9.1f} {:>8} {:>10}\n", "... with fair share + quotas (50 teams)",
             shared.median, shared.p90, shared.min, shared.started, "<= 50");
  return 0;
}
