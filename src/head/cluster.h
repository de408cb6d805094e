// Cluster: the head's authoritative view of nodes and jobs, and every state transition.
//
// The HTTP handlers and the head's control loop call into one Cluster. It owns the
// in-memory state (nodes, jobs, per-node runtime facts that are not persisted) under a
// single mutex, and writes every persisted change through the StateStore before the call
// that caused it returns, so an acknowledged submission or transition survives kill -9.
// Scheduling decisions come from the pure src/sched module; Cluster builds its snapshot
// and applies its placements. Agents are driven level-triggered: each heartbeat reply
// carries the whole set of tasks the head wants on that node.
//
// Threads: every public method may be called from any thread; each takes `mu_`. Methods
// named *Locked require `mu_` held.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/types.h"
#include "api/views.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/prometheus.h"
#include "head/config.h"
#include "head/progress.h"
#include "head/rendezvous.h"
#include "sched/snapshot.h"
#include "store/state_store.h"

namespace cohort::head {

using NodeStatus = api::NodeStatus;
using TaskUsage = api::TaskUsage;

// What the head's /metrics shows, taken under the lock in one pass (cluster_metrics.cc).
struct ClusterMetrics {
  struct NodeLine {
    std::string name;
    std::string display_state;  // UP, DOWN, DRAINING, DRAINED
    int gpus = 0;
    int gpus_allocated = 0;
    int gpus_unhealthy = 0;
    double heartbeat_age_s = -1;
  };
  std::vector<NodeLine> nodes;
  std::map<std::string, int> jobs_by_state;          // "pending", "running", ... (all known jobs)
  std::map<std::string, int> pending_by_reason;      // resources, priority, invalid, scheduler
  std::map<std::pair<std::string, std::string>, uint64_t> transitions;  // (from, to) → count
  uint64_t heartbeats = 0;
  uint64_t gpu_health_events = 0;
  prom::HistogramSnapshot pass_seconds;
  prom::HistogramSnapshot queue_wait_seconds;
};

struct JobFilter {
  std::set<api::JobState> states;  // empty: all
  std::string user;                // empty: all
  size_t limit = 0;                // 0: no limit; the newest jobs are kept
};

// Where the log of one task lives.
struct LogLocation {
  std::string agent_url;
  std::string node;
  bool node_down = false;
  bool task_finished = false;  // the head has the task's exit, or the job has ended
};

class Cluster {
 public:
  // Loads the state from `store` and reconciles what was running: every loaded node gets
  // a fresh failure timer, so agents have one timeout to report in before they are DOWN.
  static Result<std::unique_ptr<Cluster>> Open(HeadConfig config,
                                               std::unique_ptr<store::StateStore> store);

  // Called (without `mu_`) after a change that agents should hear about now; the argument
  // is the agent URLs to wake. Set once before serving.
  void set_wake_agents(std::function<void(std::vector<std::string>)> fn) { wake_agents_ = std::move(fn); }

  // ---- users ----
  // Validates feasibility against the cluster's nodes and stores the job (PENDING).
  // kUnsatisfiable when no placement could ever satisfy it; kUnavailable if the store fails.
  Result<api::Job> Submit(api::JobSpec spec);
  // kNotFound for an unknown id; kFailedPrecondition if the job has already ended.
  Result<api::Job> Cancel(api::JobId id);
  Result<api::Job> GetJob(api::JobId id) const;
  std::vector<api::Job> ListJobs(const JobFilter& filter) const;
  std::vector<NodeStatus> ListNodes() const;
  Result<NodeStatus> GetNode(const std::string& name) const;
  // Stops placing jobs on the node. With `now`, also moves the jobs running there: each is
  // asked to checkpoint (the job's checkpoint_signal to its tasks, and "checkpoint": true
  // in the replies to its progress reports); once it reports a checkpoint newer than the
  // request, or `timeout_ms` after the request, its gang is stopped and requeued as a move
  // (a new attempt that does not count against max_restarts) onto other nodes.
  Result<NodeStatus> Drain(const std::string& name, std::string reason, bool now = false,
                           int64_t timeout_ms = 0);
  // A progress report from a task of `scope`'s attempt (POST COHORT_REPORT): stored, and
  // checked against a pending move. Returns true when the head wants this attempt to
  // checkpoint (the reply's "checkpoint").
  bool ReportProgress(const RendezvousScope& scope, ProgressPoint point);
  // Clears the drain mark and marks every GPU of the node healthy again (after the
  // operator's check); kNotFound for an unknown node.
  Result<NodeStatus> Resume(const std::string& name);
  // kNotFound for an unknown job or a rank/attempt it never had.
  Result<LogLocation> LocateLog(api::JobId id, int attempt, int rank) const;

  // ---- agents ----
  // kAlreadyExists if a live agent with another incarnation holds the name.
  Result<api::AgentTiming> Register(const api::Registration& reg);
  // kNotFound if the node is unknown and kFailedPrecondition if `hb.incarnation` is not the
  // registered one: the agent must register (again).
  Result<api::HeartbeatReply> Heartbeat(const std::string& node, const api::Heartbeat& hb);

  // ---- control loop ----
  // Marks silent nodes DOWN (failing their gangs), enforces time limits and fails hung
  // attempts (CheckProgress with the current time).
  void CheckLiveness();
  // Fails the current attempt of every RUNNING job with progress_timeout_s > 0 whose
  // newest progress report of that attempt (or, without one, the attempt's start, or the
  // head's start if later: reports are not persisted) is older than the timeout at
  // `now_ms` (Unix ms): the gang is stopped everywhere and requeued through the same path
  // as a node failure, or FAILED when no restarts are left. Tests pass a fake time.
  void CheckProgress(int64_t now_ms);
  // Runs one scheduling pass and starts what it places. Returns the number started.
  int Schedule();
  // True when an event since the last pass may let more jobs start.
  bool schedule_requested() const;
  // Blocks up to `timeout` until a pass is requested.
  void WaitForWork(Millis timeout);

  // ---- rendezvous (COHORT_RENDEZVOUS) ----
  // The scope of a task's token while its attempt runs; kNotFound for a bad token or an
  // attempt that has ended.
  Result<RendezvousScope> RendezvousFor(const std::string& token) const;
  RendezvousStore& rendezvous() { return *rendezvous_; }
  // Progress reported at COHORT_REPORT (thread-safe on its own).
  ProgressLog& progress() { return progress_; }

  // ---- observability (cluster_metrics.cc) ----
  ClusterMetrics Metrics() const;
  // Resource use of every task of RUNNING jobs, by job, from the agents' heartbeats.
  std::map<api::JobId, std::vector<TaskUsage>> RunningTaskUsage() const;

  const HeadConfig& config() const { return config_; }
  // Latency of the last scheduling pass (for logs and benchmarks).
  Millis last_pass_duration() const;

 private:
  // An ended attempt's tasks on a node that the agent has not yet confirmed stopped: the
  // agent must have applied the assignment version that dropped them (`version`) and
  // report none of them running. Until then their GPUs and CPUs stay busy and the job's
  // next attempt is not placed anywhere (a job never runs twice, and a restart never lands
  // on GPUs its previous attempt still holds). A node that goes DOWN or re-registers with
  // a new agent drops its entries: its agent fenced those tasks (lease) or they died with it.
  struct StoppingAttempt {
    api::JobId job = 0;
    int attempt = 0;
    std::vector<int> gpus;
    int cpus = 0;
    int64_t version = 0;
  };

  struct NodeRuntime {
    SteadyTime last_seen;
    std::vector<StoppingAttempt> stopping;
    std::vector<api::TaskReport> reported;  // tasks in the last heartbeat
    std::vector<int> free_ports;
    int64_t desired_version = 0;
    int64_t applied_version = 0;
    // GPU telemetry and health counters from the heartbeats (gpu_health.cc).
    std::vector<std::optional<api::GpuTelemetry>> telemetry;  // by GPU index
    std::vector<int64_t> health_seen;  // each GPU's health-event counter last seen
    // False until the counters are known: after a head restart the first heartbeat's
    // counters are adopted, not read as new events.
    bool health_baseline = false;
  };

  Cluster(HeadConfig config, std::unique_ptr<store::StateStore> store);
  Result<void> LoadLocked();

  // lifecycle.cc
  void StartJobLocked(api::Job& job, const std::vector<std::pair<std::string, std::vector<int>>>& nodes,
                      const std::vector<int>& cpus, int64_t now);
  void RecordExitLocked(api::Job& job, const std::string& node, const api::TaskReport& t);
  // After a pass: asks elastic jobs running below `nodes` to grow back when the free
  // nodes allow it and nothing waits, and withdraws the request when they no longer do.
  void PlanGrowthLocked(const sched::Snapshot& snap, const sched::Decision& decision);
  // Stops the current attempt and requeues it as a move (not a failure).
  void MoveJobLocked(api::Job& job, const std::string& why);
  // Moves the jobs whose request is past its deadline.
  void CheckMovesLocked(const std::set<api::JobId>& running, int64_t now_ms);
  // Ends the current attempt and puts the job back in the queue as attempt + 1.
  void RequeueLocked(api::Job& job, const std::string& why);
  // Ends the current attempt; requeues it when restarts remain and `may_restart`.
  void FailGangLocked(api::Job& job, const std::string& why, std::optional<int> exit_code,
                      bool may_restart);
  void FinishJobLocked(api::Job& job, api::JobState state, std::string reason,
                       std::optional<int> exit_code);
  void DetachJobLocked(const api::Job& job);
  // Drops the node's stopping entries that its latest heartbeat confirms; true if any.
  bool ConfirmStoppedLocked(NodeRuntime& rt);
  // "attempt N on node-1, node-2" when an earlier attempt of `id` still stops somewhere.
  std::string StoppingWhereLocked(api::JobId id) const;
  std::vector<api::TaskLaunch> DesiredTasksLocked(const std::string& node) const;
  std::map<std::string, std::string> TaskEnvLocked(const api::Job& job, const api::NodeAllocation& na,
                                                    const api::TaskPlacement& t) const;

  // Persists what is dirty; on failure keeps it dirty and logs (the next change retries).
  Result<void> FlushLocked();
  void MarkDirtyLocked(const api::Job& job) { dirty_jobs_.insert(job.id); }
  void MarkDirtyLocked(const api::Node& node) { dirty_nodes_.insert(node.name); }
  void RequestScheduleLocked();
  // Releases `lock`, then wakes the agents queued in to_wake_ (network calls run unlocked).
  void UnlockAndWake(std::unique_lock<std::mutex>& lock);
  void WakeLocked(const std::string& node);
  void BumpVersionLocked(const std::string& node);

  // gpu_health.cc
  // Records telemetry and turns grown health counters into unhealthy GPUs.
  void ApplyGpuReportsLocked(api::Node& node, NodeRuntime& rt, const std::vector<api::GpuReport>& reports);
  // Marks GPU `index` unhealthy and fails (requeues) the jobs holding it.
  void MarkGpuUnhealthyLocked(api::Node& node, int index, const std::string& reason);
  // Counts a job state transition for /metrics ("none" as `from` for a new job).
  void CountTransitionLocked(std::string_view from, api::JobState to);
  // liveness.cc: CheckProgress for the jobs in `running`.
  void CheckProgressLocked(const std::set<api::JobId>& running, int64_t now_ms);

  NodeStatus StatusLocked(const api::Node& n) const;
  int64_t HeartbeatAgeMs(const NodeRuntime& rt) const;

  const HeadConfig config_;
  std::function<void(std::vector<std::string>)> wake_agents_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;                           // signalled with mu_
  std::unique_ptr<store::StateStore> store_;                  // guarded by mu_
  std::unique_ptr<RendezvousStore> rendezvous_;               // set by LoadLocked; thread-safe
  ProgressLog progress_;                                      // thread-safe
  std::map<std::string, api::Node> nodes_;                    // guarded by mu_
  std::map<std::string, NodeRuntime> runtime_;                // guarded by mu_
  std::map<api::JobId, api::Job> jobs_;                       // guarded by mu_
  std::set<api::JobId> pending_;                              // guarded by mu_
  std::map<std::string, std::set<api::JobId>> node_jobs_;     // RUNNING jobs per node; mu_
  std::map<api::JobId, std::string> pending_reasons_;         // guarded by mu_
  std::set<api::JobId> dirty_jobs_;                           // guarded by mu_
  std::set<std::string> dirty_nodes_;                         // guarded by mu_
  std::set<std::string> to_wake_;                             // agent URLs; guarded by mu_
  int64_t next_version_ = 0;                                  // guarded by mu_
  int64_t loaded_ms_ = 0;  // Unix ms of LoadLocked: progress reports before it are lost; mu_
  bool schedule_requested_ = true;                            // guarded by mu_
  Millis last_pass_{0};                                       // guarded by mu_
  std::map<std::pair<std::string, std::string>, uint64_t> transitions_;  // guarded by mu_
  uint64_t heartbeats_ = 0;                                   // guarded by mu_
  uint64_t gpu_health_events_ = 0;                            // guarded by mu_
  prom::Histogram pass_seconds_{prom::ExponentialBuckets(0.0005, 2, 14)};      // thread-safe
  prom::Histogram queue_wait_seconds_{prom::ExponentialBuckets(0.1, 4, 10)};  // thread-safe
};

}  // namespace cohort::head
