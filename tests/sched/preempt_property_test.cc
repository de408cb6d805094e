// Preemption over random traces: teams with random quotas, borrow limits and weights,
// jobs of random shapes, priorities and lengths arriving at random, and a simulated
// minute between passes. Victims stop one minute after they are asked (their checkpoint)
// and go back to the queue, as the head requeues them. After every pass:
//   - no preemption cycle: no two jobs ever preempt each other (in either order);
//   - no victim had run less than the minimum runtime;
//   - no team holds more than its quota + borrow limit; one above its quota borrows
//     only what its limit allows;
//   - every reclaim took GPUs from a team above its quota, for a job within its own;
//     every priority preemption took a lower-priority job of the preemptor's team;
//   - a job is never asked twice while it is being preempted.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "sched/fair_share.h"
#include "sched/quota.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace cohort::sched {
namespace {

constexpr int64_t kMinute = 60'000;
constexpr int kNodes = 6;

struct Live {
  JobRequest job;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  std::vector<NodeAssignment> where;
  int64_t preempting_for = 0;  // being preempted (stops at the next step)
};

// Runs one trace; returns the preemptions it saw (kinds counted in `reclaims`/`priority`).
int RunTrace(uint64_t seed, int* reclaims, int* by_priority) {
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
    return t.borrow_limit_gpus < 0 ? std::numeric_limits<int64_t>::max() : t.quota_gpus + t.borrow_limit_gpus;
  };
  const int64_t min_runtime = uniform(0, 3) * 5 * kMinute;

  std::vector<std::vector<bool>> busy(kNodes, std::vector<bool>(8, false));
  std::vector<JobRequest> pending;
  std::vector<Live> running;
  std::map<int64_t, int64_t> length;
  std::set<std::pair<int64_t, int64_t>> preempted;  // (preemptor, victim)
  std::map<int64_t, int64_t> nominated;             // job -> since
  int64_t next_id = 1;
  int preemptions = 0;

  const auto release = [&](const Live& l) {
    for (const auto& a : l.where) {
      for (int g : a.gpus) busy[static_cast<size_t>(a.node[1] - '0')][static_cast<size_t>(g)] = false;
    }
  };

  for (int step = 0; step < 240; ++step) {
    const int64_t now = step * kMinute;
    // Arrivals.
    for (int64_t k = uniform(0, 3); k > 0; --k) {
      JobRequest j;
      j.id = next_id++;
      j.team = teams[static_cast<size_t>(uniform(0, nteams - 1))].name;
      j.priority = static_cast<int>(uniform(0, 2));
      j.submit_ms = now;
      const int64_t shape = uniform(0, 4);
      j.nodes = shape == 4 ? 2 : 1;
      j.gpus_per_node = shape == 4 ? 8 : (1 << shape);
      j.tasks_per_node = 1;
      j.cpus_per_task = 1;
      length[j.id] = uniform(5, 120) * kMinute;
      pending.push_back(j);
    }
    // Ends, and the victims asked a step ago stop and go back to the queue.
    for (auto it = running.begin(); it != running.end();) {
      if (it->preempting_for != 0) {
        release(*it);
        JobRequest back = it->job;
        back.preempted_by.push_back(it->preempting_for);
        pending.push_back(back);
        it = running.erase(it);
      } else if (it->end_ms <= now) {
        release(*it);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    std::erase_if(nominated, [&](const auto& n) { return now - n.second > 5 * kMinute; });

    Snapshot snap;
    snap.now_ms = now;
    for (int n = 0; n < kNodes; ++n) {
      std::vector<int> free;
      for (int g = 0; g < 8; ++g) {
        if (!busy[static_cast<size_t>(n)][static_cast<size_t>(g)]) free.push_back(g);
      }
      snap.nodes.push_back(testing::Node("n" + std::to_string(n), 8, free, 64, 64));
    }
    for (const Live& l : running) {
      RunningJob r;
      r.id = l.job.id;
      for (const auto& a : l.where) r.usage.push_back({a.node, static_cast<int>(a.gpus.size()), a.cpus});
      r.team = l.job.team;
      r.priority = l.job.priority;
      r.start_ms = l.start_ms;
      r.checkpoint_ms = l.start_ms + (now - l.start_ms) / 2;
      r.preemptible = l.preempting_for == 0;
      r.preempting_for = l.preempting_for;
      snap.running.push_back(r);
    }
    for (JobRequest& j : pending) j.nominated = nominated.contains(j.id);
    snap.pending = pending;
    snap.shares.emplace();
    snap.shares->teams = teams;
    snap.shares->preemption.min_runtime_ms = min_runtime;
    const QuotaBook before(teams, snap.running);
    const Decision d = Schedule(snap);

    // Preemptions. A pass's victims come in the order they were chosen: a team's GPUs
    // reclaimed so far this pass no longer count as borrowed.
    std::map<std::string, int64_t> removed;             // by victim team, this pass
    std::map<int64_t, int64_t> own_removed;             // by preemptor: its own team's victims
    for (const Preemption& p : d.preempt) {
      for (const Live& l : running) {
        if (l.job.id == p.victim && p.kind == PreemptKind::kPriority) own_removed[p.preemptor] += RequestedGpus(l.job);
      }
    }
    for (const Preemption& p : d.preempt) {
      ++preemptions;
      ++*(p.kind == PreemptKind::kReclaim ? reclaims : by_priority);
      auto victim = std::find_if(running.begin(), running.end(), [&](const Live& l) { return l.job.id == p.victim; });
      if (victim == running.end()) {
        ADD_FAILURE() << "victim " << p.victim << " is not running";
        return preemptions;
      }
      const JobRequest& by =
          *std::find_if(pending.begin(), pending.end(), [&](const JobRequest& j) { return j.id == p.preemptor; });
      EXPECT_EQ(victim->preempting_for, 0) << "job " << p.victim << " asked twice";
      EXPECT_GE(now - victim->start_ms, min_runtime) << "job " << p.victim << " preempted within its minimum runtime";
      EXPECT_FALSE(preempted.contains({p.victim, p.preemptor}))
          << "cycle: job " << p.victim << " preempted job " << p.preemptor << " before, and now the reverse";
      preempted.insert({p.preemptor, p.victim});
      if (p.kind == PreemptKind::kReclaim) {
        EXPECT_NE(victim->job.team, by.team);
        EXPECT_GT(before.used(victim->job.team) - removed[victim->job.team], before.quota(victim->job.team))
            << "reclaimed from team " << victim->job.team << " within quota";
        EXPECT_LE(before.used(by.team) - own_removed[by.id] + RequestedGpus(by), team_of(by.team).quota_gpus)
            << "reclaim for a job that would borrow";
      } else {
        EXPECT_EQ(victim->job.team, by.team);
        EXPECT_LT(victim->job.priority, by.priority);
      }
      removed[victim->job.team] += RequestedGpus(victim->job);
      victim->preempting_for = p.preemptor;
      nominated.try_emplace(p.preemptor, now);
    }
    // Starts.
    for (const JobPlacement& p : d.start) {
      auto it = std::find_if(pending.begin(), pending.end(), [&](const JobRequest& j) { return j.id == p.job_id; });
      if (it == pending.end()) {
        ADD_FAILURE() << "started job " << p.job_id << " is not pending";
        return preemptions;
      }
      Live l;
      l.job = *it;
      l.start_ms = now;
      l.end_ms = now + length.at(p.job_id);
      l.where = p.nodes;
      for (const auto& a : p.nodes) {
        for (int g : a.gpus) {
          auto slot = busy[static_cast<size_t>(a.node[1] - '0')][static_cast<size_t>(g)];
          EXPECT_FALSE(slot) << "GPU " << a.node << ":" << g << " given twice";
          slot = true;
        }
      }
      nominated.erase(p.job_id);
      pending.erase(it);
      running.push_back(std::move(l));
    }
    // Quotas: no team above quota + borrow limit.
    std::map<std::string, int64_t> used;
    for (const Live& l : running) {
      for (const auto& a : l.where) used[l.job.team] += static_cast<int64_t>(a.gpus.size());
    }
    for (const TeamView& t : teams) {
      EXPECT_LE(used[t.name], limit_of(t)) << "team " << t.name << " over quota " << t.quota_gpus << " + borrow "
                                           << t.borrow_limit_gpus << " at minute " << step;
    }
    if (::testing::Test::HasFailure()) return preemptions;
  }
  return preemptions;
}

TEST(PreemptProperty, RandomTracesKeepQuotasAndNeverCycle) {
  int traces = 0, preemptions = 0, reclaims = 0, by_priority = 0;
  for (uint64_t seed = 1; seed <= 150 && !::testing::Test::HasFailure(); ++seed) {
    preemptions += RunTrace(seed, &reclaims, &by_priority);
    ++traces;
  }
  EXPECT_EQ(traces, 150);
  std::printf("%d traces, %d preemptions (%d reclaims, %d by priority)\n", traces, preemptions, reclaims, by_priority);
  // The traces must exercise both kinds, or the checks above prove nothing.
  EXPECT_GT(reclaims, 100);
  EXPECT_GT(by_priority, 100);
}

}  // namespace
}  // namespace cohort::sched
