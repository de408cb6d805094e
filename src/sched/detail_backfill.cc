#include "sched/detail_backfill.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "sched/backfill.h"
#include "sched/gpu_fit.h"
#include "sched/placement.h"

namespace cohort::sched {

namespace {

GpuView Untyped(int index) {
  GpuView d;
  d.index = index;
  return d;
}

int WholeFree(const NodeState& s) {
  int whole = 0;
  for (const GpuView& d : s.devices) whole += DeviceMatches(d, "") && d.free_share == kGpuShareUnits;
  return whole;
}

// The node with every job gone: its devices all free (a node without device detail: its
// healthy GPUs as whole untyped ones), its CPUs and memory.
NodeState Empty(const NodePool& pool, const NodeView& view, int node) {
  NodeState s;
  s.devices = view.gpus;
  for (GpuView& d : s.devices) {
    d.free_share = kGpuShareUnits;
    d.free_memory_mib = d.memory_mib;
  }
  if (s.devices.empty()) {
    for (int g = 0; g < pool.capacity_gpus(node); ++g) s.devices.push_back(Untyped(g));
  }
  std::sort(s.devices.begin(), s.devices.end(), [](const GpuView& a, const GpuView& b) { return a.index < b.index; });
  s.cpus = pool.capacity_cpus(node);
  s.memory_mb = view.memory_mb;
  return s;
}

// The eligible nodes' states, moved forward release by release.
class DetailProjection {
 public:
  DetailProjection(const NodePool& pool, std::span<const NodeView> nodes, const JobRequest& job,
                   const GangDemand& demand, std::vector<int> eligible, std::vector<int> listed)
      : pool_(pool),
        nodes_(nodes),
        job_(job),
        demand_(demand),
        eligible_(std::move(eligible)),
        listed_(std::move(listed)),
        switches_(demand.nodes > 1 && listed_.empty() && HasSwitches(pool)) {
    slot_.assign(static_cast<size_t>(pool.size()), -1);
    state_.reserve(eligible_.size());
    for (size_t i = 0; i < eligible_.size(); ++i) {
      const int n = eligible_[i];
      slot_[static_cast<size_t>(n)] = static_cast<int>(i);
      const std::span<const GpuView> devices = pool.devices(n);
      state_.push_back(NodeState{{devices.begin(), devices.end()}, pool.free_cpus(n), 0});
    }
    hosts_.assign(eligible_.size(), false);
  }

  void SetMemory(int node, int64_t mb) { state_[static_cast<size_t>(slot_[static_cast<size_t>(node)])].memory_mb = mb; }
  bool Tracks(int node) const { return node >= 0 && node < pool_.size() && slot_[static_cast<size_t>(node)] >= 0; }

  // Whether each node hosts a member; call after changing states.
  void RefreshAll() {
    for (size_t i = 0; i < eligible_.size(); ++i) Refresh(i);
  }

  void Add(const DeviceRelease& r) {
    const size_t i = static_cast<size_t>(slot_[static_cast<size_t>(r.node)]);
    NodeState& s = state_[i];
    ReturnDevices(s.devices, r.devices, r.slices);
    if (r.devices.empty() && r.gpus > 0) {
      // Whole GPUs without their indices: untyped ones below the node's own indices.
      int whole = 0;
      for (const GpuView& d : s.devices) whole += !d.mig;
      const int add = std::min(r.gpus, pool_.capacity_gpus(r.node) - whole);
      for (int k = 0; k < add; ++k) {
        const int index = s.devices.empty() ? -1 : std::min(s.devices.front().index, 0) - 1;
        s.devices.insert(s.devices.begin(), Untyped(index));
      }
    }
    s.cpus = std::min<int64_t>(s.cpus + std::max<int64_t>(r.cpus, 0), pool_.capacity_cpus(r.node));
    const int64_t mem_cap = std::max(nodes_[static_cast<size_t>(r.node)].memory_mb, s.memory_mb);
    s.memory_mb = std::min(s.memory_mb + std::max<int64_t>(r.memory_mb, 0), mem_cap);
    Refresh(i);
  }

  // Every job has ended.
  void Drain() {
    for (size_t i = 0; i < eligible_.size(); ++i) {
      const int n = eligible_[i];
      state_[i] = Empty(pool_, nodes_[static_cast<size_t>(n)], n);
    }
    RefreshAll();
  }

  // The gang's nodes (pool indices) as the states stand, or nullopt.
  std::optional<std::vector<int>> Choose() const {
    if (hosts_count_ < demand_.nodes) return std::nullopt;
    std::vector<int> gang;
    for (int n : listed_) {
      if (!hosts_[static_cast<size_t>(slot_[static_cast<size_t>(n)])]) return std::nullopt;
      gang.push_back(n);
    }
    const size_t wanted = static_cast<size_t>(demand_.nodes) - gang.size();
    std::vector<size_t> candidates;
    for (size_t i = 0; i < eligible_.size(); ++i) {
      if (hosts_[i] && std::find(listed_.begin(), listed_.end(), eligible_[i]) == listed_.end()) {
        candidates.push_back(i);
      }
    }
    if (candidates.size() < wanted) return std::nullopt;
    const auto free_of = [&](size_t i) {
      return NodeFree{WholeFree(state_[i]), state_[i].cpus, pool_.free(eligible_[i]).rank};
    };
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](size_t a, size_t b) { return PlacesBefore(job_.placement, free_of(a), free_of(b)); });
    std::vector<size_t> chosen;
    if (switches_) {
      std::map<std::string_view, std::vector<size_t>> by_switch;  // in placement order within each
      for (size_t i : candidates) by_switch[pool_.network_switch(eligible_[i])].push_back(i);
      const std::vector<size_t>* best = nullptr;
      for (const auto& [sw, members] : by_switch) {
        if (sw.empty() || members.size() < wanted) continue;
        if (!best || members.size() < best->size()) best = &members;
      }
      if (best) {
        chosen.assign(best->begin(), best->begin() + static_cast<std::ptrdiff_t>(wanted));
      } else if (job_.topology_required) {
        return std::nullopt;
      } else {
        std::vector<const std::vector<size_t>*> order;
        for (const auto& [sw, members] : by_switch) order.push_back(&members);
        std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->size() > b->size(); });
        for (const auto* members : order) {
          for (size_t i : *members) {
            if (chosen.size() < wanted) chosen.push_back(i);
          }
        }
      }
    } else {
      chosen.assign(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(wanted));
    }
    for (size_t i : chosen) gang.push_back(eligible_[i]);
    return gang;
  }

  const NodeState& state(int node) const { return state_[static_cast<size_t>(slot_[static_cast<size_t>(node)])]; }

 private:
  void Refresh(size_t i) {
    const bool hosts = MemberFitsState(state_[i], job_, demand_);
    hosts_count_ += static_cast<int>(hosts) - static_cast<int>(hosts_[i]);
    hosts_[i] = hosts;
  }

  const NodePool& pool_;
  std::span<const NodeView> nodes_;
  const JobRequest& job_;
  const GangDemand& demand_;
  const std::vector<int> eligible_;  // pool indices
  const std::vector<int> listed_;    // pool indices of the --nodelist nodes
  const bool switches_;              // a gang over switch-labelled nodes
  std::vector<int> slot_;            // pool index -> index into eligible_, -1 if not eligible
  std::vector<NodeState> state_;
  std::vector<bool> hosts_;
  int hosts_count_ = 0;
};

}  // namespace

bool MemberFitsState(const NodeState& state, const JobRequest& job, const GangDemand& demand) {
  if (state.cpus < demand.cpus || state.memory_mb < job.mem_per_node_mb) return false;
  if (NeedsGpuDetail(job)) return FitMember(state.devices, job, demand.gpus, job.placement).has_value();
  return WholeFree(state) >= demand.gpus;
}

std::optional<DetailPlan> PlanDetailedReservation(const NodePool& pool, const ConstraintBook& constraints,
                                                  std::span<const NodeView> nodes,
                                                  std::span<const DeviceRelease> releases, const JobRequest& job,
                                                  const GangDemand& demand, std::span<const int> excluded,
                                                  int64_t now_ms) {
  if (demand.nodes < 1) return std::nullopt;
  std::optional<ConstraintBook::Rules> rules;
  if (IsConstrained(job)) {
    rules = constraints.RulesFor(job);
    if (!rules || static_cast<int>(rules->listed.size()) > demand.nodes) return std::nullopt;
  }
  const int64_t mem = rules ? rules->mem_mb : 0;
  std::vector<int> eligible;
  for (int n = 0; n < pool.size(); ++n) {
    if (!pool.schedulable(n) || pool.capacity_cpus(n) < demand.cpus) continue;
    if (rules && !rules->allowed[static_cast<size_t>(n)]) continue;
    if (mem > 0 && nodes[static_cast<size_t>(n)].memory_mb < mem) continue;
    if (std::find(excluded.begin(), excluded.end(), n) != excluded.end()) continue;
    eligible.push_back(n);
  }
  std::vector<int> listed = rules ? rules->listed : std::vector<int>{};
  for (int n : listed) {
    if (!std::binary_search(eligible.begin(), eligible.end(), n)) return std::nullopt;
  }
  if (static_cast<int>(eligible.size()) < demand.nodes) return std::nullopt;

  DetailProjection projection(pool, nodes, job, demand, eligible, std::move(listed));
  for (int n : eligible) projection.SetMemory(n, constraints.free_mb(n));
  projection.RefreshAll();
  DetailPlan plan;
  plan.start_ms = now_ms;
  std::optional<std::vector<int>> gang = projection.Choose();
  if (!gang) {
    std::vector<const DeviceRelease*> order;
    for (const DeviceRelease& r : releases) {
      if (r.end_ms != kNever && projection.Tracks(r.node)) order.push_back(&r);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const DeviceRelease* a, const DeviceRelease* b) { return a->end_ms < b->end_ms; });
    plan.start_ms = kNever;
    for (size_t i = 0; i < order.size();) {
      const int64_t t = std::max(order[i]->end_ms, now_ms);
      // Ends before now are overdue; they count as ending now.
      for (; i < order.size() && std::max(order[i]->end_ms, now_ms) == t; ++i) projection.Add(*order[i]);
      if ((gang = projection.Choose())) {
        plan.start_ms = t;
        break;
      }
    }
    if (!gang) {
      projection.Drain();
      gang = projection.Choose();
      if (!gang) return std::nullopt;
    }
  }
  plan.nodes = std::move(*gang);
  plan.at_start.reserve(plan.nodes.size());
  for (int n : plan.nodes) plan.at_start.push_back(projection.state(n));
  return plan;
}

DetailGuard::DetailGuard(const JobRequest& head, const GangDemand& demand, DetailPlan plan, int64_t now_ms)
    : head_(head), demand_(demand), plan_(std::move(plan)), now_ms_(now_ms) {}

bool DetailGuard::EndsByStart(int64_t time_limit_ms) const {
  return time_limit_ms > 0 && EndOf(now_ms_, time_limit_ms) <= plan_.start_ms;
}

int DetailGuard::Reserved(int node) const {
  const auto it = std::find(plan_.nodes.begin(), plan_.nodes.end(), node);
  return it == plan_.nodes.end() ? -1 : static_cast<int>(it - plan_.nodes.begin());
}

void DetailGuard::BlockedNodes(const JobRequest& job, const GangDemand& demand, const NodePool& pool,
                               std::vector<int>* blocked) const {
  blocked->clear();
  if (EndsByStart(job.time_limit_ms)) return;
  for (size_t k = 0; k < plan_.nodes.size(); ++k) {
    const int node = plan_.nodes[k];
    const NodeState& s = plan_.at_start[k];
    if (s.cpus - demand.cpus < demand_.cpus || s.memory_mb - job.mem_per_node_mb < head_.mem_per_node_mb ||
        !pool.CanHost(node, 0, demand.cpus)) {
      blocked->push_back(node);
      continue;
    }
    const std::optional<MemberFit> member = FitMember(pool.devices(node), job, demand.gpus, job.placement);
    if (!member) {
      blocked->push_back(node);
      continue;
    }
    NodeState after = s;
    after.cpus -= demand.cpus;
    after.memory_mb -= job.mem_per_node_mb;
    TakeDevices(after.devices, member->gpus, member->slices);
    if (!MemberFitsState(after, head_, demand_)) blocked->push_back(node);
  }
}

void DetailGuard::Apply(NodeState& state, const JobRequest& job, const GangDemand& demand, const GangFit& fit,
                        size_t k) {
  state.cpus -= demand.cpus;
  state.memory_mb -= job.mem_per_node_mb;
  TakeDevices(state.devices, fit.gpus[k], k < fit.slices.size() ? std::span<const GpuSlice>(fit.slices[k])
                                                                  : std::span<const GpuSlice>());
}

void DetailGuard::Breaks(const JobRequest& job, const GangDemand& demand, const GangFit& fit,
                         std::vector<int>* broken) const {
  broken->clear();
  if (EndsByStart(job.time_limit_ms)) return;
  for (size_t k = 0; k < fit.nodes.size(); ++k) {
    const int r = Reserved(fit.nodes[k]);
    if (r < 0) continue;
    NodeState s = plan_.at_start[static_cast<size_t>(r)];
    Apply(s, job, demand, fit, k);
    if (!MemberFitsState(s, head_, demand_)) broken->push_back(fit.nodes[k]);
  }
}

void DetailGuard::Commit(const JobRequest& job, const GangDemand& demand, const GangFit& fit) {
  if (EndsByStart(job.time_limit_ms)) return;
  for (size_t k = 0; k < fit.nodes.size(); ++k) {
    const int r = Reserved(fit.nodes[k]);
    if (r >= 0) Apply(plan_.at_start[static_cast<size_t>(r)], job, demand, fit, k);
  }
}

}  // namespace cohort::sched
