// Head at scale: 1,000 simulated agents (8 GPUs each) heartbeating every second against
// one head, with a queue of jobs, while a client times the queue request
// (GET /v1/jobs?state=PENDING,RUNNING, what `cohort queue` sends).
// Targets: p99 of the queue request under 50 ms; head RSS under 200 MB.
//
// The simulated agents speak the real protocol: they register, heartbeat once a second
// (spread evenly over the second), and report the tasks the head assigns them as running.
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

}  // namespace

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int jobs = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int seconds = argc > 3 ? std::atoi(argv[3]) : 15;
  bench::BenchCluster c;
  // Generous timeouts: the load generator shares 2 cores with the head.
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
          // Node i heartbeats at i/nodes of each second.
          auto due = start + std::chrono::milliseconds(round * 1000 + i * 1000 / nodes);
          std::this_thread::sleep_until(due);
          SimNode& s = sims[i];
          api::Heartbeat hb;
          hb.incarnation = s.incarnation;
          hb.applied_version = s.applied;
          hb.tasks = s.running;
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
            s.running.push_back(tr);
          }
        }
      }
      std::lock_guard lock(lat_mu);
      hb_ms.insert(hb_ms.end(), mine.begin(), mine.end());
    });
  }

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
    queue_ms.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
    if (r && r->status == 200) {
      bytes = r->body.size();
      rows = json::parse(r->body)["jobs"].size();
    }
    peak_rss = std::max(peak_rss, bench::RssBytes(c.head_pid()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  for (auto& w : workers) w.join();

  int up = 0, running = 0;
  if (auto r = client.Get("/v1/nodes"); r) {
    for (const auto& n : (*r)["nodes"]) up += n["state"] == "UP";
  }
  if (auto r = client.Get("/v1/jobs?state=RUNNING"); r) running = static_cast<int>((*r)["jobs"].size());
  double hb_rate = hb_ms.size() / std::chrono::duration<double>(SteadyClock::now() - start).count();
  std::printf("head at scale: %d simulated agents x 8 GPUs heartbeating every 1 s, %d jobs (%d running, %zu in the queue view)\n",
              nodes, jobs, running, rows);
  std::printf("  heartbeats: %.0f/s, p50 %.2f ms, p99 %.2f ms, errors %d; nodes UP at the end: %d/%d\n", hb_rate,
              Percentile(hb_ms, 0.5), Percentile(hb_ms, 0.99), hb_errors.load(), up, nodes);
  double p99 = Percentile(queue_ms, 0.99);
  std::printf("  queue request (%zu samples, %zu jobs, %.0f KB): p50 %.2f ms, p99 %.2f ms   target p99 < 50 ms   %s\n",
              queue_ms.size(), rows, bytes / 1024.0, Percentile(queue_ms, 0.5), p99, p99 < 50 ? "OK" : "MISSED");
  double rss_mb = peak_rss / 1048576.0;
  std::printf("  head RSS (peak sampled): %.1f MB   target < 200 MB   %s\n", rss_mb, rss_mb < 200 ? "OK" : "MISSED");
  return 0;
}
