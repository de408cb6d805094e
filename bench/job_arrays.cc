// Job arrays (issue 20) on real head and agent processes with simulated GPUs.
//
//   bench_job_arrays [ELEMENTS=10000] [AGENTS=8] [GPUS_PER_AGENT=8] [SECONDS=1] [BIG=100000]
//
// 1. Submitting one BIG-element array (`--array 0-99999`): the time of the request (target
//    < 1 s) and the head's RSS before and after it (the array is one record; the head makes
//    its elements a window at a time, head/core/arrays.h).
// 2. ELEMENTS elements of SECONDS seconds each (`sleep`) through AGENTS x GPUS_PER_AGENT
//    GPUs: the time from the submit to the last element's end against the ideal,
//    ceil(ELEMENTS / GPUs) x SECONDS (part 1's array is cancelled before this starts).
//    The full size is 10,000 one-second elements through 64 GPUs (ideal 157 s); on a small
//    machine run it scaled down, e.g. 640 elements (ideal 10 s), and say so.
#include <cmath>
#include <cstdio>
#include <thread>

#include "bench_cluster.h"
#include "common/clock.h"

using namespace cohort;

int main(int argc, char** argv) {
  const int elements = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int agents = argc > 2 ? std::atoi(argv[2]) : 8;
  const int gpus = argc > 3 ? std::atoi(argv[3]) : 8;
  const double seconds = argc > 4 ? std::atof(argv[4]) : 1.0;
  const int big = argc > 5 ? std::atoi(argv[5]) : 100000;
  if (elements < 1 || agents < 1 || gpus < 1 || seconds < 0 || big < 1) {
    bench::BenchCluster::Die("usage: bench_job_arrays [ELEMENTS>=1] [AGENTS>=1] [GPUS_PER_AGENT>=1] [SECONDS>=0] [BIG>=1]");
  }
  bench::BenchCluster c;
  c.StartHead();
  for (int a = 0; a < agents; ++a) c.StartAgent("node-" + std::to_string(a + 1), gpus);
  c.WaitForNodes(static_cast<size_t>(agents));
  HttpClient client = c.Client(Millis(30000));

  // 1. One big array: one request, one record.
  const int64_t rss0 = bench::RssBytes(c.head_pid());
  auto t0 = SteadyClock::now();
  auto r = client.Post("/v1/jobs", json{{"command", {"true"}},
                                        {"array", fmt::format("0-{}", big - 1)},
                                        {"gpus_per_node", 1},
                                        {"priority", -1000}});  // behind part 2's array
  const double submit_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  if (!r) bench::BenchCluster::Die("submit: " + r.error().message);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // its first window of elements made
  const int64_t rss1 = bench::RssBytes(c.head_pid());
  if (auto cancel = client.Post(fmt::format("/v1/jobs/{}/cancel", (*r)["id"].get<int64_t>()), json::object()); !cancel) {
    bench::BenchCluster::Die("cancel: " + cancel.error().message);
  }
  std::printf("job arrays: head and %d agent(s) x %d simulated GPUs on this machine (%ld cores)\n", agents, gpus,
              sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("  submit a %d-element array:   %7.3f s   target < 1 s   %s\n", big, submit_s,
              submit_s < 1 ? "OK" : "MISSED");
  std::printf("  head RSS: %.1f MB before, %.1f MB after it (+%.1f MB)\n", rss0 / 1e6, rss1 / 1e6, (rss1 - rss0) / 1e6);

  // 2. Elements of `seconds` each through every GPU.
  const int64_t start_ms = NowUnixMs();
  auto a = client.Post("/v1/jobs", json{{"command", {"sleep", fmt::format("{}", seconds)}},
                                        {"array", fmt::format("0-{}", elements - 1)},
                                        {"gpus_per_node", 1}});
  if (!a) bench::BenchCluster::Die("submit: " + a.error().message);
  const int64_t id = (*a)["id"].get<int64_t>();
  json last;
  while (true) {
    auto j = client.Get(fmt::format("/v1/jobs/{}", id));
    if (!j) bench::BenchCluster::Die(j.error().message);
    last = *j;
    if (last["state"] != "PENDING") break;
    if (NowUnixMs() - start_ms > 3'600'000) bench::BenchCluster::Die("timed out");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (last["state"] != "SUCCEEDED") bench::BenchCluster::Die("the array ended " + last.dump());
  const double took_s = (last["end_ms"].get<int64_t>() - start_ms) / 1000.0;
  const int total_gpus = agents * gpus;
  const double ideal_s = std::ceil(static_cast<double>(elements) / total_gpus) * seconds;
  std::printf("  %d x %.1f s elements through %d GPUs: %7.2f s, ideal %.2f s: %.1f%% of ideal (overhead %.2f s)\n",
              elements, seconds, total_gpus, took_s, ideal_s, 100.0 * ideal_s / took_s, took_s - ideal_s);
  std::printf("  elements: %s\n", last["array_summary"].dump().c_str());
  return 0;
}
