#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sched/backfill.h"
#include "sched/constraints.h"
#include "sched/detail_backfill.h"
#include "sched/fair_share.h"
#include "sched/gang_fit.h"
#include "sched/gpu_fit.h"
#include "sched/gpu_units.h"
#include "sched/node_pool.h"
#include "sched/preempt.h"
#include "sched/priority.h"
#include "sched/quota.h"
#include "sched/reasons.h"

namespace cohort::sched {

namespace {

// What the running jobs give back, and when, on nodes of the snapshot.
std::vector<Release> RunningReleases(const Snapshot& snapshot) {
  std::unordered_map<std::string_view, int> index;
  index.reserve(snapshot.nodes.size());
  for (size_t i = 0; i < snapshot.nodes.size(); ++i) index.emplace(snapshot.nodes[i].id, i);
  std::vector<Release> releases;
  for (const RunningJob& job : snapshot.running) {
    for (const Usage& u : job.usage) {
      const auto it = index.find(u.node);
      if (it != index.end()) releases.push_back(Release{job.end_ms, it->second, u.gpus, u.cpus});
    }
  }
  return releases;
}

// One scheduling pass: the free resources, the reservation once there is one, and the
// decision being built. Jobs must be considered in queue order.
class Pass {
 public:
  explicit Pass(const Snapshot& snapshot)
      : snapshot_(snapshot),
        now_(snapshot.now_ms),
        pool_(snapshot.nodes),
        constraints_(snapshot.nodes),
        unavailable_(UnavailableSuffix(snapshot.nodes)),
        releases_(RunningReleases(snapshot)),
        units_(snapshot.nodes),
        switches_(HasSwitches(pool_)) {
    decision_.start.reserve(snapshot.pending.size());
    pending_reason_.resize(snapshot.pending.size());
    if (snapshot.shares) quotas_.emplace(snapshot.shares->teams, snapshot.running);
    for (const JobRequest& job : snapshot.pending) {
      if (!job.nominated) continue;
      for (const std::string& node : job.nominated_nodes) Hold(node, job.id);
    }
  }

  // The pending jobs in the order this pass considers them.
  std::vector<const JobRequest*> Order() const {
    if (!quotas_) return OrderQueue(snapshot_.pending);
    std::vector<const JobRequest*> order;
    order.reserve(snapshot_.pending.size());
    for (const RankedJob& r : RankQueue(snapshot_, *quotas_)) order.push_back(r.job);
    return order;
  }

  void Consider(const JobRequest& job) {
    const Result<GangDemand> demand = DemandOf(job);
    if (!demand) {
      SetReason(job, InvalidReason(demand.error().message));
      return;
    }
    // An elastic job takes the largest gang from nodes down to min_nodes that fits now
    // (and, with quotas, that its team may hold).
    const int smallest = job.min_nodes > 0 ? std::min(job.min_nodes, demand->nodes) : demand->nodes;
    GangDemand size = *demand;
    bool admitted = false;
    // Typed, sharing or topology-bound jobs, and gangs over switches (gpu_fit.h).
    const bool detailed = NeedsGpuDetail(job);
    std::string detail_why;
    // Quotas count GPU share units (gpu_units.h); a memory-only sharing job is admitted at
    // the fewest it could take, and again with the units of the slices it is given.
    const int64_t per_node = quotas_ ? units_.PerNode(job) : 0;
    int64_t refused_units = 0;  // a fit whose slices the team's limit refused
    for (; size.nodes >= smallest; --size.nodes) {
      if (quotas_ && !quotas_->Admits(job.team, per_node * size.nodes)) continue;
      admitted = true;
      blocked_.clear();
      if (Guarded()) GuardBlocked(job, size);
      HeldAgainst(job, &blocked_);
      std::optional<GangFit> fit = FitNow(job, size, detailed, &detail_why);
      // Behind a reservation, what a fit takes on a reserved node may be what the head job
      // needs there (the devices in detail; the GPUs a sharing job's slices make no longer
      // whole): such nodes are blocked and the job fitted again.
      while (fit && Guarded()) {
        if (guard_) {
          guard_->Breaks(size, job.time_limit_ms, *fit, pool_, &broken_);
        } else {
          detail_guard_->Breaks(job, size, *fit, &broken_);
        }
        if (broken_.empty()) break;
        blocked_.insert(blocked_.end(), broken_.begin(), broken_.end());
        fit = FitNow(job, size, detailed, &detail_why);
      }
      if (fit && quotas_ && !quotas_->Admits(job.team, PlacedUnits(size, *fit))) {
        refused_units = PlacedUnits(size, *fit);
        continue;
      }
      if (fit) {
        Start(job, size, std::move(*fit));
        return;
      }
    }
    if (refused_units > 0) {
      SetReason(job, quotas_->LimitReason(job.team, refused_units));
      return;
    }
    if (detailed && admitted) {
      // It may preempt jobs whose devices it can use (preempt.h); else it waits, with the
      // reservation in detail if it is the first to (detail_backfill.h).
      if (quotas_ && TryPreempt(job, *demand, &detail_why)) return;
      SetReason(job, DetailedWait(job, *demand, detail_why));
      return;
    }
    if (quotas_ && TryPreempt(job, *demand, nullptr)) return;
    if (!admitted) {
      SetReason(job, quotas_->LimitReason(job.team, per_node * demand->nodes));
      return;
    }
    SetReason(job, Wait(job, *demand));
  }

  void SetReason(const JobRequest& job, std::string reason) {
    pending_reason_[&job - snapshot_.pending.data()] = std::move(reason);
  }

  Decision Finish() && {
    // Collected in queue order, stored in the snapshot's order (the head's is by id): each
    // goes in at the map's end, where a lookup per job in queue order missed the cache at
    // every level of the tree.
    for (size_t i = 0; i < pending_reason_.size(); ++i) {
      if (pending_reason_[i].empty()) continue;
      decision_.pending_reasons.emplace_hint(decision_.pending_reasons.end(), snapshot_.pending[i].id,
                                             std::move(pending_reason_[i]));
    }
    return std::move(decision_);
  }

 private:
  // The gang of `job` on what is free now, never on blocked_ nodes.
  std::optional<GangFit> FitNow(const JobRequest& job, const GangDemand& size, bool detailed, std::string* why) {
    if (IsConstrained(job)) return constraints_.Fit(pool_, job, size, blocked_);  // never with detailed GPUs
    if (detailed || (size.nodes > 1 && switches_)) return FitDetailed(job, size, why);
    return FitGang(pool_, size, job.placement, blocked_);
  }

  // FitDetailedGang, skipping a request that already failed in this pass with the same
  // nodes blocked: resources only shrink during a pass.
  std::optional<GangFit> FitDetailed(const JobRequest& job, const GangDemand& size, std::string* why) {
    std::vector<int> blocked = blocked_;
    std::sort(blocked.begin(), blocked.end());
    auto key = std::tuple(job.gpu_type, job.gpu_share, job.gpu_memory_mib, job.topology_required, job.tasks_per_node,
                          job.placement == Placement::kPack, size.nodes, size.gpus, size.cpus, std::move(blocked));
    if (auto it = detail_failed_.find(key); it != detail_failed_.end()) {
      *why = it->second;
      return std::nullopt;
    }
    std::optional<GangFit> fit = FitDetailedGang(pool_, job, size, blocked_, why);
    if (!fit) detail_failed_.emplace(std::move(key), *why);
    return fit;
  }

  // The guard's BlockedNodes for `job`, worked out once per kind of request and start:
  // the pool and the reservation's state change only when a job starts.
  void GuardBlocked(const JobRequest& job, const GangDemand& size) {
    const bool ends = guard_ ? guard_->EndsByStart(job.time_limit_ms) : detail_guard_->EndsByStart(job.time_limit_ms);
    if (ends) return;
    auto key = std::tuple(job.gpu_type, job.gpu_share, job.gpu_memory_mib, job.topology_required, job.tasks_per_node,
                          job.placement == Placement::kPack, size.nodes, size.gpus, size.cpus, job.mem_per_node_mb);
    auto [it, fresh] = guard_blocked_.try_emplace(std::move(key));
    if (fresh || it->second.first != starts_) {
      if (guard_) {
        guard_->BlockedNodes(job, size, pool_, &it->second.second);
      } else {
        detail_guard_->BlockedNodes(job, size, pool_, &it->second.second);
      }
      it->second.first = starts_;
    }
    blocked_.insert(blocked_.end(), it->second.second.begin(), it->second.second.end());
  }

  // With preemption on, plans victims for a blocked job; true if it preempts (its reason
  // then says whom) or waits for the victims it preempted earlier. `detail_why`: why a
  // detailed job does not fit now (it waits without a reservation).
  bool TryPreempt(const JobRequest& job, const GangDemand& demand, const std::string* detail_why) {
    const PreemptionPolicy& policy = snapshot_.shares->preemption;
    if (!policy.enabled) return false;
    const int64_t units = units_.PerNode(job) * demand.nodes;
    if (job.nominated) {
      // It preempted already: it waits for those GPUs and preempts nothing more.
      std::string victims;
      for (const RunningJob& r : snapshot_.running) {
        if (r.preempting_for == job.id) victims += (victims.empty() ? "" : ", ") + std::to_string(r.id);
      }
      std::string reason = victims.empty() ? "waiting for the GPUs of the jobs preempted for it to be released"
                                           : "waiting for preempted job(s) " + victims + " to checkpoint and stop";
      if (quotas_->Admits(job.team, units)) quotas_->Add(job.team, units);  // still promised
      // Keeps the reservation logic: the first such job holds the nodes being freed.
      SetReason(job, reason + "; " + (detail_why ? DetailedWait(job, demand, *detail_why) : Wait(job, demand)));
      return true;
    }
    if (preempt_attempts_ >= policy.max_preemptors) return false;
    ++preempt_attempts_;
    if (!planner_) planner_.emplace(snapshot_, pool_, constraints_);
    std::string why;
    std::vector<int> excluded;
    HeldAgainst(job, &excluded);
    auto plan = planner_->Plan(job, demand, units, *quotas_, excluded, &why);
    if (!plan) return false;
    planner_->Commit(*plan);
    quotas_->Add(job.team, units);  // its GPUs are promised: later jobs of its team count them
    for (const std::string& node : plan->front().nodes) Hold(node, job.id);
    std::string victims;
    for (const Preemption& p : *plan) victims += (victims.empty() ? "" : ", ") + std::to_string(p.victim);
    SetReason(job, fmt::format("preempting job(s) {} ({})", victims, plan->front().kind == PreemptKind::kReclaim ? "reclaim" : "priority"));
    for (Preemption& p : *plan) decision_.preempt.push_back(std::move(p));
    return true;
  }

  // Holds `node` (a snapshot node id) for nominated `job`: no other job starts or
  // preempts there in this pass.
  void Hold(const std::string& node, int64_t job) {
    if (node_index_.empty()) {
      for (int n = 0; n < pool_.size(); ++n) node_index_.emplace(pool_.id(n), n);
    }
    if (auto it = node_index_.find(node); it != node_index_.end()) held_[it->second].push_back(job);
  }

  // Appends to `*out` the nodes held for nominated jobs other than `job`.
  void HeldAgainst(const JobRequest& job, std::vector<int>* out) const {
    for (const auto& [node, jobs] : held_) {
      if (std::find(jobs.begin(), jobs.end(), job.id) == jobs.end()) out->push_back(node);
    }
  }

  void Start(const JobRequest& job, const GangDemand& demand, GangFit fit) {
    ++starts_;
    if (quotas_) quotas_->Add(job.team, PlacedUnits(demand, fit));
    JobPlacement& placed = decision_.start.emplace_back();
    placed.job_id = job.id;
    placed.backfilled = Guarded();
    if (guard_) guard_->Commit(demand, job.time_limit_ms, fit, pool_);  // before the pool shrinks
    if (detail_guard_) detail_guard_->Commit(job, demand, fit);
    placed.nodes.reserve(fit.nodes.size());
    const int cpus = static_cast<int>(demand.cpus);  // fits on a node, so fits an int
    for (size_t k = 0; k < fit.nodes.size(); ++k) {
      const int node = fit.nodes[k];
      std::vector<GpuSlice> slices = k < fit.slices.size() ? std::move(fit.slices[k]) : std::vector<GpuSlice>{};
      std::vector<int> taken = fit.gpus[k];
      std::sort(taken.begin(), taken.end());  // a sharing job's GPUs are in task order
      pool_.Take(node, taken, cpus, slices);
      constraints_.Take(node, job.mem_per_node_mb);
      placed.nodes.push_back(NodeAssignment{pool_.id(node), std::move(fit.gpus[k]), cpus, std::move(slices)});
    }
    if (Guarded()) return;
    // Before the reservation, started jobs are part of the head job's projection.
    const int64_t end = EndOf(now_, job.time_limit_ms);
    for (int node : fit.nodes) releases_.push_back(Release{end, node, demand.gpus, cpus});
    started_.push_back(Started{end, job.mem_per_node_mb});
  }

  // The reason `job` waits; reserves for it if it is the first job that could start later.
  std::string Wait(const JobRequest& job, const GangDemand& demand) {
    if (IsConstrained(job)) {  // reserved for in detail: eligible nodes, memory
      if (Guarded()) {
        if (constraints_.CountHosts(pool_, job, demand) >= demand.nodes) return WaitingForReason(HeadJob());
        return constraints_.Reason(pool_, job, demand, unavailable_);
      }
      return constraints_.Reason(pool_, job, demand, unavailable_) + ReserveInDetail(job, demand);
    }
    if (Guarded()) return GuardedWait(demand);
    const int available = CountHosts(pool_, demand);
    std::string reason =
        ResourceReason(demand, available, pool_.CountHosts(demand.gpus, 0), unavailable_);
    return reason + Reserve(job, demand);
  }

  // Once the head job is reserved, a reason depends only on the demand and the free pool,
  // which changes only when a job starts: in a saturated cluster most of the queue waits
  // with a handful of demands, so each reason is worked out once per start, not per job.
  const std::string& GuardedWait(const GangDemand& demand) {
    for (CachedReason& c : guarded_reasons_) {
      if (c.demand == demand) {
        if (c.starts != starts_) c = CachedReason{demand, starts_, GuardedReason(demand)};
        return c.reason;
      }
    }
    return guarded_reasons_.emplace_back(CachedReason{demand, starts_, GuardedReason(demand)}).reason;
  }

  std::string GuardedReason(const GangDemand& demand) const {
    const int available = CountHosts(pool_, demand);
    if (available >= demand.nodes) return WaitingForReason(HeadJob());
    return ResourceReason(demand, available, pool_.CountHosts(demand.gpus, 0), unavailable_);
  }

  // Makes `job` the head job if it can ever fit; returns what its reason gains.
  std::string Reserve(const JobRequest& job, const GangDemand& demand) {
    // Resources only shrink during a pass: a demand covering one that can never fit
    // cannot fit either.
    const auto covered = [&](const GangDemand& d) { return demand.Covers(d); };
    if (std::any_of(never_fit_.begin(), never_fit_.end(), covered)) return {};
    std::optional<ReservationPlan> plan =
        PlanReservation(pool_, releases_, demand, job.placement, now_);
    if (!plan) {
      never_fit_.push_back(demand);
      return {};
    }
    Reservation& r = decision_.reservation.emplace();
    r.job_id = job.id;
    r.start_ms = plan->start_ms;
    for (int node : plan->nodes) r.nodes.push_back(pool_.id(node));
    guard_.emplace(job.id, demand, std::move(*plan), now_);
    return ReservedSuffix(r.start_ms, now_, r.nodes);
  }

  bool Guarded() const { return guard_ || detail_guard_; }
  int64_t HeadJob() const { return guard_ ? guard_->head_job() : detail_guard_->head_job(); }

  // Why a detailed job that did not fit waits (`why`: FitDetailedGang's text); reserves
  // for it if it is the first job that could start later.
  std::string DetailedWait(const JobRequest& job, const GangDemand& demand, const std::string& why) {
    if (!Guarded()) return why + unavailable_ + ReserveInDetail(job, demand);
    // Kept off reserved nodes only: it waits for the head job. Whether it would fit
    // without them is worked out once per kind of request and start.
    auto key = std::tuple(job.gpu_type, job.gpu_share, job.gpu_memory_mib, job.topology_required, job.tasks_per_node,
                          job.placement == Placement::kPack, demand.nodes, demand.gpus, demand.cpus,
                          job.nominated ? job.id : 0);  // only a nominated job may use nodes held for it
    auto [it, fresh] = fits_unguarded_.try_emplace(std::move(key));
    if (fresh || it->second.first != starts_) {
      blocked_.clear();
      HeldAgainst(job, &blocked_);
      std::string ignored;
      it->second = {starts_, FitDetailed(job, demand, &ignored).has_value()};
    }
    if (it->second.second) return WaitingForReason(HeadJob());
    return why + unavailable_;
  }

  // The reservation in detail (detail_backfill.h) for a typed, sharing, topology-bound
  // or constrained `job`; returns what its reason gains.
  std::string ReserveInDetail(const JobRequest& job, const GangDemand& demand) {
    const auto key = std::tuple(job.gpu_type, job.gpu_share, job.gpu_memory_mib, job.topology_required,
                                job.tasks_per_node, job.placement == Placement::kPack, demand.nodes, demand.gpus,
                                demand.cpus, job.nodelist, job.exclude, job.constraint, job.mem_per_node_mb);
    if (detail_never_fit_.contains(key)) return {};
    std::vector<DeviceRelease> releases;
    releases.reserve(releases_.size());
    std::unordered_map<std::string_view, int> index;
    index.reserve(snapshot_.nodes.size());
    for (size_t i = 0; i < snapshot_.nodes.size(); ++i) index.emplace(snapshot_.nodes[i].id, static_cast<int>(i));
    for (const RunningJob& r : snapshot_.running) {
      for (const Usage& u : r.usage) {
        if (auto it = index.find(u.node); it != index.end()) {
          releases.push_back(DeviceRelease{r.end_ms, it->second, u.gpus, u.devices, u.slices, u.cpus, u.memory_mb});
        }
      }
    }
    for (size_t s = 0; s < decision_.start.size(); ++s) {
      for (const NodeAssignment& a : decision_.start[s].nodes) {
        if (auto it = index.find(a.node); it != index.end()) {
          const bool sharing = !a.slices.empty();
          releases.push_back(DeviceRelease{started_[s].end_ms, it->second, sharing ? 0 : static_cast<int>(a.gpus.size()),
                                           sharing ? std::span<const int>() : std::span<const int>(a.gpus), a.slices,
                                           a.cpus, started_[s].mem_mb});
        }
      }
    }
    std::vector<int> excluded;
    HeldAgainst(job, &excluded);
    std::optional<DetailPlan> plan = PlanDetailedReservation(pool_, constraints_, snapshot_.nodes, releases, job,
                                                             demand, excluded, now_);
    if (!plan) {
      detail_never_fit_.insert(key);
      return {};
    }
    Reservation& r = decision_.reservation.emplace();
    r.job_id = job.id;
    r.start_ms = plan->start_ms;
    for (int node : plan->nodes) r.nodes.push_back(pool_.id(node));
    detail_guard_.emplace(job, demand, std::move(*plan), now_);
    return ReservedSuffix(r.start_ms, now_, r.nodes);
  }

  const Snapshot& snapshot_;
  const int64_t now_;
  NodePool pool_;
  ConstraintBook constraints_;
  std::optional<QuotaBook> quotas_;                // with shares
  std::optional<PreemptionPlanner> planner_;       // made at the first preemption attempt
  int preempt_attempts_ = 0;
  const std::string unavailable_;       // " (2 nodes draining, 1 down)"
  std::vector<Release> releases_;       // running jobs, then jobs started before the head job
  const RequestUnits units_;            // what pending jobs ask for, in GPU share units
  std::optional<BackfillGuard> guard_;  // set once the head job is reserved for (counts)
  std::optional<DetailGuard> detail_guard_;  // ... or reserved for in detail
  struct Started {
    int64_t end_ms = kNever;
    int64_t mem_mb = 0;
  };
  std::vector<Started> started_;        // decision_.start's ends and --mem, before the reservation
  std::vector<int> broken_;             // scratch: reserved nodes a fit would take from the head job
  // Requests in detail that cannot fit even on the full capacity (keys: ReserveInDetail).
  std::set<std::tuple<std::string, int, int64_t, bool, int, bool, int, int, int64_t, std::string, std::string,
                      std::string, int64_t>>
      detail_never_fit_;
  std::vector<GangDemand> never_fit_;   // demands beyond the schedulable capacity
  std::vector<int> blocked_;            // scratch: reserved nodes the current job must avoid
  struct CachedReason {
    GangDemand demand;
    int64_t starts = 0;  // starts_ when `reason` was worked out
    std::string reason;
  };
  int64_t starts_ = 0;                  // jobs started so far: the pool changes only then
  std::vector<CachedReason> guarded_reasons_;  // GuardedWait's, one per demand seen
  std::vector<std::string> pending_reason_;  // by index in snapshot_.pending; empty: started
  const bool switches_;                 // nodes carry switch labels: gangs prefer fewest switches
  // Nodes held for nominated jobs (their victims' GPUs come back to them): node -> jobs.
  std::unordered_map<int, std::vector<int64_t>> held_;
  std::unordered_map<std::string_view, int> node_index_;  // made at the first Hold
  // Detailed requests that did not fit, with why (keys: FitDetailed).
  std::map<std::tuple<std::string, int, int64_t, bool, int, bool, int, int, int64_t, std::vector<int>>, std::string>
      detail_failed_;
  // DetailedWait's: request -> (starts_ when worked out, whether it fits off the guard).
  std::map<std::tuple<std::string, int, int64_t, bool, int, bool, int, int, int64_t, int64_t>, std::pair<int64_t, bool>>
      fits_unguarded_;
  // GuardBlocked's, for jobs that outlast the reserved start: request -> (starts_ when
  // worked out, the reserved nodes it must avoid).
  std::map<std::tuple<std::string, int, int64_t, bool, int, bool, int, int, int64_t, int64_t>,
           std::pair<int64_t, std::vector<int>>>
      guard_blocked_;
  Decision decision_;
};

}  // namespace

Decision Schedule(const Snapshot& snapshot) {
  Pass pass(snapshot);
  const std::vector<const JobRequest*> order = pass.Order();
  for (const JobRequest* job : order) pass.Consider(*job);
  Decision out = std::move(pass).Finish();
  out.order.reserve(order.size());
  for (const JobRequest* job : order) out.order.push_back(job->id);
  return out;
}

}  // namespace cohort::sched
