// Preemption over random traces: teams with random quotas, borrow limits and weights,
// jobs of random shapes (whole GPUs, gangs of two nodes, and jobs sharing GPUs in quarters),
// priorities and lengths arriving at random, and a simulated minute between passes
// (trace_sim.h). Victims stop one minute after they are asked (their checkpoint) and go
// back to the queue, as the head requeues them. After every pass:
//   - no preemption cycle: no two jobs ever preempt each other (in either order);
//   - no victim had run less than the minimum runtime;
//   - no team holds more than its quota + borrow limit, counting the parts of GPUs its
//     sharing jobs hold; one above its quota borrows only what its limit allows;
//   - every reclaim took GPUs from a team above its quota, for a job within its own;
//     every priority preemption took a lower-priority job of the preemptor's team;
//   - a job is never asked twice while it is being preempted.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "sched/gpu_units.h"
#include "sched/scheduler.h"
#include "trace_sim.h"

namespace cohort::sched {
namespace {

using testing::TraceSim;

constexpr int64_t kMinute = 60'000;
constexpr int kNodes = 6;

struct Counts {
  int reclaims = 0, by_priority = 0;
  int sharing_victims = 0;  // reclaims whose victim shares GPUs
  int sharing_reclaimers = 0;  // reclaims for a job that shares GPUs
};

// Runs one trace; returns the preemptions it saw.
int RunTrace(uint64_t seed, Counts* counts) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };

  std::vector<TeamView> teams;
  const int nteams = static_cast<int>(uniform(2, 4));
  for (int t = 0; t < nteams; ++t) {
    TeamView v;
    v.name = "t" + std::to_string(t);
    v.weight = uniform(1, 3);
    v.quota_gpus = uniform(0, 16);
    v.borrow_limit_gpus = uniform(0, 2) == 0 ? -1 : uniform(0, 24);
    teams.push_back(v);
  }
  const auto team_of = [&](const std::string& name) -> const TeamView& {
    return *std::find_if(teams.begin(), teams.end(), [&](const TeamView& v) { return v.name == name; });
  };
  const auto limit_of = [&](const TeamView& t) {
    return t.borrow_limit_gpus < 0 ? std::numeric_limits<int64_t>::max()
                                   : UnitsOfGpus(t.quota_gpus + t.borrow_limit_gpus);
  };
  const int64_t min_runtime = uniform(0, 3) * 5 * kMinute;

  std::vector<testing::DetailNode> nodes;
  for (int n = 0; n < kNodes; ++n) nodes.push_back({"n" + std::to_string(n), testing::Devs(8, "h100")});
  TraceSim sim(std::move(nodes));
  std::set<std::pair<int64_t, int64_t>> preempted;  // (preemptor, victim)
  std::map<int64_t, int64_t> nominated;             // job -> since
  int64_t next_id = 1;
  int preemptions = 0;

  for (int step = 0; step < 240; ++step) {
    const int64_t now = step * kMinute;
    // Arrivals.
    for (int64_t k = uniform(0, 3); k > 0; --k) {
      JobRequest j;
      j.id = next_id++;
      j.team = teams[static_cast<size_t>(uniform(0, nteams - 1))].name;
      j.priority = static_cast<int>(uniform(0, 2));
      j.submit_ms = now;
      j.tasks_per_node = 1;
      j.cpus_per_task = 1;
      const int64_t shape = uniform(0, 6);
      if (shape >= 5) {  // a quarter, half or three quarters of a GPU for one or two tasks
        j.gpu_share = static_cast<int>(uniform(1, 3));
        j.tasks_per_node = static_cast<int>(uniform(1, 2));
      } else {
        j.nodes = shape == 4 ? 2 : 1;
        j.gpus_per_node = shape == 4 ? 8 : (1 << shape);
      }
      sim.Submit(j, uniform(5, 120) * kMinute);
    }
    // Ends, and the victims asked a step ago stop and go back to the queue.
    sim.Step(now);
    std::erase_if(nominated, [&](const auto& n) { return now - n.second > 5 * kMinute; });

    for (JobRequest& j : sim.pending()) j.nominated = nominated.contains(j.id);
    Snapshot snap = sim.SnapshotAt(now);
    snap.shares.emplace();
    snap.shares->teams = teams;
    snap.shares->preemption.min_runtime_ms = min_runtime;
    const std::map<std::string, int64_t> before = sim.UnitsByTeam();  // as the pass began
    const auto used_before = [&](const std::string& team) {
      auto it = before.find(team);
      return it == before.end() ? 0 : it->second;
    };
    const Decision d = Schedule(snap);

    // Preemptions. A pass's victims come in the order they were chosen: a team's units
    // reclaimed so far this pass no longer count as borrowed.
    std::map<std::string, int64_t> removed;  // by victim team, this pass
    std::map<int64_t, int64_t> own_removed;  // by preemptor: its own team's victims
    std::map<int64_t, int64_t> held;         // running job -> units
    for (const TraceSim::Live& l : sim.running()) held[l.job.id] = TraceSim::Units(l);
    for (const Preemption& p : d.preempt) {
      if (p.kind == PreemptKind::kPriority) own_removed[p.preemptor] += held[p.victim];
    }
    for (const Preemption& p : d.preempt) {
      ++preemptions;
      ++(p.kind == PreemptKind::kReclaim ? counts->reclaims : counts->by_priority);
      const JobRequest& by = *std::find_if(sim.pending().begin(), sim.pending().end(),
                                           [&](const JobRequest& j) { return j.id == p.preemptor; });
      TraceSim::Live* victim = nullptr;
      for (TraceSim::Live& l : sim.running()) {
        if (l.job.id == p.victim) victim = &l;
      }
      if (!victim) {
        ADD_FAILURE() << "victim " << p.victim << " is not running";
        return preemptions;
      }
      EXPECT_EQ(victim->preempting_for, 0) << "job " << p.victim << " asked twice";
      EXPECT_GE(now - victim->start_ms, min_runtime) << "job " << p.victim << " preempted within its minimum runtime";
      EXPECT_FALSE(preempted.contains({p.victim, p.preemptor}))
          << "cycle: job " << p.victim << " preempted job " << p.preemptor << " before, and now the reverse";
      preempted.insert({p.preemptor, p.victim});
      if (p.kind == PreemptKind::kReclaim) {
        counts->sharing_victims += victim->job.gpu_share > 0;
        counts->sharing_reclaimers += by.gpu_share > 0;
        EXPECT_NE(victim->job.team, by.team);
        EXPECT_GT(used_before(victim->job.team) - removed[victim->job.team],
                  UnitsOfGpus(team_of(victim->job.team).quota_gpus))
            << "reclaimed from team " << victim->job.team << " within quota";
        const int64_t asked = by.gpu_share > 0 ? int64_t{by.nodes} * by.tasks_per_node * by.gpu_share
                                               : UnitsOfGpus(int64_t{by.nodes} * by.gpus_per_node);
        EXPECT_LE(used_before(by.team) - own_removed[by.id] + asked, UnitsOfGpus(team_of(by.team).quota_gpus))
            << "reclaim for a job that would borrow";
      } else {
        EXPECT_EQ(victim->job.team, by.team);
        EXPECT_LT(victim->job.priority, by.priority);
      }
      removed[victim->job.team] += held[p.victim];
      sim.Ask(p.victim, p.preemptor);
      nominated.try_emplace(p.preemptor, now);
    }
    // Starts.
    for (const JobPlacement& p : d.start) nominated.erase(p.job_id);
    if (!sim.Start(d, now)) return preemptions;
    // Quotas: no team above quota + borrow limit, counting parts of GPUs.
    const std::map<std::string, int64_t> used = sim.UnitsByTeam();
    for (const TeamView& t : teams) {
      const auto u = used.find(t.name);
      EXPECT_LE(u == used.end() ? 0 : u->second, limit_of(t))
          << "team " << t.name << " over quota " << t.quota_gpus << " + borrow " << t.borrow_limit_gpus
          << " GPUs (in quarters) at minute " << step;
    }
    if (::testing::Test::HasFailure()) return preemptions;
  }
  return preemptions;
}

TEST(PreemptProperty, RandomTracesKeepQuotasAndNeverCycle) {
  int traces = 0, preemptions = 0;
  Counts c;
  for (uint64_t seed = 1; seed <= 150 && !::testing::Test::HasFailure(); ++seed) {
    preemptions += RunTrace(seed, &c);
    ++traces;
  }
  EXPECT_EQ(traces, 150);
  std::printf("%d traces, %d preemptions (%d reclaims: %d of sharing jobs, %d for sharing jobs; %d by priority)\n",
              traces, preemptions, c.reclaims, c.sharing_victims, c.sharing_reclaimers, c.by_priority);
  // The traces must exercise both kinds, and reclaim of and for sharing jobs, or the
  // checks above prove nothing.
  EXPECT_GT(c.reclaims, 100);
  EXPECT_GT(c.by_priority, 100);
  EXPECT_GT(c.sharing_victims, 20);
  EXPECT_GT(c.sharing_reclaimers, 20);
}

}  // namespace
}  // namespace cohort::sched
