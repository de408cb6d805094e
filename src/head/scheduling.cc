// One scheduling pass: snapshot the cluster for the pure scheduler, start what it places.
//
// GPUs count as busy when a RUNNING job holds them, and also while a task of an ended
// attempt may still run on them (a cancelled or failed gang that is still shutting down,
// cluster.h's StoppingAttempt), so a new job never shares a GPU with a dying one. A job
// whose previous attempt is still stopping somewhere waits: its gang never runs twice.
#include <algorithm>

#include "common/log.h"
#include "head/cluster.h"
#include "head/sched_bridge.h"

namespace cohort::head {

using api::Job;
using api::JobState;
using api::NodeState;

int Cluster::Schedule() {
  std::unique_lock lock(mu_);
  auto t0 = SteadyClock::now();
  schedule_requested_ = false;
  if (pending_.empty()) {
    // Nothing to place; a pass still runs while an elastic job could grow back.
    bool shrunk = false;
    for (const auto& [node, ids] : node_jobs_) {
      for (api::JobId id : ids) {
        const Job& j = jobs_.at(id);
        shrunk = shrunk || (j.spec.min_nodes > 0 && static_cast<int>(j.allocation.nodes.size()) < j.spec.nodes);
      }
    }
    if (!shrunk) return 0;
  }

  sched::Snapshot snap;
  snap.now_ms = NowUnixMs();
  std::map<std::string, std::pair<std::set<int>, int>> busy;  // node → (gpus, cpus)
  for (const auto& [name, ids] : node_jobs_) {
    for (api::JobId id : ids) {
      const Job& job = jobs_.at(id);
      for (const auto& na : job.allocation.nodes) {
        if (na.node != name) continue;
        busy[name].first.insert(na.gpus.begin(), na.gpus.end());
        busy[name].second += na.cpus;
      }
    }
  }
  for (const auto& [name, rt] : runtime_) {
    for (const auto& s : rt.stopping) {
      busy[name].first.insert(s.gpus.begin(), s.gpus.end());
      busy[name].second += s.cpus;
    }
    for (const auto& t : rt.reported) {
      if (!t.running) continue;
      bool fenced = std::any_of(rt.stopping.begin(), rt.stopping.end(), [&](const StoppingAttempt& s) {
        return s.job == t.job && s.attempt == t.attempt;
      });
      if (fenced) continue;  // counted above
      auto j = jobs_.find(t.job);
      bool current = j != jobs_.end() && j->second.state == JobState::kRunning &&
                     j->second.attempt == t.attempt && node_jobs_.count(name) &&
                     node_jobs_.at(name).contains(t.job);
      if (current) continue;
      busy[name].first.insert(t.gpus.begin(), t.gpus.end());
      busy[name].second += t.cpus;
    }
  }
  for (const auto& [name, n] : nodes_) {
    sched::NodeView v;
    v.id = name;
    if (n.state == NodeState::kDown) {
      v.unavailable = "down";
    } else if (n.drain) {
      v.unavailable = "draining";
    }
    v.total_gpus = static_cast<int>(n.gpus.size());
    const auto& b = busy[name];
    for (int g = 0; g < v.total_gpus; ++g) {
      // An unhealthy GPU is never free (gpu_health.cc); `cohort resume` returns it.
      if (!b.first.contains(g) && n.gpus[static_cast<size_t>(g)].healthy) v.free_gpus.push_back(g);
    }
    v.total_cpus = n.cpus;
    v.free_cpus = std::max(0, n.cpus - b.second);
    snap.nodes.push_back(std::move(v));
  }
  std::set<api::JobId> running;
  for (const auto& [node, ids] : node_jobs_) running.insert(ids.begin(), ids.end());
  for (api::JobId id : running) {
    const Job& job = jobs_.at(id);
    sched::RunningJob r;
    r.id = id;
    r.end_ms = job.spec.time_limit_s > 0 ? job.start_ms + job.spec.time_limit_s * 1000 : INT64_MAX;
    for (const auto& na : job.allocation.nodes) {
      r.usage.push_back({na.node, static_cast<int>(na.gpus.size()), na.cpus});
    }
    snap.running.push_back(std::move(r));
  }
  std::map<api::JobId, std::string> stopping_reasons;
  for (api::JobId id : pending_) {
    // The previous attempt must be gone everywhere before the next one starts.
    if (std::string where = StoppingWhereLocked(id); !where.empty()) {
      stopping_reasons[id] = "waiting for " + where + " to stop";
      continue;
    }
    snap.pending.push_back(ToRequest(jobs_.at(id)));
  }

  sched::Decision decision = sched::Schedule(snap);
  for (const auto& p : decision.start) {
    Job& job = jobs_.at(p.job_id);
    std::vector<std::pair<std::string, std::vector<int>>> nodes;
    std::vector<int> cpus;
    for (const auto& a : p.nodes) {
      nodes.emplace_back(a.node, a.gpus);
      cpus.push_back(a.cpus);
    }
    StartJobLocked(job, nodes, cpus, snap.now_ms);
  }
  PlanGrowthLocked(snap, decision);
  pending_reasons_.clear();
  for (auto& [id, reason] : decision.pending_reasons) {
    if (pending_.contains(id)) pending_reasons_[id] = std::move(reason);
  }
  for (auto& [id, text] : stopping_reasons) pending_reasons_[id] = std::move(text);
  (void)FlushLocked();
  last_pass_ = std::chrono::duration_cast<Millis>(SteadyClock::now() - t0);
  pass_seconds_.Observe(std::chrono::duration<double>(SteadyClock::now() - t0).count());
  int started = static_cast<int>(decision.start.size());
  UnlockAndWake(lock);
  return started;
}

void Cluster::PlanGrowthLocked(const sched::Snapshot& snap, const sched::Decision& decision) {
  // Free resources per node after this pass's starts.
  struct Free {
    int gpus = 0, cpus = 0;
    bool usable = false;
  };
  std::map<std::string, Free> free;
  for (const auto& v : snap.nodes) {
    free[v.id] = {static_cast<int>(v.free_gpus.size()), v.free_cpus, v.unavailable.empty()};
  }
  for (const auto& p : decision.start) {
    for (const auto& a : p.nodes) {
      free[a.node].gpus -= static_cast<int>(a.gpus.size());
      free[a.node].cpus -= a.cpus;
    }
  }
  const bool queue_empty = pending_.empty();
  std::set<api::JobId> running;
  for (const auto& [node, ids] : node_jobs_) running.insert(ids.begin(), ids.end());
  for (api::JobId id : running) {
    Job& job = jobs_.at(id);
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
        LOG_INFO("job {} will not grow: the nodes it would use are taken or other jobs wait", id);
        job.move.reset();
        MarkDirtyLocked(job);
      }
      continue;
    }
    // Count the nodes it would use as taken for the jobs after it.
    for (int k = 0; k < job.spec.nodes - have; ++k) {
      free[spare[static_cast<size_t>(k)]].gpus -= job.spec.gpus_per_node;
      free[spare[static_cast<size_t>(k)]].cpus -= job.spec.tasks_per_node * job.spec.cpus_per_task;
    }
    if (job.move) continue;  // already asked
    api::MoveRequest r;
    r.requested_ms = snap.now_ms;
    r.grow = true;
    if (auto last = progress_.LatestOfAttempt(id, job.attempt); last && last->checkpoint_step) {
      r.baseline_checkpoint = *last->checkpoint_step;
    }
    job.move = std::move(r);
    MarkDirtyLocked(job);
    LOG_INFO("job {} runs on {} of {} nodes and the rest are free: it grows back at its next checkpoint", id, have,
             job.spec.nodes);
  }
}

}  // namespace cohort::head
