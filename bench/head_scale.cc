// Head at scale: N simulated agents (8 GPUs each; 1,000 and 10,000 are the sizes with
// targets) against one head, with a queue of jobs really placed and running, while a
// client times the queue request (GET /v1/jobs?state=PENDING,RUNNING, what `cohort queue`
// sends) and the head's RSS is sampled.
//
// The simulated agents speak the real protocol (sim_agents.h): they register, heartbeat
// at the interval the head chooses for the cluster's size (--heartbeat-rate-target; the
// head's base interval is 1 s), report the tasks the head assigns them as running, and
// heartbeat at once when the head wakes them.
//
// Targets (issue 23):  1,000 agents: queue p99 < 50 ms, head RSS < 200 MB;
//                     10,000 agents: queue p99 < 100 ms, head RSS < 1 GB;
// at both, every heartbeat sent is handled and every node stays UP.
//
// Usage: bench_head_scale [nodes=1000] [jobs=1000] [seconds=15] [head flags...]
#include <algorithm>
#include <cstdlib>
#include <cstdio>

#include "bench_cluster.h"
#include "common/clock.h"
#include "sim_agents.h"

using namespace cohort;
using bench::Percentile;

namespace {

// Jobs in `state` (a comma-separated list), counted over every page.
int CountJobs(HttpClient& client, const std::string& state) {
  int n = 0;
  std::string cursor;
  do {
    auto r = client.Get("/v1/jobs?state=" + state + "&limit=10000&fields=state" +
                        (cursor.empty() ? "" : "&cursor=" + cursor));
    if (!r) return -1;
    n += static_cast<int>((*r)["jobs"].size());
    cursor = r->contains("next_cursor") ? (*r)["next_cursor"].get<std::string>() : "";
  } while (!cursor.empty());
  return n;
}

const char* Verdict(bool ok) { return ok ? "OK" : "MISSED"; }

}  // namespace

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int jobs = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int seconds = argc > 3 ? std::atoi(argv[3]) : 15;
  // Targets by size: the 1,000-agent ones up to 1,000 agents, the 10,000-agent ones above.
  const bool large = nodes > 1000;
  const double p99_target_ms = large ? 100 : 50;
  const double rss_target_mb = large ? 1024 : 200;

  bench::BenchCluster c;
  // Generous timeouts: the load generator shares the machine with the head. Security as
  // COHORT_BENCH_SECURITY says (bench_cluster.h): by default HTTPS, and the simulated
  // agents present node certificates (mTLS) as real ones do.
  // Under mTLS each simulated node has a connection of its own (its certificate), and all
  // come from 127.0.0.1: more than the head allows one address by default (1,024), as
  // agents behind a NAT would.
  std::vector<std::string> flags = {"--failure-timeout", "10s", "--fence-timeout", "6s",
                                    "--max-connections-per-client", std::to_string(nodes + 1024)};
  for (int i = 4; i < argc; ++i) flags.emplace_back(argv[i]);
  c.StartHead(flags);
  HttpClient client = c.Client(Millis(30000));

  // What connections cost: accepted, and TLS handshakes (from /metrics).
  const auto connection_counts = [&] {
    auto m = client.GetRaw("/metrics");
    const std::string text = m && m->status == 200 ? m->body : "";
    return std::pair(bench::Metric(text, "cohort_http_accepted_connections_total"),
                     bench::Metric(text, "cohort_http_tls_handshakes_total"));
  };

  // Registration: the nodes join as real agents do, each heartbeating from then on. Under
  // mTLS this is where the handshakes and certificate requests are (one each per node);
  // the head's CPU for it is printed apart from the timed window's.
  const auto setup_connections_before = connection_counts();
  const double setup_cpu_before = bench::ProcessCpu(c.head_pid()).self;
  bench::SimAgents agents(c.url(), c.join_token(), nodes, bench::Telemetry::kOff);
  agents.Start();
  agents.WaitRegistered();
  const double register_s = bench::MillisSince(agents.start()) / 1000;
  const double register_cpu_s = bench::ProcessCpu(c.head_pid()).self - setup_cpu_before;
  const auto setup_connections_after = connection_counts();

  const auto submit_t0 = SteadyClock::now();
  bench::SubmitJobs(client, jobs, bench::PlainJobSpec);
  const double submit_s = bench::MillisSince(submit_t0) / 1000;

  // Let the head place what fits and the nodes report it running: until the running
  // count stops changing (two polls a second apart), at most 60 s.
  int running = 0;
  for (int i = 0, last = -1; i < 60; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    running = CountJobs(client, "RUNNING");
    if (running == last && running > 0) break;
    last = running;
  }
  const double placed_s = bench::MillisSince(submit_t0) / 1000;
  const int pending = CountJobs(client, "PENDING");

  // The timed window: steady state (its connections and handshakes are counted and
  // printed; none are expected). Announced on stderr as it opens, for a profiler to
  // attach to the head (its pid given) for that window only.
  std::fprintf(stderr, "timed window opens: %d s, head pid %d\n", seconds, static_cast<int>(c.head_pid()));
  const auto connections_before = connection_counts();
  const bench::SimStats before = agents.Stats();
  const double cpu_before = bench::ProcessCpu(c.head_pid()).self;
  std::vector<double> queue_ms;
  size_t rows = 0, bytes = 0;
  int64_t peak_rss = 0;
  const auto end = SteadyClock::now() + std::chrono::seconds(seconds);
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
  const bench::SimStats after = agents.Stats();
  const double head_cpu_s = bench::ProcessCpu(c.head_pid()).self - cpu_before;
  const auto connections_after = connection_counts();

  int up = 0;
  std::string cursor;
  do {
    auto r = client.Get("/v1/nodes?limit=10000&fields=state" + (cursor.empty() ? "" : "&cursor=" + cursor));
    if (!r) break;
    for (const auto& n : (*r)["nodes"]) up += n["state"] == "UP";
    cursor = r->contains("next_cursor") ? (*r)["next_cursor"].get<std::string>() : "";
  } while (!cursor.empty());
  const int running_end = CountJobs(client, "RUNNING");
  const int pending_end = CountJobs(client, "PENDING");
  agents.Stop();
  const std::vector<double> hb_ms = agents.HeartbeatMillisSince(before.at);
  const double longest_gap_ms = agents.LongestGapMillisSince(before.at);

  const double window_s = std::chrono::duration<double>(after.at - before.at).count();
  const double sent_rate = (after.sent - before.sent) / window_s;
  const double handled_rate = (after.handled - before.handled) / window_s;
  const double due_rate = after.interval_ms > 0 ? nodes * 1000.0 / after.interval_ms : 0;
  const int64_t errors = after.errors - before.errors;
  const double p99 = Percentile(queue_ms, 0.99);
  const double rss_mb = peak_rss / 1048576.0;

  std::printf("head at scale: %d simulated agents x 8 GPUs (%d GPUs), %d jobs\n", nodes, nodes * 8, jobs);
  std::printf("  setup: %d nodes registered in %.1f s; %d jobs submitted in %.1f s; %d running, %d pending after "
              "%.1f s (%lld tasks on the nodes, %lld wakes)\n",
              nodes, register_s, jobs, submit_s, running, pending,
              placed_s, static_cast<long long>(after.tasks), static_cast<long long>(after.wakes));
  std::printf("  registration (before the window; the heartbeats of nodes already registered included): head CPU %.2f s, "
              "%.0f us per node; %.0f connections accepted, %.0f TLS handshakes\n",
              register_cpu_s, 1e6 * register_cpu_s / std::max(nodes, 1),
              setup_connections_after.first - setup_connections_before.first,
              setup_connections_after.second - setup_connections_before.second);
  std::printf("  heartbeat interval chosen by the head: %lld ms (due: %.0f/s)\n",
              static_cast<long long>(after.interval_ms), due_rate);
  const int64_t sent = after.sent - before.sent, handled = after.handled - before.handled;
  std::printf("  heartbeats in %.0f s: sent %lld (%.0f/s), handled %lld (%.0f/s), errors %lld; p50 %.2f ms, p99 "
              "%.2f ms; longest gap between a node's heartbeats %.0f ms   target: all handled   %s\n",
              window_s, static_cast<long long>(sent), sent_rate, static_cast<long long>(handled), handled_rate,
              static_cast<long long>(errors), Percentile(hb_ms, 0.5), Percentile(hb_ms, 0.99), longest_gap_ms,
              // Counted when sent and when answered: up to one per thread is in flight at
              // either end of the window.
              Verdict(errors == 0 && std::abs(sent - handled) <= bench::SimAgents::kThreads));
  std::printf("  head CPU in the window: %.0f%% of a core (%.0f us per heartbeat handled, everything included: "
              "queue requests, liveness, passes)\n",
              100 * head_cpu_s / window_s, handled_rate > 0 ? 1e6 * head_cpu_s / (handled_rate * window_s) : 0.0);
  std::printf("  connections in the window: %.0f accepted, %.0f TLS handshakes; the head woke nodes %lld times\n",
              connections_after.first - connections_before.first, connections_after.second - connections_before.second,
              static_cast<long long>(after.wakes - before.wakes));
  std::printf("  nodes UP at the end: %d/%d   target: all   %s; jobs running at the end: %d, pending %d\n", up, nodes,
              Verdict(up == nodes), running_end, pending_end);
  std::printf("  queue request (%zu samples, %zu jobs, %.0f KB): p50 %.2f ms, p99 %.2f ms   target p99 < %.0f ms   %s\n",
              queue_ms.size(), rows, bytes / 1024.0, Percentile(queue_ms, 0.5), p99, p99_target_ms,
              Verdict(p99 < p99_target_ms));
  std::printf("  head RSS (peak sampled): %.1f MB   target < %.0f MB   %s\n", rss_mb, rss_target_mb,
              Verdict(rss_mb < rss_target_mb));
  return 0;
}
