// The trace simulator the preemption property tests share: jobs run on a cluster in device
// detail (detail_cluster.h), one pass a simulated minute. Victims stop one step after they
// are asked (their checkpoint) and go back to the queue with their preemptor in
// preempted_by, as the head requeues them; jobs end after their drawn length. The
// snapshot of each pass is derived from the running jobs, so free views never drift from
// what the jobs hold. The tests draw the teams and jobs and check their own invariants;
// this file only runs the cluster and counts what each team holds, in GPU share units.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "detail_cluster.h"
#include "sched/snapshot.h"

namespace cohort::sched::testing {

class TraceSim {
 public:
  struct Live {
    JobRequest job;
    int64_t start_ms = 0;
    int64_t end_ms = 0;
    std::vector<NodeAssignment> where;
    int64_t preempting_for = 0;  // being preempted: stops at the next step
  };

  explicit TraceSim(std::vector<DetailNode> nodes) : nodes_(std::move(nodes)) {}

  const std::vector<DetailNode>& nodes() const { return nodes_; }
  std::vector<JobRequest>& pending() { return pending_; }
  std::vector<Live>& running() { return running_; }

  // A job arrives; it runs `length_ms` once started.
  void Submit(JobRequest job, int64_t length_ms) {
    length_[job.id] = length_ms;
    pending_.push_back(std::move(job));
  }

  // The start of a step at `now`: victims asked a step ago stop and go back to the queue,
  // jobs past their end leave. Returns the victims that stopped.
  std::vector<int64_t> Step(int64_t now) {
    std::vector<int64_t> stopped;
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->preempting_for != 0) {
        JobRequest back = it->job;
        back.preempted_by.push_back(it->preempting_for);
        back.nominated = false;
        back.nominated_nodes.clear();
        pending_.push_back(std::move(back));
        stopped.push_back(it->job.id);
        it = running_.erase(it);
      } else if (it->end_ms <= now) {
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    return stopped;
  }

  // The pass's snapshot: the running jobs on the cluster, and the queue (without shares).
  Snapshot SnapshotAt(int64_t now) const {
    std::vector<RunningJob> rj;
    rj.reserve(running_.size());
    for (const Live& l : running_) rj.push_back(ToRunning(l, now));
    Snapshot snap = DetailSnapshot(now, nodes_, std::move(rj));
    snap.pending = pending_;
    return snap;
  }

  // Asks running job `victim` to stop for `preemptor`; null if it is not running.
  Live* Ask(int64_t victim, int64_t preemptor) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const Live& l) { return l.job.id == victim; });
    if (it == running_.end()) return nullptr;
    it->preempting_for = preemptor;
    return &*it;
  }

  // Starts the decision's jobs; a failure (a job not pending, a GPU given beyond its share
  // units) is reported and returns false.
  bool Start(const Decision& d, int64_t now) {
    for (const JobPlacement& p : d.start) {
      auto it = std::find_if(pending_.begin(), pending_.end(), [&](const JobRequest& j) { return j.id == p.job_id; });
      if (it == pending_.end()) {
        ADD_FAILURE() << "started job " << p.job_id << " is not pending";
        return false;
      }
      Live l;
      l.job = *it;
      l.start_ms = now;
      l.end_ms = now + length_.at(p.job_id);
      l.where = p.nodes;
      pending_.erase(it);
      running_.push_back(std::move(l));
    }
    std::map<std::pair<std::string, int>, int> units;  // (node, gpu) -> share units held
    for (const Live& l : running_) {
      for (const NodeAssignment& a : l.where) {
        if (a.slices.empty()) {
          for (int g : a.gpus) units[{a.node, g}] += kGpuShareUnits;
        }
        for (const GpuSlice& s : a.slices) units[{a.node, s.gpu}] += s.share;
      }
    }
    for (const auto& [gpu, held] : units) {
      if (held > kGpuShareUnits) {
        ADD_FAILURE() << "GPU " << gpu.first << ":" << gpu.second << " given " << held << " share units";
        return false;
      }
    }
    return true;
  }

  // What a running job holds, in GPU share units, counted from its placement (not by the
  // scheduler's own HeldUnits, so that the checks do not share its mistakes).
  static int64_t Units(const Live& l) {
    int64_t units = 0;
    for (const NodeAssignment& a : l.where) {
      if (a.slices.empty()) units += static_cast<int64_t>(a.gpus.size()) * kGpuShareUnits;
      for (const GpuSlice& s : a.slices) units += s.share;
    }
    return units;
  }

  // What each team's running jobs hold, in GPU share units.
  std::map<std::string, int64_t> UnitsByTeam() const {
    std::map<std::string, int64_t> out;
    for (const Live& l : running_) out[l.job.team] += Units(l);
    return out;
  }

  // The running job as a snapshot lists it: whole devices, or its tasks' slices.
  static RunningJob ToRunning(const Live& l, int64_t now) {
    RunningJob r;
    r.id = l.job.id;
    for (const NodeAssignment& a : l.where) {
      if (!a.slices.empty()) {
        Usage u;
        u.node = a.node;
        u.cpus = a.cpus;
        u.slices = a.slices;
        r.usage.push_back(std::move(u));
      } else {
        r.usage.push_back(Whole(a.node, a.gpus, a.cpus));
      }
    }
    r.team = l.job.team;
    r.priority = l.job.priority;
    r.start_ms = l.start_ms;
    r.checkpoint_ms = l.start_ms + (now - l.start_ms) / 2;
    r.preemptible = l.preempting_for == 0;
    r.preempting_for = l.preempting_for;
    return r;
  }

 private:
  std::vector<DetailNode> nodes_;
  std::vector<JobRequest> pending_;
  std::vector<Live> running_;
  std::map<int64_t, int64_t> length_;
};

}  // namespace cohort::sched::testing
