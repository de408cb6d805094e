// Preemption in device detail over random traces: a cluster of h100 nodes in NVLink
// islands of four and a100 nodes without topology under two switches; teams with random
// quotas and borrow limits; jobs of random kinds (plain, typed, sharing a quarter or half
// a GPU or 30 GiB of one, 4 connected GPUs required or preferred, gangs of two whole nodes
// under one switch required or preferred), priorities and lengths; a simulated minute
// between passes (trace_sim.h). Victims stop one minute after they are asked and go back
// to the queue, as the head requeues them. After every pass:
//   - no preemption cycle, no victim within the minimum runtime, none asked twice;
//   - no team holds more GPUs than its quota + borrow limit, counting the parts of GPUs
//     its sharing jobs hold (quarters, halves, and the units a memory-only slice takes);
//   - victims always let the preemptor start: the snapshot of the pass without them
//     places it (FitDetailedGang and all), and a nominated job whose victims have all
//     stopped starts in the next pass (the nodes being freed wait for it).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "detail_cluster.h"
#include "sched/gpu_units.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"
#include "trace_sim.h"

namespace cohort::sched {
namespace {

using namespace testing;  // NOLINT: test builders

constexpr int64_t kMinute = 60'000;

std::vector<DetailNode> Nodes() {
  std::vector<DetailNode> nodes;
  for (int n = 0; n < 6; ++n) {
    DetailNode d;
    d.id = "n" + std::to_string(n);
    d.devices = n < 4 ? Devs(8, "h100", 4) : Devs(8, "a100");
    d.network_switch = n < 3 ? "s1" : "s2";
    nodes.push_back(std::move(d));
  }
  return nodes;
}

int RunTrace(uint64_t seed, std::map<std::string, int>* kinds) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const std::vector<DetailNode> nodes = Nodes();

  std::vector<TeamView> teams;
  const int nteams = static_cast<int>(uniform(2, 3));
  for (int t = 0; t < nteams; ++t) {
    TeamView v;
    v.name = "t" + std::to_string(t);
    v.quota_gpus = uniform(0, 20);
    v.borrow_limit_gpus = uniform(0, 2) == 0 ? -1 : uniform(0, 24);
    teams.push_back(v);
  }
  const auto limit_of = [&](const TeamView& t) {
    return t.borrow_limit_gpus < 0 ? std::numeric_limits<int64_t>::max()
                                   : UnitsOfGpus(t.quota_gpus + t.borrow_limit_gpus);
  };
  const int64_t min_runtime = uniform(0, 2) * 5 * kMinute;

  TraceSim sim(nodes);
  std::vector<JobRequest>& pending = sim.pending();
  std::vector<TraceSim::Live>& running = sim.running();
  std::set<std::pair<int64_t, int64_t>> preempted;
  struct Nominee {
    int64_t since = 0;
    std::vector<std::string> nodes;
    std::set<int64_t> victims;
  };
  std::map<int64_t, Nominee> nominated;
  int64_t next_id = 1;
  int preemptions = 0;

  for (int step = 0; step < 150; ++step) {
    const int64_t now = step * kMinute;
    for (int64_t k = uniform(0, 3); k > 0; --k) {
      JobRequest j;
      j.id = next_id++;
      j.team = teams[static_cast<size_t>(uniform(0, nteams - 1))].name;
      j.priority = static_cast<int>(uniform(0, 2));
      j.submit_ms = now;
      j.cpus_per_task = 1;
      switch (uniform(0, 8)) {
        case 0: j.gpus_per_node = static_cast<int>(uniform(1, 2)); break;
        case 1: j.gpus_per_node = 4; break;  // connected preferred
        case 2: j.gpus_per_node = 4, j.gpu_type = "h100", j.topology_required = true; break;
        case 3: j.gpus_per_node = 2, j.gpu_type = "a100"; break;
        case 4: j.gpu_share = 2, j.gpu_type = uniform(0, 1) ? "h100" : ""; break;
        case 5: j.gpu_share = 1, j.tasks_per_node = 2; break;
        case 8: j.gpu_memory_mib = 30 * 1024, j.gpu_type = uniform(0, 1) ? "h100" : ""; break;  // 2 units
        case 6: j.nodes = 2, j.gpus_per_node = 8, j.topology_required = uniform(0, 1) == 1; break;
        default: j.gpus_per_node = 8, j.gpu_type = "h100"; break;
      }
      sim.Submit(j, uniform(5, 90) * kMinute);
    }
    sim.Step(now);
    std::erase_if(nominated, [&](const auto& n) { return now - n.second.since > 5 * kMinute; });
    // Nominated jobs whose victims have all stopped now: they must start in this pass.
    std::set<int64_t> due;
    for (const auto& [id, n] : nominated) {
      const bool gone = std::none_of(running.begin(), running.end(), [&](const TraceSim::Live& l) {
        return n.victims.contains(l.job.id);
      });
      if (gone) due.insert(id);
    }

    for (JobRequest& j : pending) {
      auto n = nominated.find(j.id);
      j.nominated = n != nominated.end();
      j.nominated_nodes = j.nominated ? n->second.nodes : std::vector<std::string>{};
    }
    Snapshot snap = sim.SnapshotAt(now);
    snap.shares.emplace();
    snap.shares->teams = teams;
    snap.shares->preemption.min_runtime_ms = min_runtime;
    const Decision d = Schedule(snap);

    std::map<int64_t, std::vector<int64_t>> victims_of;
    for (const Preemption& p : d.preempt) {
      ++preemptions;
      auto victim = std::find_if(running.begin(), running.end(),
                                 [&](const TraceSim::Live& l) { return l.job.id == p.victim; });
      if (victim == running.end()) {
        ADD_FAILURE() << "victim " << p.victim << " is not running";
        return preemptions;
      }
      const JobRequest& by =
          *std::find_if(pending.begin(), pending.end(), [&](const JobRequest& j) { return j.id == p.preemptor; });
      ++(*kinds)[by.gpu_share > 0 || by.gpu_memory_mib > 0 ? "sharing" : by.nodes > 1 ? "gang" : by.topology_required ? "topology" : !by.gpu_type.empty() ? "typed" : "plain"];
      EXPECT_EQ(victim->preempting_for, 0) << "job " << p.victim << " asked twice";
      EXPECT_GE(now - victim->start_ms, min_runtime) << "job " << p.victim << " preempted within its minimum runtime";
      EXPECT_FALSE(preempted.contains({p.victim, p.preemptor}))
          << "cycle: job " << p.victim << " preempted job " << p.preemptor << " before";
      EXPECT_FALSE(victims_of.contains(p.preemptor) ? false : nominated.contains(p.preemptor))
          << "a nominated job preempted again";
      preempted.insert({p.preemptor, p.victim});
      victim->preempting_for = p.preemptor;
      victims_of[p.preemptor].push_back(p.victim);
      Nominee& n = nominated[p.preemptor];
      n.since = now;
      n.nodes = p.nodes;
      n.victims.insert(p.victim);
    }
    // Once its victims are gone, each preemptor fits where the scheduler would place it.
    for (const auto& [job, victims] : victims_of) {
      Snapshot after = WithoutJobs(snap, nodes, victims);
      after.shares.reset();
      after.pending = {*std::find_if(pending.begin(), pending.end(), [&](const JobRequest& j) { return j.id == job; })};
      after.pending[0].nominated = false;
      const Decision next = Schedule(after);
      EXPECT_NE(Where(next, job), "") << "job " << job << "'s victims would not let it start: " << Reason(next, job);
    }
    for (const JobPlacement& p : d.start) {
      due.erase(p.job_id);
      nominated.erase(p.job_id);
    }
    if (!sim.Start(d, now)) return preemptions;
    for (int64_t id : due) {
      ADD_FAILURE() << "nominated job " << id << " did not start once its victims stopped: " << Reason(d, id);
    }
    const std::map<std::string, int64_t> used = sim.UnitsByTeam();
    for (const TeamView& t : teams) {
      const auto u = used.find(t.name);
      EXPECT_LE(u == used.end() ? 0 : u->second, limit_of(t)) << "team " << t.name << " over quota + borrow at minute "
                                                               << step;
    }
    if (::testing::Test::HasFailure()) return preemptions;
  }
  return preemptions;
}

TEST(PreemptDetailProperty, RandomTypedSharingAndTopologyTracesLetEveryPreemptorStart) {
  std::map<std::string, int> kinds;
  int preemptions = 0;
  for (uint64_t seed = 1; seed <= 60 && !::testing::Test::HasFailure(); ++seed) preemptions += RunTrace(seed, &kinds);
  std::printf("%d preemptions:", preemptions);
  for (const auto& [k, n] : kinds) std::printf(" %s %d", k.c_str(), n);
  std::printf("\n");
  // Every kind of preemptor must have preempted, or the checks above prove little.
  for (const char* k : {"plain", "typed", "topology", "sharing", "gang"}) EXPECT_GT(kinds[k], 5) << k;
}

}  // namespace
}  // namespace cohort::sched
