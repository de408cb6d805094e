// ProgressLog: what tasks report at COHORT_REPORT (step, loss, throughput), per job.
//
// Kept in memory (the newest kMaxPoints per job) for `cohort show` and the dashboard;
// lost when the head restarts. A report of the same attempt, rank and step as the newest
// point completes it (its readings replace the point's) rather than adding one. Thread-
// safe: one mutex.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "api/dashboard.h"
#include "api/types.h"
#include "common/error.h"
#include "common/json.h"
#include "common/mutex.h"

namespace cohort::head {

// A task's report and a loss-curve point are the api's views (api/dashboard.h).
using ProgressPoint = api::ProgressPoint;
using LossPoint = api::LossPoint;

// Validates a report body (POST COHORT_REPORT): {"step": N, "loss": x, "samples_per_s": x,
// "tokens_per_s": x, "rank": r, "checkpoint_step": N, "total_steps": N, "val_loss": x};
// only "step" is required; unknown
// fields are rejected. time_ms and attempt are the head's to fill.
Result<ProgressPoint> ProgressReportFromJson(const json& j);

// Shrinks `points` (oldest first) to at most `max_points` for drawing: the series is cut
// into `max_points` runs of consecutive points and each run becomes one point, the mean
// loss at the run's last step. The newest point is always kept exactly. `max_points` < 2
// is treated as 2.
std::vector<LossPoint> DownsampleLoss(const std::vector<LossPoint>& points, size_t max_points);

// A job's loss curve for the dashboard: the points of one rank (the lowest that reported
// a loss; ranks of a data-parallel job report the same curve), downsampled.
struct LossSeries {
  int rank = 0;
  size_t total = 0;  // points with a loss that rank reported (before downsampling)
  std::vector<LossPoint> points;
};

// Percent, rate and ETA from the newest reports of one attempt (`newest_first`, all of that
// attempt): the step is the newest report's; the rate is steps per second between the
// oldest and the newest of the last kEtaWindow reports of the newest report's rank (none
// with fewer than two at different times, or when the steps went back); total_steps is the
// newest one reported; ETA = (total_steps - step) / rate. nullopt for no reports.
inline constexpr size_t kEtaWindow = 32;
std::optional<api::ProgressEta> EstimateProgress(const std::vector<ProgressPoint>& newest_first);

class ProgressLog {
 public:
  static constexpr size_t kMaxPoints = 10'000;

  void Add(api::JobId job, ProgressPoint p);
  // The newest `limit` points of a job, oldest first.
  std::vector<ProgressPoint> Get(api::JobId job, size_t limit) const;
  std::optional<ProgressPoint> Latest(api::JobId job) const;
  // The newest point of `attempt` of the job (any rank); std::nullopt when that attempt
  // has reported nothing. Cheap: scans back from the newest point only past points of
  // later attempts.
  std::optional<ProgressPoint> LatestOfAttempt(api::JobId job, int attempt) const;
  // The highest checkpoint_step any attempt of the job has reported (the checkpoint a run
  // wrote or resumed from); std::nullopt when none has. O(1).
  std::optional<int64_t> NewestCheckpoint(api::JobId job) const;
  // The job's loss curve, at most `max_points` points; empty when no loss was reported.
  LossSeries Loss(api::JobId job, size_t max_points) const;
  // Percent, rate and ETA of `attempt` (EstimateProgress over its newest reports);
  // std::nullopt when that attempt has reported nothing.
  std::optional<api::ProgressEta> Eta(api::JobId job, int attempt) const;

 private:
  mutable Mutex mu_;
  std::map<api::JobId, std::deque<ProgressPoint>> points_ GUARDED_BY(mu_);
  std::map<api::JobId, int64_t> newest_checkpoint_ GUARDED_BY(mu_);
};

}  // namespace cohort::head
