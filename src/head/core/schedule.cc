#include "head/core/schedule.h"

#include <algorithm>
#include <set>

#include "common/clock.h"
#include "head/core/dependencies.h"
#include "head/core/gpu_detail.h"
#include "head/core/job_control.h"
#include "head/core/lifecycle.h"
#include "head/core/preempt.h"
#include "head/core/shares.h"
#include "head/core/tx.h"

namespace cohort::head::core {

using api::Job;
using api::JobState;
using api::NodeState;

namespace {

// Slurm's reason name, then when and how long: "BeginTime (not before 2026-12-01T09:00:00Z,
// in 1h02m)".
std::string BeginReason(int64_t begin_ms, int64_t now_ms) {
  return fmt::format("BeginTime (not before {}, in {})", FormatTimestamp(begin_ms), FormatDuration(begin_ms - now_ms));
}

// GPUs (by index) and CPUs in use on one node.
struct Busy {
  std::vector<bool> gpus;
  int cpus = 0;
  SharedGpus shared;  // parts of GPUs held by sharing tasks (gpu_detail.h)
  void Take(const std::vector<int>& g, int c) {
    for (int i : g) {
      if (i >= 0 && static_cast<size_t>(i) < gpus.size()) gpus[static_cast<size_t>(i)] = true;
    }
    cpus += c;
  }
};

// GPUs and CPUs in use on node `name`: its RUNNING jobs (`here`, may be null), stopping
// attempts, and tasks the agent still reports that belong to no current attempt.
Busy BusyOn(const ClusterState& s, const api::Node& node, const NodeRuntime* rt, const std::set<api::JobId>* here) {
  Busy busy;
  busy.gpus.assign(node.gpus.size(), false);
  if (here) {
    for (api::JobId id : *here) {
      for (const auto& na : s.jobs.at(id).allocation.nodes) {
        if (na.node != node.name) continue;
        if (AddSharedTasks(na, busy.shared)) {
          busy.cpus += na.cpus;
        } else {
          busy.Take(na.gpus, na.cpus);
        }
      }
    }
  }
  if (!rt) return busy;
  for (const auto& st : rt->stopping) busy.Take(st.gpus, st.cpus);
  for (const auto& t : rt->reported) {
    if (!t.running) continue;
    bool fenced = std::any_of(rt->stopping.begin(), rt->stopping.end(), [&](const StoppingAttempt& st) {
      return st.job == t.job && st.attempt == t.attempt;
    });
    if (fenced) continue;  // counted above
    bool current = CurrentAttempt(s, t.job, t.attempt) && here && here->contains(t.job);
    if (current) continue;
    busy.Take(t.gpus, t.cpus);
  }
  return busy;
}

// The entry of `map` (sorted by node name) for `name`, advancing `it` past smaller names:
// walking the nodes in order, each map is walked once.
template <typename Map>
const typename Map::mapped_type* Seek(const Map& map, typename Map::const_iterator& it, const std::string& name) {
  while (it != map.end() && it->first < name) ++it;
  return it != map.end() && it->first == name ? &it->second : nullptr;
}

// For each job whose earlier attempt still stops somewhere, "attempt N on node-1, node-2",
// from one pass over the nodes (not one per pending job).
std::map<api::JobId, std::string> StoppingByJob(const ClusterState& s) {
  std::map<api::JobId, std::pair<int, std::string>> where;  // job → (attempt, nodes)
  for (const auto& [name, rt] : s.runtime) {
    std::set<api::JobId> seen;  // the first entry of each job on this node
    for (const auto& st : rt.stopping) {
      if (!seen.insert(st.job).second) continue;
      auto& [attempt, nodes] = where[st.job];
      nodes += (nodes.empty() ? "" : ", ") + name;
      attempt = st.attempt;
    }
  }
  std::map<api::JobId, std::string> out;
  for (auto& [id, w] : where) out[id] = fmt::format("attempt {} on {}", w.first, w.second);
  return out;
}

bool AnyElasticJobBelowSize(const ClusterState& s) {
  for (const auto& [node, ids] : s.node_jobs) {
    for (api::JobId id : ids) {
      const Job& j = s.jobs.at(id);
      if (j.spec.min_nodes > 0 && static_cast<int>(j.allocation.nodes.size()) < j.spec.nodes) return true;
    }
  }
  return false;
}

// Asks elastic jobs running below `nodes` to grow back when the free nodes allow it and
// nothing waits, and withdraws the request when they no longer do.
void PlanGrowth(Tx& tx, const sched::Snapshot& snap, const sched::Decision& decision) {
  if (!AnyElasticJobBelowSize(tx.s)) return;  // nothing to grow or withdraw
  // Free resources per node after this pass's starts.
  struct Free {
    int gpus = 0, cpus = 0;
    bool usable = false;
  };
  std::map<std::string, Free> free;
  for (const auto& v : snap.nodes) free[v.id] = {static_cast<int>(v.free_gpus.size()), v.free_cpus, v.unavailable.empty()};
  for (const auto& p : decision.start) {
    for (const auto& a : p.nodes) {
      free[a.node].gpus -= static_cast<int>(a.gpus.size());
      free[a.node].cpus -= a.cpus;
    }
  }
  const bool queue_empty = tx.s.pending.empty();
  for (api::JobId id : RunningJobIds(tx.s)) {
    Job& job = tx.s.jobs.at(id);
    const int have = static_cast<int>(job.allocation.nodes.size());
    if (job.state != JobState::kRunning || job.spec.min_nodes == 0 || have >= job.spec.nodes) continue;
    if (job.move && !job.move->grow) continue;  // a drain move is under way
    // Nodes outside the gang that could take one more member of it.
    std::vector<std::string> spare;
    for (const auto& [name, f] : free) {
      bool mine = std::any_of(job.allocation.nodes.begin(), job.allocation.nodes.end(),
                              [&](const api::NodeAllocation& na) { return na.node == name; });
      if (!mine && f.usable && f.gpus >= job.spec.gpus_per_node &&
          f.cpus >= job.spec.tasks_per_node * job.spec.cpus_per_task) {
        spare.push_back(name);
      }
    }
    const bool can_grow = queue_empty && have + static_cast<int>(spare.size()) >= job.spec.nodes;
    if (!can_grow) {
      if (job.move) {
        tx.fx.Info("job {} will not grow: the nodes it would use are taken or other jobs wait", id);
        job.move.reset();
        tx.fx.StoreJob(job);
      }
      continue;
    }
    // Count the nodes it would use as taken for the jobs after it.
    for (int k = 0; k < job.spec.nodes - have; ++k) {
      free[spare[static_cast<size_t>(k)]].gpus -= job.spec.gpus_per_node;
      free[spare[static_cast<size_t>(k)]].cpus -= job.spec.tasks_per_node * job.spec.cpus_per_task;
    }
    if (job.move) continue;  // already asked
    // The job's own next checkpoint counts: past every one reported so far, including the
    // one this attempt resumed from, which only its first report names (a checkpoint the
    // previous attempt wrote but never reported). So ask only once the attempt has
    // reported; a job that never reports progress never grows.
    auto last = tx.ctx.latest_progress(id, job.attempt);
    if (!last) continue;
    api::MoveRequest r;
    r.requested_ms = snap.now_ms;
    r.grow = true;
    r.baseline_checkpoint = std::max(tx.ctx.newest_checkpoint(id).value_or(-1), last->checkpoint_step.value_or(-1));
    job.move = std::move(r);
    tx.fx.StoreJob(job);
    tx.fx.Info("job {} runs on {} of {} nodes and the rest are free: it grows back at its next checkpoint", id, have,
               job.spec.nodes);
  }
}

}  // namespace

sched::JobRequest ToRequest(const Job& job) {
  sched::JobRequest r;
  r.id = job.id;
  r.priority = job.spec.priority;
  r.submit_ms = job.submit_ms;
  r.nodes = job.spec.nodes;
  r.min_nodes = job.spec.min_nodes;
  r.tasks_per_node = job.spec.tasks_per_node;
  r.gpus_per_node = job.spec.gpus_per_node;
  r.cpus_per_task = job.spec.cpus_per_task;
  r.placement = job.spec.placement == api::Placement::kPack ? sched::Placement::kPack : sched::Placement::kSpread;
  r.time_limit_ms = job.spec.time_limit_s * 1000;
  r.nodelist = job.spec.nodelist;
  r.exclude = job.spec.exclude;
  r.constraint = job.spec.constraint;
  r.mem_per_node_mb = job.spec.mem_per_node_mb;
  AddGpuRequest(job.spec, r);
  return r;
}

SchedulerInput BuildSchedulerInput(const ClusterState& s, Now now) {
  SchedulerInput in;
  sched::Snapshot& snap = in.snapshot;
  for (api::JobId id : s.pending) {
    const api::JobSpec& spec = s.jobs.at(id).spec;
    in.wants_gpu_detail |= !spec.gpu_type.empty() || spec.shares_gpu();
  }
  snap.now_ms = now.unix_ms;
  auto rt_it = s.runtime.cbegin();
  auto jobs_it = s.node_jobs.cbegin();
  snap.nodes.reserve(s.nodes.size());
  for (const auto& [name, n] : s.nodes) {
    const NodeRuntime* rt = Seek(s.runtime, rt_it, name);
    sched::NodeView v;
    v.id = name;
    if (n.state == NodeState::kDown) {
      v.unavailable = "down";
    } else if (rt && rt->unreachable) {
      v.unavailable = "unreachable";  // liveness.h: silent, not DOWN while the unhealthy zone holds
    } else if (rt && !rt->reported_since_load) {
      // After a restart: tasks of ended attempts may still hold its GPUs (state.h).
      v.unavailable = "unheard since the head restarted";
    } else if (n.drain) {
      v.unavailable = "draining";
    }
    const std::set<api::JobId>* here = Seek(s.node_jobs, jobs_it, name);
    const Busy b = BusyOn(s, n, rt, here);
    bool detail = false;  // MIG instances or topology: the scheduler gets every device
    for (int g = 0; g < static_cast<int>(n.gpus.size()); ++g) {
      const api::Gpu& gpu = n.gpus[static_cast<size_t>(g)];
      detail |= !gpu.mig_profile.empty() || gpu.nvlink_island >= 0 || gpu.pcie_switch >= 0;
      if (!PlainGpu(gpu)) continue;
      ++v.total_gpus;
      // An unhealthy GPU is never free (gpu_health.h); `cohort resume` returns it. Nor is
      // one that sharing tasks hold a part of.
      if (!b.gpus[static_cast<size_t>(g)] && gpu.healthy && !b.shared.contains(g)) v.free_gpus.push_back(g);
    }
    // Typed and sharing jobs need the devices; so do nodes with MIG or topology.
    if (detail || !b.shared.empty() || in.wants_gpu_detail) v.gpus = DeviceViews(n, b.gpus, b.shared);
    v.network_switch = NetworkSwitch(n);
    v.total_cpus = n.cpus;
    v.free_cpus = std::max(0, n.cpus - b.cpus);
    // Node constraints (sched/constraints.h): features, and memory less the running jobs' --mem.
    v.features = n.features;
    v.memory_mb = n.memory_bytes >> 20;
    v.free_memory_mb = v.memory_mb;
    if (here) {
      for (api::JobId id : *here) v.free_memory_mb -= s.jobs.at(id).spec.mem_per_node_mb;
    }
    snap.nodes.push_back(std::move(v));
  }
  for (api::JobId id : RunningJobIds(s)) {
    const Job& job = s.jobs.at(id);
    sched::RunningJob r;
    r.id = id;
    r.end_ms = job.spec.time_limit_s > 0 ? job.start_ms + job.spec.time_limit_s * 1000 : INT64_MAX;
    for (const auto& na : job.allocation.nodes) {
      // A sharing job gives back parts of GPUs, never a whole one.
      const int whole = job.spec.shares_gpu() ? 0 : static_cast<int>(na.gpus.size());
      sched::Usage& u = r.usage.emplace_back(sched::Usage{na.node, whole, na.cpus});
      // In detail, so that a typed, sharing or topology-bound job preempts only the jobs
      // whose devices it can use (sched/preempt.h).
      u.memory_mb = job.spec.mem_per_node_mb;
      if (whole > 0) u.devices = na.gpus;
      for (const api::TaskPlacement& t : na.tasks) {
        if (t.gpu_share <= 0 && t.gpu_memory_mib <= 0) continue;
        for (int g : t.gpus) u.slices.push_back(sched::GpuSlice{g, t.gpu_share, t.gpu_memory_mib});
      }
    }
    snap.running.push_back(std::move(r));
  }
  const std::map<api::JobId, std::string> stopping = StoppingByJob(s);
  for (api::JobId id : s.pending) {
    if (const Job& job = s.jobs.at(id); job.held) {
      in.held_reasons[id] = HeldReason(job);
      continue;
    }
    if (const Job& job = s.jobs.at(id); job.spec.begin_ms > now.unix_ms) {
      in.begin_reasons[id] = BeginReason(job.spec.begin_ms, now.unix_ms);
      continue;
    }
    // The previous attempt must be gone everywhere before the next one starts.
    if (auto where = stopping.find(id); where != stopping.end()) {
      in.stopping_reasons[id] = "waiting for " + where->second + " to stop";
      continue;
    }
    if (const Job& job = s.jobs.at(id); job.spec.is_service()) {
      if (const ReplicaBackoff b = ReplicaBackoffOf(job); b.delay_ms > 0 && now.unix_ms < b.start_after_ms) {
        in.backoff_reasons[id] = fmt::format(
            "crash loop back-off: {} attempts in a row ended within {} of starting (the last: {}); "
            "next start in {} (cohort logs {} -a {})",
            b.QuickEndsText(), FormatDuration(kReplicaQuickEndMs), b.last_end,
            FormatDuration(b.start_after_ms - now.unix_ms), id, job.attempt - 1);
        continue;
      }
    }
    snap.pending.push_back(ToRequest(s.jobs.at(id)));
  }
  return in;
}

PassResult Schedule(ClusterState& s, const Context& ctx, Now now) {
  PassResult out;
  AccrueUsage(s, ctx, now);  // fair share (shares.h)
  // Nothing to place; a pass still runs while an elastic job could grow back. A job that
  // preempted others and has left the queue lets its victims keep running.
  if (s.pending.empty() && !AnyElasticJobBelowSize(s)) {
    if (!s.shares.nominated.empty()) {
      Tx tx(s, ctx, now);
      PrunePreemptions(tx);
      out.effects = std::move(tx.fx);
    }
    return out;
  }
  out.ran = true;
  Tx tx(s, ctx, now);
  PrunePreemptions(tx);
  SchedulerInput in = BuildSchedulerInput(s, now);
  WithholdForDependencies(tx, in);
  AddShares(s, ctx, now, in.snapshot);
  sched::Decision decision = sched::Schedule(in.snapshot);
  for (const auto& p : decision.start) {
    std::vector<NodePlacement> nodes;
    for (const auto& a : p.nodes) nodes.push_back({a.node, a.gpus, a.cpus, a.slices});
    api::Job& job = s.jobs.at(p.job_id);
    const bool nominated = job.nomination.has_value();
    job.nomination.reset();  // stored with the start
    s.shares.nominated.erase(p.job_id);
    StartJob(tx, job, nodes);
    // Victims not yet moved are not needed any more (it found GPUs elsewhere).
    if (nominated) WithdrawPreemptions(tx, job.id, fmt::format("job {} started before it was moved", job.id));
  }
  AccrueUsage(s, ctx, now);  // the attempts just started are accounted from now
  ApplyPreemptions(tx, decision.preempt);
  PlanGrowth(tx, in.snapshot, decision);
  // The decision's reasons are in id order: the map takes them over, and drops those of
  // jobs no longer pending, without a lookup per job.
  s.pending_reasons = std::move(decision.pending_reasons);
  s.queue_order = std::move(decision.order);
  std::erase_if(s.pending_reasons, [&](const auto& entry) { return !s.pending.contains(entry.first); });
  for (auto& [id, text] : in.stopping_reasons) s.pending_reasons[id] = std::move(text);
  for (auto& [id, text] : in.held_reasons) s.pending_reasons[id] = std::move(text);
  for (auto& [id, text] : in.backoff_reasons) s.pending_reasons[id] = std::move(text);
  for (auto& [id, text] : in.begin_reasons) s.pending_reasons[id] = std::move(text);
  for (auto& [id, text] : in.dependency_reasons) {
    if (s.pending.contains(id)) s.pending_reasons[id] = std::move(text);
  }
  out.started = static_cast<int>(decision.start.size());
  out.effects = std::move(tx.fx);
  return out;
}

}  // namespace cohort::head::core
