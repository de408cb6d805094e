// /metrics at scale: one head with 1,000 simulated agents (8 GPUs each) heartbeating every
// second with GPU telemetry, and a queue of jobs, while a client scrapes GET /metrics
// the way Prometheus does and times each scrape to its last byte.
// Target: p99 scrape latency under 100 ms.
//
// Usage: bench_metrics_scale [nodes=1000] [jobs=1000] [seconds=15]
#include <algorithm>
#include <cstdio>

#include "bench_cluster.h"
#include "common/clock.h"
#include "sim_agents.h"

using namespace cohort;
using bench::Percentile;

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int jobs = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int seconds = argc > 3 ? std::atoi(argv[3]) : 15;
  bench::BenchCluster c;
  c.StartHead({"--failure-timeout", "10s", "--fence-timeout", "6s", "--no-tls"});  // what is measured is /metrics, not TLS (bench_head_scale's)
  HttpClient client = c.Client(Millis(10000));

  bench::SimAgents agents(c.url(), c.join_token(), nodes, bench::Telemetry::kOn);
  agents.Start();
  agents.WaitRegistered();
  bench::SubmitJobs(client, jobs, bench::PlainJobSpec);

  std::this_thread::sleep_for(std::chrono::seconds(3));
  std::vector<double> scrape_ms;
  size_t bytes = 0, lines = 0;
  auto end = SteadyClock::now() + std::chrono::seconds(seconds);
  while (SteadyClock::now() < end) {
    auto t0 = SteadyClock::now();
    auto r = client.GetRaw("/metrics");
    scrape_ms.push_back(bench::MillisSince(t0));
    if (!r || r->status != 200) bench::BenchCluster::Die("scrape failed");
    bytes = r->body.size();
    lines = static_cast<size_t>(std::count(r->body.begin(), r->body.end(), '\n'));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  agents.Stop();
  const auto hb_ms = agents.HeartbeatMillisSince(agents.start());

  int running = 0;
  if (auto r = client.Get("/v1/jobs?state=RUNNING&limit=10000&fields=state"); r) running = static_cast<int>((*r)["jobs"].size());
  double hb_rate = hb_ms.size() / std::chrono::duration<double>(SteadyClock::now() - agents.start()).count();
  std::printf("metrics at scale: %d simulated agents x 8 GPUs heartbeating every 1 s with telemetry, %d jobs (%d running)\n",
              nodes, jobs, running);
  std::printf("  heartbeats: %.0f/s, p50 %.2f ms, p99 %.2f ms, errors %d\n", hb_rate, Percentile(hb_ms, 0.5),
              Percentile(hb_ms, 0.99), static_cast<int>(agents.Stats().errors));
  double p99 = Percentile(scrape_ms, 0.99);
  std::printf("  GET /metrics (%zu scrapes, %zu lines, %.0f KB): p50 %.2f ms, p99 %.2f ms   target p99 < 100 ms   %s\n",
              scrape_ms.size(), lines, bytes / 1024.0, Percentile(scrape_ms, 0.5), p99, p99 < 100 ? "OK" : "MISSED");
  return 0;
}
