// Node liveness, time limits and hung tasks, run by the head's control loop every ~100 ms.
//
// A node whose agent has been silent for the failure timeout is DOWN, and every gang
// with a task on it is stopped everywhere and requeued (or failed). The agent fences
// itself earlier (fence timeout < failure timeout), so by the time the gang is placed
// again its old tasks are already dead: a job never runs twice.
//
// A job with progress_timeout_s whose current attempt has reported no progress
// (COHORT_REPORT) for that long is hung: its gang fails the same way. The check costs one
// ProgressLog lookup per RUNNING job that sets the timeout.
#include "common/log.h"
#include "head/cluster.h"

namespace cohort::head {

using api::JobState;
using api::NodeState;

void Cluster::CheckLiveness() {
  std::unique_lock lock(mu_);
  for (auto& [name, node] : nodes_) {
    if (node.state != NodeState::kUp) continue;
    NodeRuntime& rt = runtime_[name];
    int64_t age = HeartbeatAgeMs(rt);
    if (age <= config_.timing.failure_timeout_ms) continue;
    node.state = NodeState::kDown;
    node.reason = fmt::format("no heartbeat for {}", FormatDuration(age));
    MarkDirtyLocked(node);
    LOG_WARN("node {} is DOWN: {}", name, node.reason);
    if (auto nj = node_jobs_.find(name); nj != node_jobs_.end()) {
      std::vector<api::JobId> ids(nj->second.begin(), nj->second.end());
      for (api::JobId id : ids) {
        FailGangLocked(jobs_.at(id), fmt::format("node {} went down ({})", name, node.reason),
                       std::nullopt, /*may_restart=*/true);
      }
    }
    rt.reported.clear();
    // The agent fenced its tasks before the failure timeout (its leases ran out).
    rt.stopping.clear();
    RequestScheduleLocked();
  }
  int64_t now = NowUnixMs();
  std::set<api::JobId> running;
  for (const auto& [node, ids] : node_jobs_) running.insert(ids.begin(), ids.end());
  for (api::JobId id : running) {
    api::Job& job = jobs_.at(id);
    if (job.state != JobState::kRunning) continue;
    if (job.spec.time_limit_s > 0 && now - job.start_ms > job.spec.time_limit_s * 1000) {
      FinishJobLocked(job, JobState::kFailed,
                      fmt::format("time limit of {} exceeded", FormatDuration(job.spec.time_limit_s * 1000)),
                      std::nullopt);
    }
  }
  CheckProgressLocked(running, now);
  CheckMovesLocked(running, now);
  (void)FlushLocked();
  UnlockAndWake(lock);
}

void Cluster::CheckProgress(int64_t now_ms) {
  std::unique_lock lock(mu_);
  std::set<api::JobId> running;
  for (const auto& [node, ids] : node_jobs_) running.insert(ids.begin(), ids.end());
  CheckProgressLocked(running, now_ms);
  (void)FlushLocked();
  UnlockAndWake(lock);
}

void Cluster::CheckProgressLocked(const std::set<api::JobId>& running, int64_t now_ms) {
  for (api::JobId id : running) {
    api::Job& job = jobs_.at(id);
    if (job.state != JobState::kRunning || job.spec.progress_timeout_s <= 0) continue;
    const int64_t timeout_ms = job.spec.progress_timeout_s * 1000;
    auto last = progress_.LatestOfAttempt(id, job.attempt);
    int64_t since = last ? last->time_ms : std::max(job.start_ms, loaded_ms_);
    if (now_ms - since <= timeout_ms) continue;
    std::string why = fmt::format("no progress reported for {}s (progress_timeout_s); ", job.spec.progress_timeout_s);
    if (last) {
      why += fmt::format("last step {} at {} (rank {})", last->step, FormatTimestamp(last->time_ms), last->rank);
    } else {
      why += fmt::format("none since attempt {} started at {}", job.attempt, FormatTimestamp(since));
    }
    LOG_WARN("job {} attempt {} is hung: {}", id, job.attempt, why);
    FailGangLocked(job, why, std::nullopt, /*may_restart=*/true);
  }
}

}  // namespace cohort::head
