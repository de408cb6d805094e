// /metrics at scale: one head with 1,000 simulated agents (8 GPUs each) heartbeating every
// second with GPU telemetry, and a queue of jobs, while a client scrapes GET /metrics
// the way Prometheus does and times each scrape to its last byte.
// Target: p99 scrape latency under 100 ms.
//
// Usage: bench_metrics_scale [nodes=1000] [jobs=1000] [seconds=15]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>

#include "api/types.h"
#include "bench_cluster.h"
#include "common/clock.h"

using namespace cohort;

namespace {

struct SimNode {
  std::string name;
  std::string incarnation;
  int64_t applied = 0;
  std::vector<api::TaskReport> running;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// The GPU part of a heartbeat: 8 GPUs, busy ones hot.
std::vector<api::GpuReport> GpuReports(const SimNode& s) {
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

}  // namespace

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int jobs = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int seconds = argc > 3 ? std::atoi(argv[3]) : 15;
  bench::BenchCluster c;
  c.StartHead({"--failure-timeout", "10s", "--fence-timeout", "6s"});
  HttpClient client(c.url(), Millis(10000));

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
    if (auto r = client.Post("/v1/agents/register", api::ToJson(reg)); !r) bench::BenchCluster::Die(r.error().message);
  }
  const int shapes[][2] = {{1, 1}, {1, 2}, {1, 4}, {1, 8}, {2, 8}, {4, 8}};
  for (int i = 0; i < jobs; ++i) {
    auto [n, g] = shapes[i % 6];
    json spec = {{"command", {"train.sh"}}, {"nodes", n}, {"gpus_per_node", g}, {"tasks_per_node", 1},
                 {"priority", i % 7}};
    if (auto r = client.Post("/v1/jobs", spec); !r) bench::BenchCluster::Die(r.error().message);
  }

  std::atomic<bool> stop{false};
  std::mutex lat_mu;
  std::vector<double> hb_ms;
  std::atomic<int> hb_errors{0};
  const int threads = 8;
  std::vector<std::thread> workers;
  auto start = SteadyClock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      HttpClient hc(c.url(), Millis(10000));
      std::vector<double> mine;
      for (int round = 0; !stop; ++round) {
        for (int i = t; i < nodes && !stop; i += threads) {
          std::this_thread::sleep_until(start + std::chrono::milliseconds(round * 1000 + i * 1000 / nodes));
          SimNode& s = sims[i];
          api::Heartbeat hb;
          hb.incarnation = s.incarnation;
          hb.applied_version = s.applied;
          hb.tasks = s.running;
          hb.gpus = GpuReports(s);
          auto t0 = SteadyClock::now();
          auto r = hc.Post("/v1/agents/" + s.name + "/heartbeat", api::ToJson(hb));
          mine.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
          if (!r) {
            ++hb_errors;
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
            tr.cpu_seconds = 12.5;
            tr.rss_bytes = int64_t{2} << 30;
            s.running.push_back(tr);
          }
        }
      }
      std::lock_guard lock(lat_mu);
      hb_ms.insert(hb_ms.end(), mine.begin(), mine.end());
    });
  }

  std::this_thread::sleep_for(std::chrono::seconds(3));
  std::vector<double> scrape_ms;
  size_t bytes = 0, lines = 0;
  auto end = SteadyClock::now() + std::chrono::seconds(seconds);
  while (SteadyClock::now() < end) {
    auto t0 = SteadyClock::now();
    auto r = client.GetRaw("/metrics");
    scrape_ms.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
    if (!r || r->status != 200) bench::BenchCluster::Die("scrape failed");
    bytes = r->body.size();
    lines = static_cast<size_t>(std::count(r->body.begin(), r->body.end(), '\n'));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  for (auto& w : workers) w.join();

  int running = 0;
  if (auto r = client.Get("/v1/jobs?state=RUNNING"); r) running = static_cast<int>((*r)["jobs"].size());
  double hb_rate = hb_ms.size() / std::chrono::duration<double>(SteadyClock::now() - start).count();
  std::printf("metrics at scale: %d simulated agents x 8 GPUs heartbeating every 1 s with telemetry, %d jobs (%d running)\n",
              nodes, jobs, running);
  std::printf("  heartbeats: %.0f/s, p50 %.2f ms, p99 %.2f ms, errors %d\n", hb_rate, Percentile(hb_ms, 0.5),
              Percentile(hb_ms, 0.99), hb_errors.load());
  double p99 = Percentile(scrape_ms, 0.99);
  std::printf("  GET /metrics (%zu scrapes, %zu lines, %.0f KB): p50 %.2f ms, p99 %.2f ms   target p99 < 100 ms   %s\n",
              scrape_ms.size(), lines, bytes / 1024.0, Percentile(scrape_ms, 0.5), p99, p99 < 100 ? "OK" : "MISSED");
  return 0;
}
