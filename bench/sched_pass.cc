// Times one full scheduling pass (sched::Schedule) on a large, deterministic snapshot:
// 1,000 nodes with 8 GPUs each (about 30% of the GPUs busy, a few nodes draining or
// down) and 10,000 pending jobs of mixed shapes (1, 2, 4, 8 GPUs; 2x8 and 4x8 multi-node;
// CPU-only). Prints the median and p90 of the passes. A figure to compare, not a test.
//
// With fair share and quotas (issue 17) the same snapshot also gets 50 teams (weights 1-4,
// nominal quotas splitting 80% of the GPUs by weight, borrow limits of none, half the quota
// or unlimited, decayed usage), each running and pending job a team, a priority and a
// start; some teams borrow, so blocked jobs of teams within their quota plan preemptions.
// Both passes, without and with shares, are timed in the same run. Then a sustained run:
// passes over a cluster kept busy (each pass a fraction of the running jobs end, new jobs
// arrive to keep 10,000 pending, the pass's starts and preemptions are applied), counting
// the decisions (jobs started plus victims chosen) per second of scheduler time, first
// without shares (the baseline under the same churn), then with them.
//
// Usage: bench_sched_pass [passes=20] [sustained_passes=200]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "sched/scheduler.h"

namespace {

using cohort::sched::JobRequest;
using cohort::sched::kNever;
using cohort::sched::NodeView;
using cohort::sched::Placement;
using cohort::sched::RunningJob;
using cohort::sched::SharePolicy;
using cohort::sched::Snapshot;
using cohort::sched::TeamView;
using cohort::sched::Usage;

constexpr int kNodes = 1000;
constexpr int kGpusPerNode = 8;
constexpr int kCpusPerNode = 128;
constexpr int kCpusPerGpu = 8;
constexpr int kPending = 10000;
constexpr double kBusyFraction = 0.3;
constexpr int64_t kNow = 1'800'000'000'000;
constexpr int64_t kHour = 3'600'000;
constexpr int kTeams = 50;

std::string TeamName(int t) { return fmt::format("team-{:02d}", t); }

// 50 teams: weights 1-4; nominal quotas that split 80% of the cluster's GPUs by weight;
// borrow limits of none (0), half the quota or unlimited; decayed usage of up to a day of
// 200 GPUs.
SharePolicy MakeTeams(std::mt19937_64& rng) {
  SharePolicy p;
  std::vector<int64_t> weights;
  int64_t total = 0;
  for (int t = 0; t < kTeams; ++t) {
    weights.push_back(1 + static_cast<int64_t>(rng() % 4));
    total += weights.back();
  }
  const int64_t quota_gpus = kNodes * kGpusPerNode * 8 / 10;
  for (int t = 0; t < kTeams; ++t) {
    TeamView v;
    v.name = TeamName(t);
    v.weight = weights[static_cast<size_t>(t)];
    v.quota_gpus = quota_gpus * v.weight / total;
    const int kind = static_cast<int>(rng() % 3);
    v.borrow_limit_gpus = kind == 0 ? 0 : kind == 1 ? v.quota_gpus / 2 : -1;
    v.usage_gpu_s = static_cast<double>(rng() % (200 * 24 * 3600));
    p.teams.push_back(std::move(v));
  }
  p.preemption.min_runtime_ms = 10 * 60'000;
  return p;
}

// A team for a job: a few teams submit most of the work (so they borrow and others reclaim).
std::string PickTeam(std::mt19937_64& rng) {
  const int t = rng() % 3 == 0 ? static_cast<int>(rng() % 5) : static_cast<int>(rng() % kTeams);
  return TeamName(t);
}

JobRequest MakeJob(std::mt19937_64& rng, int64_t id, int64_t now, bool shares);

// The snapshot; with `shares`, the same cluster and queue with teams (the random draws for
// the cluster and the queue are the same either way).
Snapshot MakeSnapshot(bool shares) {
  std::mt19937_64 rng(20240611);
  std::mt19937_64 team_rng(20261127);
  Snapshot snap;
  snap.now_ms = kNow;
  if (shares) snap.shares = MakeTeams(team_rng);
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
      if (shares) {
        job.team = PickTeam(team_rng);
        job.priority = static_cast<int>(team_rng() % 4);
        job.start_ms = kNow - static_cast<int64_t>(team_rng() % (2 * kHour));
        job.checkpoint_ms = job.start_ms + static_cast<int64_t>(team_rng() % static_cast<uint64_t>(kNow - job.start_ms + 1));
      }
      snap.running.push_back(std::move(job));
    }
    snap.nodes.push_back(std::move(node));
  }

  for (int j = 0; j < kPending; ++j) {
    JobRequest job = MakeJob(rng, 100000 + j, kNow, false);
    if (shares) {
      job.team = PickTeam(team_rng);
    }
    snap.pending.push_back(std::move(job));
  }
  return snap;
}

JobRequest MakeJob(std::mt19937_64& rng, int64_t id, int64_t now, bool shares) {
  struct Shape {
    int nodes, gpus, cpus_per_task, weight;
  };
  static const std::vector<Shape> shapes = {
      {1, 1, kCpusPerGpu, 30}, {1, 2, kCpusPerGpu, 20}, {1, 4, kCpusPerGpu, 15},
      {1, 8, kCpusPerGpu, 10}, {2, 8, kCpusPerGpu, 6},  {4, 8, kCpusPerGpu, 4},
      {1, 0, 4, 15},
  };
  static const std::vector<int64_t> limits = {0, kHour, 4 * kHour, 24 * kHour};
  std::vector<int> weights;
  for (const Shape& s : shapes) weights.push_back(s.weight);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  const Shape& s = shapes[static_cast<size_t>(pick(rng))];
  JobRequest job;
  job.id = id;
  job.priority = static_cast<int>(rng() % 4);
  job.submit_ms = now - static_cast<int64_t>(rng() % (24 * kHour));
  job.nodes = s.nodes;
  job.gpus_per_node = s.gpus;
  job.tasks_per_node = std::max(s.gpus, 1);
  job.cpus_per_task = s.cpus_per_task;
  job.placement = rng() % 5 == 0 ? Placement::kSpread : Placement::kPack;
  job.time_limit_ms = limits[rng() % limits.size()];
  if (shares) job.team = PickTeam(rng);
  return job;
}

struct Timing {
  double median = 0, p90 = 0, min = 0;
};

Timing Time(const Snapshot& snap, int passes, cohort::sched::Decision* decision) {
  std::vector<double> ms;
  for (int i = 0; i < passes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    *decision = cohort::sched::Schedule(snap);
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 9 / 10)], ms.front()};
}

// The sustained run: `passes` passes a simulated 10 s apart over the shares snapshot. Before
// each pass, running jobs whose end has come (or a random 2% of them, for jobs without a
// limit) end and give their GPUs back, victims asked in the previous pass stop and go back
// to the queue, and new jobs keep the queue at 10,000; after it, the starts take their
// GPUs. Prints decisions (starts + victims) per second of Schedule time.
void Sustained(Snapshot snap, int passes) {
  std::mt19937_64 rng(7);
  std::unordered_map<std::string, size_t> node_index;
  for (size_t i = 0; i < snap.nodes.size(); ++i) node_index.emplace(snap.nodes[i].id, i);
  int64_t next_id = 10'000'000;
  std::map<int64_t, JobRequest> requests;  // running job id -> its request (to requeue a victim)
  const auto give_back = [&](const RunningJob& r) {
    for (const Usage& u : r.usage) {
      cohort::sched::NodeView& n = snap.nodes[node_index.at(u.node)];
      n.free_cpus += u.cpus;
      // The GPUs it held: the lowest busy indices (which ones does not matter here).
      int left = u.gpus;
      for (int g = 0; g < n.total_gpus && left > 0; ++g) {
        if (!std::binary_search(n.free_gpus.begin(), n.free_gpus.end(), g)) {
          n.free_gpus.insert(std::lower_bound(n.free_gpus.begin(), n.free_gpus.end(), g), g);
          --left;
        }
      }
    }
  };
  double sched_ms = 0;
  int64_t started = 0, preempted = 0, ended = 0;
  for (int pass = 0; pass < passes; ++pass) {
    snap.now_ms += 10'000;
    // Ends, and victims that stopped.
    std::vector<RunningJob> keep;
    keep.reserve(snap.running.size());
    for (RunningJob& r : snap.running) {
      const bool done = r.end_ms <= snap.now_ms || (r.end_ms == kNever && rng() % 50 == 0);
      if (!done && r.preempting_for == 0) {
        keep.push_back(std::move(r));
        continue;
      }
      give_back(r);
      ++ended;
      if (r.preempting_for != 0) {
        auto it = requests.find(r.id);
        JobRequest again = it != requests.end() ? it->second : MakeJob(rng, r.id, snap.now_ms, true);
        again.preempted_by.push_back(r.preempting_for);
        snap.pending.push_back(std::move(again));
      }
      requests.erase(r.id);
    }
    snap.running = std::move(keep);
    for (JobRequest& j : snap.pending) j.nominated = false;
    while (snap.pending.size() < static_cast<size_t>(kPending)) {
      snap.pending.push_back(MakeJob(rng, next_id++, snap.now_ms, true));
    }

    const auto t0 = std::chrono::steady_clock::now();
    const cohort::sched::Decision d = cohort::sched::Schedule(snap);
    sched_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    // Apply: victims stop at the next pass; the preemptors wait nominated; starts run.
    for (const cohort::sched::Preemption& p : d.preempt) {
      for (RunningJob& r : snap.running) {
        if (r.id != p.victim) continue;
        r.preemptible = false;
        r.preempting_for = p.preemptor;
      }
      ++preempted;
    }
    std::unordered_map<int64_t, size_t> pending_index;
    for (size_t i = 0; i < snap.pending.size(); ++i) pending_index.emplace(snap.pending[i].id, i);
    for (const cohort::sched::Preemption& p : d.preempt) {
      if (auto it = pending_index.find(p.preemptor); it != pending_index.end()) snap.pending[it->second].nominated = true;
    }
    std::vector<bool> gone(snap.pending.size(), false);
    for (const cohort::sched::JobPlacement& p : d.start) {
      const size_t i = pending_index.at(p.job_id);
      gone[i] = true;
      const JobRequest& job = snap.pending[i];
      RunningJob r;
      r.id = job.id;
      r.end_ms = job.time_limit_ms > 0 ? snap.now_ms + static_cast<int64_t>(rng() % static_cast<uint64_t>(job.time_limit_ms)) + 1 : kNever;
      r.team = job.team;
      r.priority = job.priority;
      r.start_ms = r.checkpoint_ms = snap.now_ms;
      for (const cohort::sched::NodeAssignment& a : p.nodes) {
        cohort::sched::NodeView& n = snap.nodes[node_index.at(a.node)];
        for (int g : a.gpus) n.free_gpus.erase(std::lower_bound(n.free_gpus.begin(), n.free_gpus.end(), g));
        n.free_cpus -= a.cpus;
        r.usage.push_back(Usage{a.node, static_cast<int>(a.gpus.size()), a.cpus});
      }
      requests.emplace(r.id, job);
      snap.running.push_back(std::move(r));
      ++started;
    }
    std::vector<JobRequest> still;
    still.reserve(snap.pending.size());
    for (size_t i = 0; i < snap.pending.size(); ++i) {
      if (!gone[i]) still.push_back(std::move(snap.pending[i]));
    }
    snap.pending = std::move(still);
  }
  const double decisions = static_cast<double>(started + preempted);
  fmt::print(
      "sustained ({}): {} passes, {} jobs started, {} victims chosen, {} jobs ended; "
      "{:.1f} ms in Schedule ({:.2f} ms a pass): {:.0f} decisions/s  (target >= 5,000; Slurm documents 500 "
      "jobs/s)\n",
      snap.shares ? "fair share + quotas" : "baseline: no shares", passes, started, preempted, ended, sched_ms,
      sched_ms / passes, decisions / (sched_ms / 1000.0));
}

}  // namespace

int main(int argc, char** argv) {
  const int passes = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const int sustained = argc > 2 ? std::max(0, std::atoi(argv[2])) : 200;
  for (const bool shares : {false, true}) {
    const Snapshot snap = MakeSnapshot(shares);
    int free_gpus = 0;
    for (const NodeView& n : snap.nodes) free_gpus += static_cast<int>(n.free_gpus.size());
    cohort::sched::Decision decision;
    const Timing t = Time(snap, passes, &decision);
    size_t backfilled = 0;
    for (const auto& p : decision.start) backfilled += p.backfilled;
    fmt::print(
        "sched pass{}: nodes={} gpus={} free_gpus={} pending={} started={} (backfilled {}, "
        "reservation {}, preemptions {})  median {:.2f} ms  p90 {:.2f} ms  min {:.2f} ms  over {} passes  "
        "(target < 50 ms{})\n",
        shares ? " with fair share + quotas (50 teams)" : "", snap.nodes.size(), snap.nodes.size() * kGpusPerNode,
        free_gpus, snap.pending.size(), decision.start.size(), backfilled, decision.reservation ? "yes" : "no",
        decision.preempt.size(), t.median, t.p90, t.min, passes,
        shares ? "; the pass without shares above is the baseline" : "");
  }
  if (sustained > 0) {
    Sustained(MakeSnapshot(false), sustained);  // the same churn without shares, for comparison
    Sustained(MakeSnapshot(true), sustained);
  }
  return 0;
}
