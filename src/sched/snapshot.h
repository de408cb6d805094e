// Snapshot and Decision: what the scheduler reads and what it answers.
//
// A Snapshot is a self-contained, immutable picture of the cluster at one instant: the
// nodes with their free resources, the running jobs with what they hold and when they are
// expected to end, and the pending queue. The scheduler never reads a clock, a store or
// the network; `now_ms` is the only time it knows. A Decision lists the jobs to start now
// with exact nodes and GPU indices, one reason text for every job left pending, and at
// most one reservation (EASY backfill). Plain values; any thread may build or read them.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cohort::sched {

// "Never" / "unknown": the end of a job without a time limit, or a reservation whose
// start depends on such jobs.
inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

enum class Placement {
  kPack,    // best fit: fill the fullest nodes first, keep big holes for big jobs
  kSpread,  // load balancing: use the emptiest nodes first
};

struct NodeView {
  std::string id;
  std::string unavailable;     // "" if schedulable; else why not: "down", "draining"
  int total_gpus = 0;          // healthy GPUs on the node
  std::vector<int> free_gpus;  // sorted indices free now
  int total_cpus = 0;
  int free_cpus = 0;
};

// What a running job holds on one node: `gpus` is a count.
struct Usage {
  std::string node;
  int gpus = 0;
  int cpus = 0;
};

struct RunningJob {
  int64_t id = 0;
  int64_t end_ms = kNever;  // expected end; kNever when the job has no time limit
  std::vector<Usage> usage;
};

struct JobRequest {
  int64_t id = 0;
  int priority = 0;  // larger runs first
  int64_t submit_ms = 0;
  int nodes = 1;
  int min_nodes = 0;  // elastic: may start on min_nodes..nodes nodes; 0: exactly `nodes`
  int tasks_per_node = 1;
  int gpus_per_node = 0;  // 0: a CPU-only job
  int cpus_per_task = 1;  // may be 0: the job needs only a schedulable node
  Placement placement = Placement::kPack;
  int64_t time_limit_ms = 0;  // 0 = unknown/unlimited
};

struct Snapshot {
  int64_t now_ms = 0;
  std::vector<NodeView> nodes;
  std::vector<RunningJob> running;
  std::vector<JobRequest> pending;
};

// One gang member: the node, the GPU indices it gets there (sorted), and its CPU count.
struct NodeAssignment {
  std::string node;
  std::vector<int> gpus;
  int cpus = 0;
};

struct JobPlacement {
  int64_t job_id = 0;
  std::vector<NodeAssignment> nodes;  // in node-rank order: NODE_RANK 0 first
  bool backfilled = false;            // started behind a reservation (EASY backfill)
};

// Resources held for the first blocked job so that later jobs cannot starve it.
struct Reservation {
  int64_t job_id = 0;
  int64_t start_ms = kNever;       // expected start; kNever when unknown
  std::vector<std::string> nodes;  // in node-rank order
};

struct Decision {
  std::vector<JobPlacement> start;                 // in queue order
  std::map<int64_t, std::string> pending_reasons;  // every pending job not started
  std::optional<Reservation> reservation;
};

// A node's full size, regardless of state or usage (for CheckFeasible).
struct NodeCapacity {
  std::string id;
  int gpus = 0;
  int cpus = 0;
};

}  // namespace cohort::sched
