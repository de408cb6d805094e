#include "sched/preempt.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string_view>
#include <tuple>
#include <unordered_map>

namespace cohort::sched {

namespace {

int64_t GpusOf(const RunningJob& job) {
  int64_t gpus = 0;
  for (const Usage& u : job.usage) gpus += u.gpus;
  return gpus;
}

// What one node would give the gang: the victims to stop there, and what they cost.
struct NodeChoice {
  int node = 0;
  int max_priority = std::numeric_limits<int>::min();  // of its victims; min() when none
  double work = 0;
  std::vector<int> victims;  // running indices
};

}  // namespace

double WorkAtRiskGpuSeconds(const RunningJob& job, int64_t now_ms) {
  const int64_t since = std::max(job.start_ms, job.checkpoint_ms);
  return static_cast<double>(std::max<int64_t>(0, now_ms - since)) / 1000.0 * static_cast<double>(GpusOf(job));
}

PreemptionPlanner::PreemptionPlanner(const Snapshot& snapshot, const NodePool& pool)
    : snapshot_(snapshot), pool_(pool), held_(snapshot.shares->teams, snapshot.running) {
  std::unordered_map<std::string_view, int> index;
  index.reserve(snapshot.nodes.size());
  for (size_t i = 0; i < snapshot.nodes.size(); ++i) index.emplace(snapshot.nodes[i].id, static_cast<int>(i));
  on_node_.resize(static_cast<size_t>(pool.size()));
  gpus_of_.resize(snapshot.running.size());
  taken_.assign(snapshot.running.size(), false);
  for (size_t r = 0; r < snapshot.running.size(); ++r) {
    const RunningJob& job = snapshot.running[r];
    gpus_of_[r] = GpusOf(job);
    for (const Usage& u : job.usage) {
      if (auto it = index.find(u.node); it != index.end()) {
        on_node_[static_cast<size_t>(it->second)].emplace_back(static_cast<int>(r), u);
      }
    }
  }
}

bool PreemptionPlanner::Cheaper(const Candidate& a, const Candidate& b) const {
  const RunningJob& x = snapshot_.running[static_cast<size_t>(a.running)];
  const RunningJob& y = snapshot_.running[static_cast<size_t>(b.running)];
  return std::tuple(x.priority, a.work, -x.start_ms, x.id) < std::tuple(y.priority, b.work, -y.start_ms, y.id);
}

std::optional<std::vector<Preemption>> PreemptionPlanner::Plan(const JobRequest& job, const GangDemand& demand,
                                                               int64_t gpus, const QuotaBook& quotas,
                                                               std::string* why) const {
  const PreemptionPolicy& policy = snapshot_.shares->preemption;
  const int64_t now = snapshot_.now_ms;
  const std::string& team = job.team;
  const bool may_reclaim = quotas.WithinQuota(team, gpus);
  // What a team holds once the victims promised earlier in the pass are gone.
  const auto held = [&](const std::string& t) {
    auto it = released_.find(t);
    return held_.used(t) - (it == released_.end() ? 0 : it->second);
  };

  // Every running job that may give way to this one.
  std::vector<std::optional<Candidate>> candidate(snapshot_.running.size());
  bool any = false;
  for (size_t r = 0; r < snapshot_.running.size(); ++r) {
    const RunningJob& rj = snapshot_.running[r];
    if (taken_[r] || !rj.preemptible || now - rj.start_ms < policy.min_runtime_ms) continue;
    if (std::find(job.preempted_by.begin(), job.preempted_by.end(), rj.id) != job.preempted_by.end()) continue;
    PreemptKind kind;
    if (rj.team == team) {
      if (rj.priority >= job.priority) continue;
      kind = PreemptKind::kPriority;
    } else {
      if (!may_reclaim || held(rj.team) <= quotas.quota(rj.team)) continue;
      kind = PreemptKind::kReclaim;
    }
    candidate[r] = Candidate{static_cast<int>(r), kind, WorkAtRiskGpuSeconds(rj, now)};
    any = true;
  }
  if (!any) {
    *why = "no running job may be preempted for it";
    return std::nullopt;
  }

  // For each node, the cheapest victims that make room for one member of the gang.
  std::vector<NodeChoice> usable;
  std::vector<Candidate> here;
  for (int n = 0; n < pool_.size(); ++n) {
    if (!pool_.schedulable(n) || pool_.capacity_gpus(n) < demand.gpus || pool_.capacity_cpus(n) < demand.cpus) continue;
    int64_t free_gpus = static_cast<int64_t>(pool_.free_gpus(n).size());
    int64_t free_cpus = pool_.free_cpus(n);
    NodeChoice choice;
    choice.node = n;
    if (free_gpus < demand.gpus || free_cpus < demand.cpus) {
      here.clear();
      for (const auto& [r, use] : on_node_[static_cast<size_t>(n)]) {
        if (candidate[static_cast<size_t>(r)]) here.push_back(*candidate[static_cast<size_t>(r)]);
      }
      std::sort(here.begin(), here.end(), [&](const Candidate& a, const Candidate& b) { return Cheaper(a, b); });
      for (const Candidate& c : here) {
        if (free_gpus >= demand.gpus && free_cpus >= demand.cpus) break;
        for (const auto& [r, use] : on_node_[static_cast<size_t>(n)]) {
          if (r != c.running) continue;
          free_gpus += use.gpus;
          free_cpus += use.cpus;
        }
        choice.victims.push_back(c.running);
        choice.work += c.work;
        choice.max_priority = std::max(choice.max_priority, snapshot_.running[static_cast<size_t>(c.running)].priority);
      }
      if (free_gpus < demand.gpus || free_cpus < demand.cpus) continue;
    }
    usable.push_back(std::move(choice));
  }
  if (static_cast<int>(usable.size()) < demand.nodes) {
    *why = fmt::format("preempting every candidate would free only {} of the {} nodes it needs", usable.size(),
                       demand.nodes);
    return std::nullopt;
  }
  const auto key = [](const NodeChoice& c) {
    return std::tuple(c.max_priority, c.work, c.victims.size(), c.node);
  };
  std::partial_sort(usable.begin(), usable.begin() + demand.nodes, usable.end(),
                    [&](const NodeChoice& a, const NodeChoice& b) { return key(a) < key(b); });
  std::vector<Candidate> victims;
  for (int k = 0; k < demand.nodes; ++k) {
    for (int r : usable[static_cast<size_t>(k)].victims) {
      const bool seen = std::any_of(victims.begin(), victims.end(), [&](const Candidate& c) { return c.running == r; });
      if (!seen) victims.push_back(*candidate[static_cast<size_t>(r)]);
    }
  }
  if (victims.empty()) {
    *why = "it fits without preemption on nodes it may not use now";
    return std::nullopt;
  }
  std::sort(victims.begin(), victims.end(), [&](const Candidate& a, const Candidate& b) { return Cheaper(a, b); });

  // No team is pushed below its quota; the preemptor's team stays within its own.
  std::map<std::string, int64_t, std::less<>> removed;
  bool reclaims = false;
  for (const Candidate& c : victims) {
    const RunningJob& rj = snapshot_.running[static_cast<size_t>(c.running)];
    if (c.kind == PreemptKind::kReclaim) {
      reclaims = true;
      if (held(rj.team) - removed[rj.team] <= quotas.quota(rj.team)) {
        *why = fmt::format("reclaiming would push team {} below its quota of {} GPUs", rj.team,
                           quotas.quota(rj.team));
        return std::nullopt;
      }
    }
    removed[rj.team] += gpus_of_[static_cast<size_t>(c.running)];
  }
  const int64_t team_after = quotas.used(team) - removed[team] + gpus;
  if (reclaims && team_after > quotas.quota(team)) {
    *why = fmt::format("team {} would exceed its quota of {} GPUs", team, quotas.quota(team));
    return std::nullopt;
  }
  if (quotas.limit(team) != std::numeric_limits<int64_t>::max() && team_after > quotas.limit(team)) {
    *why = quotas.LimitReason(team, gpus);
    return std::nullopt;
  }

  std::vector<Preemption> plan;
  plan.reserve(victims.size());
  for (const Candidate& c : victims) {
    const RunningJob& rj = snapshot_.running[static_cast<size_t>(c.running)];
    Preemption p;
    p.victim = rj.id;
    p.preemptor = job.id;
    p.kind = c.kind;
    p.work_at_risk_gpu_s = c.work;
    if (c.kind == PreemptKind::kReclaim) {
      p.reason = fmt::format(
          "reclaim: job {} of team {} needs {} GPUs within the team's quota of {} ({} in use); team {} borrows {} "
          "beyond its quota of {}",
          job.id, team, gpus, quotas.quota(team), quotas.used(team), rj.team,
          quotas.used(rj.team) - quotas.quota(rj.team), quotas.quota(rj.team));
    } else {
      p.reason = fmt::format("priority: job {} of team {} has priority {}, above this job's {}", job.id, team,
                             job.priority, rj.priority);
    }
    plan.push_back(std::move(p));
  }
  return plan;
}

void PreemptionPlanner::Commit(const std::vector<Preemption>& plan) {
  for (const Preemption& p : plan) {
    for (size_t r = 0; r < snapshot_.running.size(); ++r) {
      if (snapshot_.running[r].id != p.victim || taken_[r]) continue;
      taken_[r] = true;
      released_[snapshot_.running[r].team] += gpus_of_[r];
    }
  }
}

}  // namespace cohort::sched
