// The dashboard at scale: one head with 1,000 simulated agents (8 GPUs each) heartbeating
// every second with GPU telemetry, a queue of jobs (by default 2,000: about 700 run, the
// rest wait), and the running jobs' rank 0 posting progress (step, loss, tokens/s) to
// COHORT_REPORT, while a client times the request the web page polls every 2 s
// (GET /v1/dashboard?recent=20&points=32) to its last byte; GET /v1/nodes, the nodes part
// alone, is timed beside it for scale.
// Target: p99 under 50 ms.
//
// Usage: bench_dashboard_scale [nodes=1000] [jobs=2000] [seconds=15] [points_per_job=200]
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>

#include "bench_cluster.h"
#include "common/clock.h"
#include "sim_agents.h"

using namespace cohort;
using bench::Percentile;

namespace {

// The path part of a COHORT_REPORT URL ("http://host:port/v1/report/TOKEN").
std::string ReportPath(const std::string& url) {
  size_t scheme = url.find("://");
  size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return slash == std::string::npos ? url : url.substr(slash);
}

constexpr const char* kQuery = "/v1/dashboard?recent=20&points=32";  // what web/app.js polls

}  // namespace

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int jobs = argc > 2 ? std::atoi(argv[2]) : 2000;
  const int seconds = argc > 3 ? std::atoi(argv[3]) : 15;
  const int points_per_job = argc > 4 ? std::atoi(argv[4]) : 200;
  bench::BenchCluster c;
  c.StartHead({"--failure-timeout", "10s", "--fence-timeout", "6s", "--no-tls"});  // what is measured is the dashboard, not TLS (bench_head_scale's)
  HttpClient client = c.Client(Millis(10000));

  // Rank 0's COHORT_REPORT path of each running job, as the heartbeat replies reveal them.
  std::mutex report_mu;
  std::map<int64_t, std::string> report_paths;  // guarded by report_mu
  bench::SimAgents agents(c.url(), c.join_token(), nodes, bench::Telemetry::kOn, [&](const api::TaskLaunch& l) {
    if (l.rank != 0) return;
    auto env = l.env.find("COHORT_REPORT");
    std::lock_guard lock(report_mu);
    if (env != l.env.end() && !report_paths.contains(l.job)) report_paths[l.job] = ReportPath(env->second);
  });
  std::atomic<bool> stop{false};
  agents.Start();
  agents.WaitRegistered();
  bench::SubmitJobs(client, jobs, [](int i) -> json {
    auto [n, g] = bench::JobShape(i);
    return {{"name", fmt::format("train-{}", i)}, {"user", fmt::format("user{}", i % 13)},
            {"command", {"python", "train.py", "--config", fmt::format("exp{}.yaml", i)}},
            {"nodes", n}, {"gpus_per_node", g}, {"tasks_per_node", 1}, {"priority", i % 7}};
  });

  // Progress: every running job's rank 0 reports `points_per_job` steps (a falling loss),
  // then one step per job per pass while the requests are timed.
  std::atomic<int64_t> reports{0};
  std::atomic<bool> prefilled{false};
  std::vector<std::thread> reporters;
  for (int t = 0; t < 2; ++t) {
    reporters.emplace_back([&, t] {
      HttpClient hc = c.Client(Millis(10000));
      std::map<int64_t, int> steps;
      while (!stop) {
        std::vector<std::pair<int64_t, std::string>> mine;
        {
          std::lock_guard lock(report_mu);
          for (const auto& [job, path] : report_paths) {
            if (job % 2 == t) mine.emplace_back(job, path);
          }
        }
        bool posted = false;
        for (const auto& [job, path] : mine) {
          if (stop) break;
          int& step = steps[job];
          int burst = step < points_per_job ? points_per_job - step : (prefilled ? 1 : 0);
          for (int k = 0; k < burst && !stop; ++k, ++step) {
            json p = {{"step", step}, {"loss", 4.0 / (1 + step * 0.01) + 0.01 * (job % 10)},
                      {"tokens_per_s", 150000.0 + job}, {"samples_per_s", 73.0}};
            if (hc.Post(path, p)) ++reports;
            posted = true;
          }
        }
        if (!posted) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (prefilled) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    });
  }

  // Wait for the placements to settle and the curves to fill.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  size_t expected = 0;
  for (int i = 0; i < 120 && !stop; ++i) {
    {
      std::lock_guard lock(report_mu);
      expected = report_paths.size() * static_cast<size_t>(points_per_job);
    }
    if (expected > 0 && static_cast<size_t>(reports.load()) >= expected) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  prefilled = true;

  // The first request for the page's query builds its snapshot while the caller waits (the
  // cost of one build); later ones are served from snapshots the head refreshes every
  // 500 ms, so their age is reported too.
  double cold_ms = 0;
  {
    auto t0 = SteadyClock::now();
    auto r = client.GetRaw(kQuery);
    cold_ms = bench::MillisSince(t0);
    if (!r || r->status != 200) bench::BenchCluster::Die("dashboard request failed");
  }
  std::vector<double> dash_ms, nodes_ms, age_ms;
  size_t nodes_bytes = 0;
  size_t bytes = 0, n_nodes = 0, n_running = 0, n_queue = 0, pending = 0, curve_points = 0;
  auto end = SteadyClock::now() + std::chrono::seconds(seconds);
  while (SteadyClock::now() < end) {
    auto t0 = SteadyClock::now();
    auto r = client.GetRaw(kQuery);
    dash_ms.push_back(bench::MillisSince(t0));
    if (!r || r->status != 200) bench::BenchCluster::Die("dashboard request failed");
    bytes = r->body.size();
    json d = json::parse(r->body);
    age_ms.push_back(static_cast<double>(NowUnixMs() - d["time_ms"].get<int64_t>()));
    n_nodes = d["nodes"].size();
    n_running = d["running"].size();
    n_queue = d["queue"].size();
    pending = d["summary"]["pending"].get<size_t>();
    curve_points = 0;
    for (const auto& j : d["running"]) {
      if (j.contains("loss")) curve_points += j["loss"]["points"].size();
    }
    auto t1 = SteadyClock::now();
    if (auto n = client.GetRaw("/v1/nodes?limit=10000"); n && n->status == 200) {
      nodes_ms.push_back(bench::MillisSince(t1));
      nodes_bytes = n->body.size();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (const char* dump = std::getenv("COHORT_BENCH_DUMP"); dump && *dump) {
    if (auto r = client.GetRaw(kQuery); r) std::ofstream(dump) << r->body;
  }
  stop = true;
  agents.Stop();
  for (auto& w : reporters) w.join();

  std::printf("dashboard at scale: %d simulated agents x 8 GPUs heartbeating every 1 s with telemetry, %d jobs\n",
              nodes, jobs);
  std::printf("  reply: %zu nodes, %zu running jobs (%zu loss points drawn), queue %zu of %zu pending, %.0f KB; "
              "%lld progress reports posted; heartbeat errors %d\n",
              n_nodes, n_running, curve_points, n_queue, pending, bytes / 1024.0,
              static_cast<long long>(reports.load()), static_cast<int>(agents.Stats().errors));
  double p50 = Percentile(dash_ms, 0.5), p99 = Percentile(dash_ms, 0.99);
  std::printf("  GET /v1/dashboard (%zu samples): p50 %.2f ms, p99 %.2f ms   target p99 < 50 ms   %s\n",
              dash_ms.size(), p50, p99, p99 < 50 ? "OK" : "MISSED");
  std::printf("  first request (builds the snapshot): %.2f ms; snapshot age when served: p50 %.0f ms, p99 %.0f ms\n",
              cold_ms, Percentile(age_ms, 0.5), Percentile(age_ms, 0.99));
  std::printf("  for scale, GET /v1/nodes (%zu samples, %.0f KB): p50 %.2f ms, p99 %.2f ms\n", nodes_ms.size(),
              nodes_bytes / 1024.0, Percentile(nodes_ms, 0.5), Percentile(nodes_ms, 0.99));
  return 0;
}
