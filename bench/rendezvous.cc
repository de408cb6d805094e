// Rendezvous of 64 local ranks (target: under 2 s), through the two stores a job uses:
//   tcp   `cohort run -n 64`: rank 0 hosts the store at COHORT_RENDEZVOUS=tcp://...
//   head  a 64-task job on a local cluster: the head's per-job store (HTTP)
// Each rank is a real process (this program again, with RANK set): it opens the store
// from its environment, publishes its address and waits for every other rank's. Timed
// from the launch to the last rank done, so process start-up is included.
#include <cstdio>
#include <cstdlib>

#include "bench_cluster.h"
#include "comm/launch_env.h"
#include "comm/store.h"
#include "common/clock.h"

using namespace cohort;

namespace {

int RankMain() {
  auto env = comm::DetectLaunchEnv();
  if (!env) {
    std::fprintf(stderr, "rank: %s\n", env.error().message.c_str());
    return 2;
  }
  auto store = comm::OpenStore(env->store_url, env->hosts_store(), Millis(30000));
  if (!store) {
    std::fprintf(stderr, "rank %d: %s\n", env->rank, store.error().message.c_str());
    return 1;
  }
  if (auto r = (*store)->Set(fmt::format("addr/{}", env->rank), fmt::format("127.0.0.1:{}", 30000 + env->rank)); !r) {
    std::fprintf(stderr, "rank %d: %s\n", env->rank, r.error().message.c_str());
    return 1;
  }
  std::vector<std::string> keys;
  for (int r = 0; r < env->world_size; ++r) keys.push_back(fmt::format("addr/{}", r));
  if (auto r = (*store)->Wait(keys, Millis(30000)); !r) {
    std::fprintf(stderr, "rank %d: %s\n", env->rank, r.error().message.c_str());
    return 1;
  }
  // Rank 0 hosts the tcp store: it leaves only after everyone has read everything.
  auto done = (*store)->Add("done", 1);
  if (env->hosts_store()) {
    while (done && *done < env->world_size) done = (*store)->Add("done", 0);
  }
  return done ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RANK")) return RankMain();
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 64;
  std::string self = SelfExePath();

  // tcp: cohort run -n N
  auto t0 = SteadyClock::now();
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "run", "-n", std::to_string(ranks), "--", self};
  auto p = Subprocess::Spawn(o);
  if (!p) bench::BenchCluster::Die(p.error().message);
  auto st = p->Wait();
  double tcp_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  if (!st || !st->Success()) bench::BenchCluster::Die("cohort run rendezvous failed");

  // head: one node, one job of N tasks.
  bench::BenchCluster c;
  c.StartHead();
  c.StartAgent("node-1", 0);
  c.WaitForNodes(1);
  HttpClient client = c.Client();
  auto job = client.Post("/v1/jobs", json{{"command", {self}}, {"tasks_per_node", ranks}, {"cpus_per_task", 0}});
  if (!job) bench::BenchCluster::Die(job.error().message);
  int64_t id = (*job)["id"];
  json done;
  for (int i = 0; i < 6000; ++i) {
    auto r = client.Get(fmt::format("/v1/jobs/{}", id));
    std::string s = r ? r->value("state", "") : "";
    if (s == "SUCCEEDED" || s == "FAILED" || s == "CANCELLED") {
      done = *r;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done.value("state", "") != "SUCCEEDED") bench::BenchCluster::Die("head rendezvous job did not succeed: " + done.dump());
  double head_s = (done["end_ms"].get<int64_t>() - done["start_ms"].get<int64_t>()) / 1000.0;

  std::printf("rendezvous of %d local ranks (processes; launch to last rank done)\n", ranks);
  std::printf("  tcp store (cohort run, rank 0 hosts):   %6.3f s   target < 2 s   %s\n", tcp_s, tcp_s < 2 ? "OK" : "MISSED");
  std::printf("  head store (a %d-task Cohort job):      %6.3f s   target < 2 s   %s\n", ranks, head_s, head_s < 2 ? "OK" : "MISSED");
  return 0;
}
