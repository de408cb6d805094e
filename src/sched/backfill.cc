#include "sched/backfill.h"

#include <algorithm>

#include "sched/gpu_fit.h"

namespace cohort::sched {

int64_t EndOf(int64_t now_ms, int64_t time_limit_ms) {
  if (time_limit_ms <= 0) return kNever;
  if (now_ms > kNever - time_limit_ms) return kNever;
  return now_ms + time_limit_ms;
}

namespace {

// Projected free resources of every node, and how many schedulable ones host `head`.
class Projection {
 public:
  Projection(const NodePool& pool, const GangDemand& head) : pool_(pool), head_(head) {
    free_.reserve(pool.size());
    for (int i = 0; i < pool.size(); ++i) {
      free_.push_back(pool.free(i));
      if (Hosts(i)) ++hosts_;
    }
  }

  int hosts() const { return hosts_; }
  const NodeFree& free(int node) const { return free_[node]; }

  void Add(const Release& r) {
    if (r.node < 0 || r.node >= pool_.size() || !pool_.schedulable(r.node)) return;
    const bool before = Hosts(r.node);
    NodeFree& f = free_[r.node];
    f.gpus = std::min(f.gpus + std::max(r.gpus, 0), pool_.capacity_gpus(r.node));
    f.cpus = std::min<int64_t>(f.cpus + std::max<int64_t>(r.cpus, 0), pool_.capacity_cpus(r.node));
    hosts_ += static_cast<int>(Hosts(r.node)) - static_cast<int>(before);
  }

  // Everything has ended: every node offers its full capacity.
  void Drain() {
    hosts_ = 0;
    for (int i = 0; i < pool_.size(); ++i) {
      free_[i].gpus = pool_.capacity_gpus(i);
      free_[i].cpus = pool_.capacity_cpus(i);
      if (Hosts(i)) ++hosts_;
    }
  }

  // The `head_.nodes` preferred hosts under `policy`, in that order.
  std::vector<int> Choose(Placement policy) const {
    std::vector<int> hosts;
    hosts.reserve(hosts_);
    for (int i = 0; i < pool_.size(); ++i) {
      if (Hosts(i)) hosts.push_back(i);
    }
    const auto before = [&](int a, int b) { return PlacesBefore(policy, free_[a], free_[b]); };
    const auto mid = hosts.begin() + head_.nodes;
    std::partial_sort(hosts.begin(), mid, hosts.end(), before);
    hosts.erase(mid, hosts.end());
    return hosts;
  }

 private:
  bool Hosts(int node) const {
    return pool_.schedulable(node) && free_[node].gpus >= head_.gpus &&
           free_[node].cpus >= head_.cpus;
  }

  const NodePool& pool_;
  const GangDemand& head_;
  std::vector<NodeFree> free_;
  int hosts_ = 0;
};

// The whole GPUs member `k` of `fit` takes from what is free now: its GPUs, or for a
// sharing job the GPUs of its slices that no task shares yet.
int WholeTaken(const GangFit& fit, size_t k, const NodePool& pool) {
  if (k >= fit.slices.size() || fit.slices[k].empty()) return static_cast<int>(fit.gpus[k].size());
  const std::span<const int> free = pool.free_gpus(fit.nodes[k]);
  std::vector<int> gpus;
  for (const GpuSlice& s : fit.slices[k]) {
    if (std::binary_search(free.begin(), free.end(), s.gpu) &&
        std::find(gpus.begin(), gpus.end(), s.gpu) == gpus.end()) {
      gpus.push_back(s.gpu);
    }
  }
  return static_cast<int>(gpus.size());
}

bool FitsOnCapacity(const NodePool& pool, const GangDemand& head) {
  int hosts = 0;
  for (int i = 0; i < pool.size() && hosts < head.nodes; ++i) {
    if (pool.schedulable(i) && pool.capacity_gpus(i) >= head.gpus &&
        pool.capacity_cpus(i) >= head.cpus) {
      ++hosts;
    }
  }
  return hosts >= head.nodes;
}

}  // namespace

std::optional<ReservationPlan> PlanReservation(const NodePool& pool,
                                               std::span<const Release> releases,
                                               const GangDemand& head, Placement policy,
                                               int64_t now_ms) {
  if (head.nodes < 1 || !FitsOnCapacity(pool, head)) return std::nullopt;

  Projection projection(pool, head);
  ReservationPlan plan;
  plan.start_ms = now_ms;
  if (projection.hosts() < head.nodes) {
    std::vector<const Release*> order;
    order.reserve(releases.size());
    for (const Release& r : releases) {
      if (r.end_ms != kNever) order.push_back(&r);
    }
    std::sort(order.begin(), order.end(),
              [](const Release* a, const Release* b) { return a->end_ms < b->end_ms; });
    plan.start_ms = kNever;
    for (size_t i = 0; i < order.size();) {
      const int64_t t = std::max(order[i]->end_ms, now_ms);
      // Ends before now are overdue; they count as ending now.
      for (; i < order.size() && std::max(order[i]->end_ms, now_ms) == t; ++i) {
        projection.Add(*order[i]);
      }
      if (projection.hosts() >= head.nodes) {
        plan.start_ms = t;
        break;
      }
    }
    if (plan.start_ms == kNever) projection.Drain();
  }

  plan.nodes = projection.Choose(policy);
  plan.free_at_start.reserve(plan.nodes.size());
  for (int node : plan.nodes) plan.free_at_start.push_back(projection.free(node));
  return plan;
}

BackfillGuard::BackfillGuard(int64_t head_job, const GangDemand& head, ReservationPlan plan,
                             int64_t now_ms)
    : head_job_(head_job), head_(head), plan_(std::move(plan)), now_ms_(now_ms) {}

bool BackfillGuard::EndsByStart(int64_t time_limit_ms) const {
  return time_limit_ms > 0 && EndOf(now_ms_, time_limit_ms) <= plan_.start_ms;
}

void BackfillGuard::BlockedNodes(const JobRequest& job, const GangDemand& demand, const NodePool& pool,
                                 std::vector<int>* blocked) const {
  blocked->clear();
  if (EndsByStart(job.time_limit_ms)) return;
  const bool shares = job.gpu_share > 0 || job.gpu_memory_mib > 0;
  for (size_t k = 0; k < plan_.nodes.size(); ++k) {
    const NodeFree& left = plan_.free_at_start[k];
    int gpus = demand.gpus;
    if (shares && left.cpus - demand.cpus >= head_.cpus) {
      // The GPUs its slices would make no longer whole; a node it cannot use now is no
      // loss to it.
      const int node = plan_.nodes[k];
      const std::optional<MemberFit> member = FitMember(pool.devices(node), job, 0, job.placement);
      if (!member) {
        blocked->push_back(node);
        continue;
      }
      GangFit one{{node}, {member->gpus}, {member->slices}};
      gpus = WholeTaken(one, 0, pool);
    }
    if (left.gpus - gpus < head_.gpus || left.cpus - demand.cpus < head_.cpus) {
      blocked->push_back(plan_.nodes[k]);
    }
  }
}

int BackfillGuard::Reserved(int node) const {
  const auto it = std::find(plan_.nodes.begin(), plan_.nodes.end(), node);
  return it == plan_.nodes.end() ? -1 : static_cast<int>(it - plan_.nodes.begin());
}

void BackfillGuard::Breaks(const GangDemand& demand, int64_t time_limit_ms, const GangFit& fit,
                           const NodePool& pool, std::vector<int>* broken) const {
  broken->clear();
  if (EndsByStart(time_limit_ms)) return;
  for (size_t k = 0; k < fit.nodes.size(); ++k) {
    const int r = Reserved(fit.nodes[k]);
    if (r < 0) continue;
    const NodeFree& left = plan_.free_at_start[static_cast<size_t>(r)];
    if (left.gpus - WholeTaken(fit, k, pool) < head_.gpus || left.cpus - demand.cpus < head_.cpus) {
      broken->push_back(fit.nodes[k]);
    }
  }
}

void BackfillGuard::Commit(const GangDemand& demand, int64_t time_limit_ms, const GangFit& fit,
                           const NodePool& pool) {
  if (EndsByStart(time_limit_ms)) return;
  for (size_t k = 0; k < fit.nodes.size(); ++k) {
    const int r = Reserved(fit.nodes[k]);
    if (r < 0) continue;
    NodeFree& left = plan_.free_at_start[static_cast<size_t>(r)];
    left.gpus -= WholeTaken(fit, k, pool);
    left.cpus -= demand.cpus;
  }
}

}  // namespace cohort::sched
