// ProgressLog: what tasks report at COHORT_REPORT (step, loss, throughput), per job.
//
// Kept in memory (the newest kMaxPoints per job) for `cohort show` and the dashboard;
// lost when the head restarts. Thread-safe: one mutex.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "api/types.h"
#include "common/error.h"
#include "common/json.h"
#include "common/mutex.h"

namespace cohort::head {

struct ProgressPoint {
  int64_t time_ms = 0;
  int attempt = 0;
  int rank = 0;
  int64_t step = 0;
  std::optional<double> loss;
  std::optional<double> samples_per_s;
  std::optional<double> tokens_per_s;
  // The newest checkpoint this attempt has written (its step), when the job reports it:
  // `cohort drain --now` moves a job once it reports a checkpoint newer than the request.
  std::optional<int64_t> checkpoint_step;
};

json ToJson(const ProgressPoint& p);
// Validates a report body: {"step": N, "loss": x, "samples_per_s": x, "tokens_per_s": x,
// "rank": r, "checkpoint_step": N}; only "step" is required; unknown fields are rejected.
Result<ProgressPoint> ProgressPointFromJson(const json& j);

// One point of a loss curve.
struct LossPoint {
  int64_t step = 0;
  double loss = 0;
};

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
  // The job's loss curve, at most `max_points` points; empty when no loss was reported.
  LossSeries Loss(api::JobId job, size_t max_points) const;

 private:
  mutable Mutex mu_;
  std::map<api::JobId, std::deque<ProgressPoint>> points_ GUARDED_BY(mu_);
};

}  // namespace cohort::head
