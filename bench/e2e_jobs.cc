// End to end: 200 single-GPU jobs running `true` on one agent with 8 simulated GPUs,
// from the first submit to the last job finished (the head's own timestamps).
// Target: under 3 s.
#include <algorithm>
#include <cstdio>

#include "bench_cluster.h"
#include "common/clock.h"

using namespace cohort;

int main(int argc, char** argv) {
  int jobs = argc > 1 ? std::atoi(argv[1]) : 200;
  bench::BenchCluster c;
  c.StartHead();
  c.StartAgent("node-1", 8);
  c.WaitForNodes(1);
  HttpClient client(c.url());

  int64_t first_submit = NowUnixMs();
  auto t0 = SteadyClock::now();
  std::vector<int64_t> ids;
  for (int i = 0; i < jobs; ++i) {
    auto r = client.Post("/v1/jobs", json{{"command", {"true"}}, {"gpus_per_node", 1}});
    if (!r) bench::BenchCluster::Die(r.error().message);
    ids.push_back((*r)["id"].get<int64_t>());
  }
  double submit_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  // Every ended job, through the list's pages (only the two fields read).
  auto ended = [&] {
    json all = json::array();
    std::string cursor;
    do {
      auto r = client.Get("/v1/jobs?state=SUCCEEDED,FAILED,CANCELLED&limit=10000&fields=state,end_ms" +
                          (cursor.empty() ? std::string() : "&cursor=" + cursor));
      if (!r) bench::BenchCluster::Die(r.error().message);
      for (auto& j : (*r)["jobs"]) all.push_back(std::move(j));
      cursor = r->value("next_cursor", "");
    } while (!cursor.empty());
    return all;
  };
  int64_t last_end = 0;
  while (true) {
    json done = ended();
    if (done.size() == ids.size()) {
      int failed = 0;
      for (const auto& j : done) {
        last_end = std::max(last_end, j["end_ms"].get<int64_t>());
        failed += j["state"] != "SUCCEEDED";
      }
      if (failed) bench::BenchCluster::Die(std::to_string(failed) + " jobs did not succeed");
      break;
    }
    if (SteadyClock::now() - t0 > std::chrono::seconds(600)) bench::BenchCluster::Die("timed out");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  double total_s = (last_end - first_submit) / 1000.0;
  std::printf("e2e: %d single-GPU `true` jobs on 1 agent x 8 simulated GPUs\n", jobs);
  std::printf("  submitting all:             %6.3f s (%.1f ms per accepted job, durable)\n", submit_s,
              submit_s * 1000 / jobs);
  std::printf("  first submit -> last done:  %6.3f s   target < 3 s   %s\n", total_s, total_s < 3 ? "OK" : "MISSED");
  std::printf("  throughput:                 %6.1f jobs/s\n", jobs / total_s);
  if (auto m = client.GetRaw("/metrics"); m && m->status == 200) {
    for (std::string_view name : {"cohort_scheduler_pass_duration_seconds_count", "cohort_scheduler_pass_duration_seconds_sum",
                                  "cohort_store_commit_duration_seconds_count", "cohort_store_commit_duration_seconds_sum"}) {
      auto at = m->body.find(std::string(name) + " ");
      if (at != std::string::npos) std::printf("  %s\n", m->body.substr(at, m->body.find('\n', at) - at).c_str());
    }
  }
  return 0;
}
