// Simulated agents for the head-at-scale benchmarks (head_scale, metrics_scale,
// dashboard_scale): many fake nodes that speak the real agent protocol to one head over
// HTTP, without any agent processes. Each node registers with 8 simulated 80 GB GPUs and
// 64 CPUs, then heartbeats once a second (node i at i/N of each second), reporting the
// tasks the head assigned it in the previous reply as running, and optionally the GPU
// telemetry and per-task resource use a real agent would send.
//
// `SimAgents` owns the heartbeat threads and the nodes' state; Start() and Stop() are
// called from one thread (the benchmark's main thread), and the results (`heartbeat_ms`,
// `errors`) are read after Stop(). The `on_task` hook runs on the heartbeat threads and
// must do its own locking. Fatal setup errors exit the benchmark (BenchCluster::Die).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/types.h"
#include "bench_cluster.h"
#include "common/clock.h"
#include "common/http.h"

namespace cohort::bench {

// One simulated node: its identity and what it last heard from the head.
struct SimNode {
  std::string name;
  std::string incarnation;
  int64_t applied = 0;
  std::vector<api::TaskReport> running;
};

// The p-quantile (0..1) of `v` by nearest rank; 0 for an empty sample.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// Milliseconds since `t0`.
inline double MillisSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

// The GPU part of a heartbeat: 8 GPUs, those used by a running task busy and hot.
inline std::vector<api::GpuReport> SimGpuReports(const SimNode& s) {
  std::vector<api::GpuReport> out;
  for (int g = 0; g < 8; ++g) {
    bool busy = std::any_of(s.running.begin(), s.running.end(), [&](const api::TaskReport& t) {
      return std::find(t.gpus.begin(), t.gpus.end(), g) != t.gpus.end();
    });
    api::GpuReport r;
    r.index = g;
    r.telemetry.utilization = busy ? 0.93 : 0.0;
    r.telemetry.memory_used_bytes = busy ? (int64_t{60} << 30) : (int64_t{1} << 29);
    r.telemetry.memory_total_bytes = int64_t{80} << 30;
    r.telemetry.temperature_celsius = busy ? 74 : 35;
    r.telemetry.power_watts = busy ? 650 : 70;
    r.telemetry.sm_clock_hz = busy ? 1.98e9 : 3.45e8;
    out.push_back(r);
  }
  return out;
}

// Registers `nodes` simulated agents ("sim-0000", ...), each with 8 GPUs and 64 CPUs, and
// returns their state. Exits the benchmark if a registration fails.
inline std::vector<SimNode> RegisterSimNodes(HttpClient& client, int nodes) {
  std::vector<SimNode> sims(nodes);
  for (int i = 0; i < nodes; ++i) {
    sims[i].name = fmt::format("sim-{:04d}", i);
    sims[i].incarnation = fmt::format("inc{}", i);
    api::Registration reg;
    reg.name = sims[i].name;
    reg.address = "127.0.0.1";
    reg.incarnation = sims[i].incarnation;
    reg.cpus = 64;
    for (int g = 0; g < 8; ++g) {
      api::Gpu gpu;
      gpu.index = g;
      gpu.name = "Cohort Simulated GPU 80GB";
      gpu.uuid = fmt::format("GPU-{}-{}", i, g);
      gpu.memory_bytes = 80LL << 30;
      gpu.simulated = true;
      reg.gpus.push_back(gpu);
    }
    if (auto r = client.Post("/v1/agents/register", api::ToJson(reg)); !r) BenchCluster::Die(r.error().message);
  }
  return sims;
}

// The gang shape of the i-th benchmark job, cycling 1x1, 1x2, 1x4, 1x8, 2x8, 4x8
// (nodes x GPUs per node).
struct SimJobShape {
  int nodes;
  int gpus_per_node;
};
inline SimJobShape JobShape(int i) {
  constexpr SimJobShape kShapes[] = {{1, 1}, {1, 2}, {1, 4}, {1, 8}, {2, 8}, {4, 8}};
  return kShapes[i % 6];
}

// The plainest job spec of that shape: one task per node running "train.sh", priority i % 7.
inline json PlainJobSpec(int i) {
  auto [n, g] = JobShape(i);
  return {{"command", {"train.sh"}}, {"nodes", n}, {"gpus_per_node", g}, {"tasks_per_node", 1},
          {"priority", i % 7}};
}

// Submits jobs 0..jobs-1 with the specs `spec(i)`; exits the benchmark if one fails.
inline void SubmitJobs(HttpClient& client, int jobs, const std::function<json(int)>& spec) {
  for (int i = 0; i < jobs; ++i) {
    if (auto r = client.Post("/v1/jobs", spec(i)); !r) BenchCluster::Die(r.error().message);
  }
}

// Whether heartbeats carry GPU telemetry (SimGpuReports) and running tasks their CPU and
// RSS use, as a real agent's do, or only the task list.
enum class Telemetry { kOff, kOn };

// The heartbeat loop of every simulated node, spread over kThreads threads (thread t
// drives nodes t, t + kThreads, ...), each with its own HTTP client. `on_task`, if set,
// is called on a heartbeat thread for every task a heartbeat reply assigns.
class SimAgents {
 public:
  static constexpr int kThreads = 8;
  using OnTask = std::function<void(const api::TaskLaunch&)>;

  SimAgents(std::string url, std::vector<SimNode> sims, Telemetry telemetry, OnTask on_task = {})
      : url_(std::move(url)), sims_(std::move(sims)), telemetry_(telemetry == Telemetry::kOn),
        on_task_(std::move(on_task)) {}
  SimAgents(const SimAgents&) = delete;
  SimAgents& operator=(const SimAgents&) = delete;
  ~SimAgents() { Stop(); }

  // Starts the heartbeat threads; the first round begins now.
  void Start() {
    start_ = SteadyClock::now();
    for (int t = 0; t < kThreads; ++t) workers_.emplace_back([this, t] { Run(t); });
  }

  // Stops and joins the threads (each finishes its heartbeat in flight). Idempotent.
  void Stop() {
    stop_ = true;
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  SteadyClock::time_point start() const { return start_; }
  // Latency of every heartbeat sent, to the last byte of the reply; valid after Stop().
  const std::vector<double>& heartbeat_ms() const { return hb_ms_; }
  // Heartbeats that got no reply.
  int errors() const { return hb_errors_.load(); }

 private:
  void Run(int t) {
    const int nodes = static_cast<int>(sims_.size());
    HttpClient hc(url_, Millis(10000));
    std::vector<double> mine;
    for (int round = 0; !stop_; ++round) {
      for (int i = t; i < nodes && !stop_; i += kThreads) {
        // Node i heartbeats at i/nodes of each second.
        std::this_thread::sleep_until(start_ + std::chrono::milliseconds(round * 1000 + i * 1000 / nodes));
        SimNode& s = sims_[i];
        api::Heartbeat hb;
        hb.incarnation = s.incarnation;
        hb.applied_version = s.applied;
        hb.tasks = s.running;
        if (telemetry_) hb.gpus = SimGpuReports(s);
        auto t0 = SteadyClock::now();
        auto r = hc.Post("/v1/agents/" + s.name + "/heartbeat", api::ToJson(hb));
        mine.push_back(MillisSince(t0));
        if (!r) {
          ++hb_errors_;
          continue;
        }
        auto reply = api::HeartbeatReplyFromJson(*r);
        if (!reply) continue;
        s.applied = reply->version;
        s.running.clear();
        for (const auto& l : reply->tasks) {
          api::TaskReport tr;
          tr.job = l.job;
          tr.attempt = l.attempt;
          tr.rank = l.rank;
          tr.running = true;
          tr.gpus = l.gpus;
          if (telemetry_) {
            tr.cpu_seconds = 12.5;
            tr.rss_bytes = int64_t{2} << 30;
          }
          s.running.push_back(tr);
          if (on_task_) on_task_(l);
        }
      }
    }
    std::lock_guard lock(mu_);
    hb_ms_.insert(hb_ms_.end(), mine.begin(), mine.end());
  }

  const std::string url_;
  std::vector<SimNode> sims_;  // sims_[i] is touched only by thread i % kThreads
  const bool telemetry_;
  const OnTask on_task_;
  SteadyClock::time_point start_;
  std::atomic<bool> stop_{false};
  std::atomic<int> hb_errors_{0};
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::vector<double> hb_ms_;  // guarded by mu_ while the threads run
};

}  // namespace cohort::bench
