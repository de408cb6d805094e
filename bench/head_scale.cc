// Head at scale: 1,000 simulated agents (8 GPUs each) heartbeating every second against
// one head, with a queue of jobs, while a client times the queue request
// (GET /v1/jobs?state=PENDING,RUNNING, what `cohort queue` sends).
// Targets: p99 of the queue request under 50 ms; head RSS under 200 MB.
//
// The simulated agents speak the real protocol: they register, heartbeat once a second
// (spread evenly over the second), and report the tasks the head assigns them as running.
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
  // Generous timeouts: the load generator shares 2 cores with the head.
  c.StartHead({"--failure-timeout", "10s", "--fence-timeout", "6s"});
  HttpClient client(c.url(), Millis(10000));

  bench::SimAgents agents(c.url(), bench::RegisterSimNodes(client, nodes), bench::Telemetry::kOff);
  bench::SubmitJobs(client, jobs, bench::PlainJobSpec);
  agents.Start();

  // Let the first rounds place jobs, then time queue requests for the rest.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  std::vector<double> queue_ms;
  size_t rows = 0;
  size_t bytes = 0;
  int64_t peak_rss = 0;
  auto end = SteadyClock::now() + std::chrono::seconds(seconds);
  while (SteadyClock::now() < end) {
    // Timed to the last byte of the response; parsing it is the client's business.
    auto t0 = SteadyClock::now();
    auto r = client.GetRaw("/v1/jobs?state=PENDING,RUNNING");
    queue_ms.push_back(bench::MillisSince(t0));
    if (r && r->status == 200) {
      bytes = r->body.size();
      rows = json::parse(r->body)["jobs"].size();
    }
    peak_rss = std::max(peak_rss, bench::RssBytes(c.head_pid()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  agents.Stop();
  const auto& hb_ms = agents.heartbeat_ms();

  int up = 0, running = 0;
  if (auto r = client.Get("/v1/nodes?limit=10000&fields=state"); r) {
    for (const auto& n : (*r)["nodes"]) up += n["state"] == "UP";
  }
  if (auto r = client.Get("/v1/jobs?state=RUNNING&limit=10000&fields=state"); r) running = static_cast<int>((*r)["jobs"].size());
  double hb_rate = hb_ms.size() / std::chrono::duration<double>(SteadyClock::now() - agents.start()).count();
  std::printf("head at scale: %d simulated agents x 8 GPUs heartbeating every 1 s, %d jobs (%d running, %zu in the queue view)\n",
              nodes, jobs, running, rows);
  std::printf("  heartbeats: %.0f/s, p50 %.2f ms, p99 %.2f ms, errors %d; nodes UP at the end: %d/%d\n", hb_rate,
              Percentile(hb_ms, 0.5), Percentile(hb_ms, 0.99), agents.errors(), up, nodes);
  double p99 = Percentile(queue_ms, 0.99);
  std::printf("  queue request (%zu samples, %zu jobs, %.0f KB): p50 %.2f ms, p99 %.2f ms   target p99 < 50 ms   %s\n",
              queue_ms.size(), rows, bytes / 1024.0, Percentile(queue_ms, 0.5), p99, p99 < 50 ? "OK" : "MISSED");
  double rss_mb = peak_rss / 1048576.0;
  std::printf("  head RSS (peak sampled): %.1f MB   target < 200 MB   %s\n", rss_mb, rss_mb < 200 ? "OK" : "MISSED");
  return 0;
}
