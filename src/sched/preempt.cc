#include "sched/preempt.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>
#include <iterator>
#include <map>
#include <unordered_map>

#include "sched/gpu_fit.h"
#include "sched/gpu_units.h"

namespace cohort::sched {

double WorkAtRiskGpuSeconds(const RunningJob& job, int64_t now_ms) {
  const int64_t since = std::max(job.start_ms, job.checkpoint_ms);
  // A sharing job counts its parts of GPUs.
  return static_cast<double>(std::max<int64_t>(0, now_ms - since)) / 1000.0 * static_cast<double>(HeldUnits(job)) /
         kGpuShareUnits;
}

PreemptionPlanner::PreemptionPlanner(const Snapshot& snapshot, const NodePool& pool, const ConstraintBook& constraints)
    : snapshot_(snapshot), pool_(pool), constraints_(constraints), held_(snapshot.shares->teams, snapshot.running) {
  std::unordered_map<std::string_view, int> index;
  index.reserve(snapshot.nodes.size());
  for (size_t i = 0; i < snapshot.nodes.size(); ++i) index.emplace(snapshot.nodes[i].id, static_cast<int>(i));
  on_node_.resize(static_cast<size_t>(pool.size()));
  detail_.assign(static_cast<size_t>(pool.size()), false);
  units_of_.resize(snapshot.running.size());
  taken_.assign(snapshot.running.size(), false);
  for (size_t r = 0; r < snapshot.running.size(); ++r) {
    const RunningJob& job = snapshot.running[r];
    units_of_[r] = HeldUnits(job);
    for (const Usage& u : job.usage) {
      if (auto it = index.find(u.node); it != index.end()) {
        on_node_[static_cast<size_t>(it->second)].emplace_back(static_cast<int>(r), u);
        if (!u.slices.empty() && !snapshot.nodes[static_cast<size_t>(it->second)].gpus.empty()) {
          detail_[static_cast<size_t>(it->second)] = true;
        }
      }
    }
  }
  for (int n = 0; n < pool.size(); ++n) {
    const std::span<const GpuView> devices = snapshot.nodes[static_cast<size_t>(n)].gpus;
    if (std::any_of(devices.begin(), devices.end(), [](const GpuView& d) { return ConnectionDomain(d) >= 0; })) {
      detail_[static_cast<size_t>(n)] = true;
    }
  }
}

bool PreemptionPlanner::Cheaper(const Candidate& a, const Candidate& b) const {
  const RunningJob& x = snapshot_.running[static_cast<size_t>(a.running)];
  const RunningJob& y = snapshot_.running[static_cast<size_t>(b.running)];
  return std::tuple(x.priority, a.work, -x.start_ms, x.id) < std::tuple(y.priority, b.work, -y.start_ms, y.id);
}

std::optional<std::vector<Preemption>> PreemptionPlanner::Plan(const JobRequest& job, const GangDemand& demand,
                                                               int64_t units, const QuotaBook& quotas,
                                                               std::span<const int> excluded,
                                                               std::string* why) const {
  const PreemptionPolicy& policy = snapshot_.shares->preemption;
  const int64_t now = snapshot_.now_ms;
  const std::string& team = job.team;
  const bool may_reclaim = quotas.WithinQuota(team, units);
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

  // Node constraints: the nodes it may use, those it must, the memory each needs.
  std::optional<ConstraintBook::Rules> rules;
  if (IsConstrained(job)) {
    rules = constraints_.RulesFor(job);
    if (!rules || static_cast<int>(rules->listed.size()) > demand.nodes) {
      *why = "its node constraints leave no nodes to preempt on";
      return std::nullopt;
    }
  }
  MemberNeed need;
  need.job = &job;
  need.demand = demand;
  need.mem_mb = rules ? rules->mem_mb : 0;
  need.wants_connected = demand.gpus > 1 && job.gpu_share == 0 && job.gpu_memory_mib == 0;

  // For each node, the cheapest victims that make room for one member of the gang.
  std::vector<NodeChoice> usable;
  std::vector<Candidate> here;
  const bool detailed = NeedsGpuDetail(job);
  for (int n = 0; n < pool_.size(); ++n) {
    if (!pool_.schedulable(n) || pool_.capacity_cpus(n) < demand.cpus) continue;
    if (!detailed && !detail_[static_cast<size_t>(n)] && pool_.capacity_gpus(n) < demand.gpus) continue;
    if (rules && !rules->allowed[static_cast<size_t>(n)]) continue;
    if (std::find(excluded.begin(), excluded.end(), n) != excluded.end()) continue;
    bool connected = true;
    if (FitsWithout(n, need, {}, false, &connected)) {  // fits as it is: costs nothing
      NodeChoice free_node;
      free_node.node = n;
      free_node.max_priority = std::numeric_limits<int>::min();
      free_node.connected = connected;
      usable.push_back(std::move(free_node));
      continue;
    }
    here.clear();
    for (const auto& [r, use] : on_node_[static_cast<size_t>(n)]) {
      if (candidate[static_cast<size_t>(r)]) here.push_back(*candidate[static_cast<size_t>(r)]);
    }
    std::sort(here.begin(), here.end(), [&](const Candidate& a, const Candidate& b) { return Cheaper(a, b); });
    if (auto choice = ChooseOnNode(n, need, here)) usable.push_back(std::move(*choice));
  }
  const auto key = [](const NodeChoice& c) {
    return std::tuple(c.max_priority, !c.connected, c.work, c.victims.size(), c.node);
  };
  const auto by_key = [&](const NodeChoice& a, const NodeChoice& b) { return key(a) < key(b); };
  std::vector<NodeChoice> must;  // the --nodelist nodes: every one is a member
  if (rules) {
    for (int listed : rules->listed) {
      auto it = std::find_if(usable.begin(), usable.end(), [&](const NodeChoice& c) { return c.node == listed; });
      if (it == usable.end()) {
        *why = fmt::format("preempting every candidate would not free --nodelist node {}", pool_.id(listed));
        return std::nullopt;
      }
      must.push_back(std::move(*it));
      usable.erase(it);
    }
  }
  std::vector<const NodeChoice*> gang;
  for (const NodeChoice& c : must) gang.push_back(&c);
  const int wanted = demand.nodes - static_cast<int>(gang.size());
  if (static_cast<int>(usable.size()) < wanted) {
    *why = fmt::format("preempting every candidate would free only {} of the {} nodes it needs",
                       usable.size() + gang.size(), demand.nodes);
    return std::nullopt;
  }
  std::sort(usable.begin(), usable.end(), by_key);
  std::vector<const NodeChoice*> rest;
  if (demand.nodes > 1 && gang.empty() && HasSwitches(pool_)) {
    // The fewest switches: the switch whose `wanted` cheapest nodes cost least.
    std::map<std::string_view, std::vector<const NodeChoice*>> by_switch;  // each in key order
    for (const NodeChoice& c : usable) by_switch[pool_.network_switch(c.node)].push_back(&c);
    const std::vector<const NodeChoice*>* best = nullptr;
    std::tuple<int, int, double, size_t> best_cost;
    size_t largest = 0;
    for (const auto& [sw, members] : by_switch) {
      if (sw.empty()) continue;
      largest = std::max(largest, members.size());
      if (static_cast<int>(members.size()) < wanted) continue;
      std::tuple<int, int, double, size_t> cost{std::numeric_limits<int>::min(), 0, 0.0, 0};
      for (int k = 0; k < wanted; ++k) {
        const NodeChoice& c = *members[static_cast<size_t>(k)];
        std::get<0>(cost) = std::max(std::get<0>(cost), c.max_priority);
        std::get<1>(cost) += c.connected ? 0 : 1;
        std::get<2>(cost) += c.work;
        std::get<3>(cost) += c.victims.size();
      }
      if (!best || cost < best_cost) {
        best = &members;
        best_cost = cost;
      }
    }
    if (best) {
      rest.assign(best->begin(), best->begin() + wanted);
    } else if (job.topology_required) {
      *why = fmt::format("topology required: preempting every candidate would free at most {} of the {} nodes it "
                         "needs under one switch",
                         largest, demand.nodes);
      return std::nullopt;
    }
  }
  if (rest.empty()) {
    for (int k = 0; k < wanted; ++k) rest.push_back(&usable[static_cast<size_t>(k)]);
  }
  gang.insert(gang.end(), rest.begin(), rest.end());
  std::vector<Candidate> victims;
  for (const NodeChoice* choice : gang) {
    for (int r : choice->victims) {
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
                           FormatGpus(quotas.quota(rj.team)));
        return std::nullopt;
      }
    }
    removed[rj.team] += units_of_[static_cast<size_t>(c.running)];
  }
  const int64_t team_after = quotas.used(team) - removed[team] + units;
  if (reclaims && team_after > quotas.quota(team)) {
    *why = fmt::format("team {} would exceed its quota of {} GPUs", team, FormatGpus(quotas.quota(team)));
    return std::nullopt;
  }
  if (quotas.limit(team) != std::numeric_limits<int64_t>::max() && team_after > quotas.limit(team)) {
    *why = quotas.LimitReason(team, units);
    return std::nullopt;
  }

  std::vector<std::string> nodes;
  for (const NodeChoice* choice : gang) nodes.push_back(pool_.id(choice->node));
  std::vector<Preemption> plan;
  plan.reserve(victims.size());
  for (const Candidate& c : victims) {
    const RunningJob& rj = snapshot_.running[static_cast<size_t>(c.running)];
    Preemption p;
    p.victim = rj.id;
    p.preemptor = job.id;
    p.kind = c.kind;
    p.work_at_risk_gpu_s = c.work;
    p.nodes = nodes;
    if (c.kind == PreemptKind::kReclaim) {
      p.reason = fmt::format(
          "reclaim: job {} of team {} needs {} GPUs within the team's quota of {} ({} in use); team {} borrows {} "
          "beyond its quota of {}",
          job.id, team, FormatGpus(units), FormatGpus(quotas.quota(team)), FormatGpus(quotas.used(team)), rj.team,
          FormatGpus(quotas.used(rj.team) - quotas.quota(rj.team)), FormatGpus(quotas.quota(rj.team)));
    } else {
      p.reason = fmt::format("priority: job {} of team {} has priority {}, above this job's {}", job.id, team,
                             job.priority, rj.priority);
    }
    plan.push_back(std::move(p));
  }
  return plan;
}

bool PreemptionPlanner::FitsWithout(int node, const MemberNeed& need, std::span<const int> victims,
                                    bool connected_only, bool* connected) const {
  const GangDemand& d = need.demand;
  int64_t cpus = pool_.free_cpus(node);
  int64_t gpus = static_cast<int64_t>(pool_.free_gpus(node).size());
  int64_t mem = constraints_.free_mb(node);
  const bool by_devices = NeedsGpuDetail(*need.job) || detail_[static_cast<size_t>(node)];
  std::vector<GpuView> devices;
  if (by_devices) devices.assign(pool_.devices(node).begin(), pool_.devices(node).end());
  for (int v : victims) {
    for (const auto& [r, use] : on_node_[static_cast<size_t>(node)]) {
      if (r != v) continue;
      cpus += use.cpus;
      gpus += use.gpus;
      mem += use.memory_mb;
      if (by_devices) ReturnDevices(devices, use.devices, use.slices);
    }
  }
  *connected = true;
  if (cpus < d.cpus || mem < need.mem_mb) return false;
  if (!by_devices) return gpus >= d.gpus;
  JobRequest connected_job = *need.job;
  connected_job.topology_required = true;
  if (need.wants_connected && FitMember(devices, connected_job, d.gpus, need.job->placement)) return true;
  *connected = !need.wants_connected;
  if (connected_only) return false;
  return FitMember(devices, *need.job, d.gpus, need.job->placement).has_value();
}

std::optional<PreemptionPlanner::NodeChoice> PreemptionPlanner::ChooseOnNode(int node, const MemberNeed& need,
                                                                             std::vector<Candidate>& here) const {
  // The cheapest candidates of `order`, in order, until the member fits; then those it
  // does not need dropped again, the most expensive first.
  const auto greedy = [&](const std::vector<Candidate>& order, bool connected_only) -> std::optional<NodeChoice> {
    std::vector<int> chosen;
    bool connected = true;
    bool fits = FitsWithout(node, need, chosen, connected_only, &connected);
    for (size_t i = 0; !fits && i < order.size(); ++i) {
      chosen.push_back(order[i].running);
      fits = FitsWithout(node, need, chosen, connected_only, &connected);
    }
    if (!fits) return std::nullopt;
    for (size_t i = chosen.size(); i-- > 0;) {
      std::vector<int> fewer = chosen;
      fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(i));
      bool c = true;
      if (FitsWithout(node, need, fewer, connected_only, &c)) chosen = std::move(fewer);
    }
    FitsWithout(node, need, chosen, connected_only, &connected);
    NodeChoice choice;
    choice.node = node;
    choice.connected = connected;
    choice.max_priority = std::numeric_limits<int>::min();
    for (int r : chosen) {
      const auto it = std::find_if(order.begin(), order.end(), [&](const Candidate& c) { return c.running == r; });
      choice.work += it->work;
      choice.max_priority = std::max(choice.max_priority, snapshot_.running[static_cast<size_t>(r)].priority);
    }
    choice.victims = std::move(chosen);
    return choice;
  };
  const auto better = [](const NodeChoice& a, const NodeChoice& b) {
    return std::tuple(a.max_priority, !a.connected, a.work, a.victims.size()) <
           std::tuple(b.max_priority, !b.connected, b.work, b.victims.size());
  };
  if (!NeedsGpuDetail(*need.job) && !detail_[static_cast<size_t>(node)]) return ByCount(node, need, here);
  std::optional<NodeChoice> best = greedy(here, false);
  if (!best || best->victims.empty() || !need.wants_connected || !detail_[static_cast<size_t>(node)]) return best;
  // Connected GPUs: the victims that free one domain, each domain tried in turn (its
  // jobs first, cheapest first, then the others for CPUs or memory).
  std::set<int64_t> domains;
  for (const GpuView& d : pool_.devices(node)) {
    if (ConnectionDomain(d) >= 0) domains.insert(ConnectionDomain(d));
  }
  const std::span<const GpuView> listed = snapshot_.nodes[static_cast<size_t>(node)].gpus;
  std::vector<Candidate> order;
  for (int64_t domain : domains) {
    const auto touches = [&](const Candidate& c) {
      for (const auto& [r, use] : on_node_[static_cast<size_t>(node)]) {
        if (r != c.running) continue;
        const auto in_domain = [&](int index) {
          return std::any_of(listed.begin(), listed.end(),
                             [&](const GpuView& d) { return d.index == index && ConnectionDomain(d) == domain; });
        };
        if (std::any_of(use.devices.begin(), use.devices.end(), in_domain)) return true;
      }
      return false;
    };
    order.clear();
    std::copy_if(here.begin(), here.end(), std::back_inserter(order), touches);
    std::copy_if(here.begin(), here.end(), std::back_inserter(order), [&](const Candidate& c) { return !touches(c); });
    if (auto choice = greedy(order, true); choice && better(*choice, *best)) best = std::move(choice);
  }
  return best;
}

std::optional<PreemptionPlanner::NodeChoice> PreemptionPlanner::ByCount(int node, const MemberNeed& need,
                                                                        const std::vector<Candidate>& here) const {
  // ChooseOnNode's greedy and pruning on counts, with running sums (the hot path: plain
  // jobs on nodes without device detail).
  struct Freed {
    int64_t gpus = 0, cpus = 0, mem = 0;
  };
  const GangDemand& d = need.demand;
  Freed have{static_cast<int64_t>(pool_.free_gpus(node).size()), pool_.free_cpus(node), constraints_.free_mb(node)};
  const auto fits = [&] { return have.gpus >= d.gpus && have.cpus >= d.cpus && have.mem >= need.mem_mb; };
  std::vector<std::pair<const Candidate*, Freed>> chosen;
  for (size_t i = 0; !fits() && i < here.size(); ++i) {
    Freed f;
    for (const auto& [r, use] : on_node_[static_cast<size_t>(node)]) {
      if (r != here[i].running) continue;
      f.gpus += use.gpus;
      f.cpus += use.cpus;
      f.mem += use.memory_mb;
    }
    have = {have.gpus + f.gpus, have.cpus + f.cpus, have.mem + f.mem};
    chosen.emplace_back(&here[i], f);
  }
  if (!fits()) return std::nullopt;
  for (size_t k = chosen.size(); k-- > 0;) {
    const Freed& f = chosen[k].second;
    have = {have.gpus - f.gpus, have.cpus - f.cpus, have.mem - f.mem};
    if (fits()) {
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      have = {have.gpus + f.gpus, have.cpus + f.cpus, have.mem + f.mem};
    }
  }
  NodeChoice choice;
  choice.node = node;
  choice.max_priority = std::numeric_limits<int>::min();
  for (const auto& [c, f] : chosen) {
    choice.victims.push_back(c->running);
    choice.work += c->work;
    choice.max_priority = std::max(choice.max_priority, snapshot_.running[static_cast<size_t>(c->running)].priority);
  }
  return choice;
}

void PreemptionPlanner::Commit(const std::vector<Preemption>& plan) {
  for (const Preemption& p : plan) {
    for (size_t r = 0; r < snapshot_.running.size(); ++r) {
      if (snapshot_.running[r].id != p.victim || taken_[r]) continue;
      taken_[r] = true;
      released_[snapshot_.running[r].team] += units_of_[r];
    }
  }
}

}  // namespace cohort::sched
