// The dashboard view: the reply of GET /v1/dashboard, everything the web dashboard (web/)
// and `cohort top` draw in one value. The head fills it (src/head/dashboard_api.cc); the
// CLI decodes it.
//
// Nodes are NodeStatus and jobs JobStatus, encoded as GET /v1/nodes and GET /v1/jobs
// encode them, except that a dashboard job leaves out what only GET /v1/jobs/{id} shows:
// "exits", "history" and its allocation's per-node "tasks" (except a job sharing GPUs,
// whose tasks carry its slices) and "version" (decoded, they are empty). Running and recent jobs carry their latest progress point and a loss curve.
// FromJson checks what views.h says views check. Plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/views.h"

namespace cohort::api {

// A task's progress report as the head keeps it (POST COHORT_REPORT, stamped with its
// time and attempt). Unknown readings are std::nullopt (absent on the wire).
struct ProgressPoint {
  int64_t time_ms = 0;
  int attempt = 0;
  int rank = 0;
  int64_t step = 0;
  std::optional<double> loss;
  std::optional<double> samples_per_s;
  std::optional<double> tokens_per_s;
  std::optional<int64_t> checkpoint_step;  // the newest checkpoint the attempt wrote
  std::optional<int64_t> total_steps;      // the step the job ends at (for percent and ETA)
  std::optional<double> val_loss;          // a validation loss measured at this step
};

// One point of a loss curve.
struct LossPoint {
  int64_t step = 0;
  double loss = 0;
};

// A job's loss curve as drawn: one rank's points, downsampled.
struct LossCurve {
  int rank = 0;        // the rank whose reports these are
  int64_t total = 0;   // points with a loss that rank reported, before downsampling
  std::vector<LossPoint> points;  // oldest first
};

struct DashboardJob {
  JobStatus status;
  std::optional<ProgressPoint> progress;  // the newest report, if any
  std::optional<LossCurve> loss;          // absent when no loss was reported
};

// Counts over the whole cluster (the lists below may be cut short).
struct DashboardSummary {
  int64_t nodes = 0;
  int64_t nodes_up = 0;  // display_state UP
  int64_t gpus = 0;
  int64_t gpus_allocated = 0;
  int64_t unhealthy_gpus = 0;
  int64_t pending = 0;
  int64_t running = 0;
};

struct Dashboard {
  int64_t time_ms = 0;  // when the head built it (Unix ms); 0: never built
  DashboardSummary summary;
  std::vector<NodeStatus> nodes;
  std::vector<DashboardJob> queue;    // pending, in the order the scheduler considers them
  std::vector<DashboardJob> running;
  std::vector<DashboardJob> recent;   // finished, newest first
};

// {"time_ms", "attempt", "rank", "step"} and each known reading ("loss", "samples_per_s",
// "tokens_per_s", "checkpoint_step", "total_steps", "val_loss").
json ToJson(const ProgressPoint& p);
Result<ProgressPoint> ProgressPointFromJson(const json& j, const std::string& path = {});

// {"rank", "total", "points": [[step, loss], ...]}.
json ToJson(const LossCurve& c);
Result<LossCurve> LossCurveFromJson(const json& j, const std::string& path = {});

// The JobStatus's fields less those named above, then "progress" and "loss" when set.
json ToJson(const DashboardJob& j);
Result<DashboardJob> DashboardJobFromJson(const json& j, const std::string& path = {});

// {"time_ms", "summary": {"nodes", "nodes_up", "gpus", "gpus_allocated", "unhealthy_gpus",
//  "pending", "running"}, "nodes", "queue", "running", "recent"}; all required.
json ToJson(const Dashboard& d);
Result<Dashboard> DashboardFromJson(const json& j);

}  // namespace cohort::api
