// Cluster: the head's locked shell around its functional core (src/head/core).
//
// The HTTP handlers and the head's control loop call into one Cluster. It owns the core's
// ClusterState under one mutex and does only what the core cannot: it reads the clock,
// calls the core's transition for the event, writes the records the transition changed
// through the StateStore before the call returns (so an acknowledged submission or
// transition survives kill -9), and performs the other effects (log lines, agent wake-ups,
// dropped rendezvous keys, a scheduling pass request, histogram observations). Records a
// failed write leaves unstored are kept and written with the next change. Agents are
// driven level-triggered: each heartbeat reply carries the whole set of tasks the head
// wants on that node.
//
// Threads: every public method may be called from any thread; each takes `mu_` (checked by
// Clang's thread-safety analysis). Agent wake-ups are sent after `mu_` is released.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "api/types.h"
#include "api/views.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"
#include "common/prometheus.h"
#include "head/config.h"
#include "head/core/effects.h"
#include "head/core/queries.h"
#include "head/core/state.h"
#include "head/progress.h"
#include "head/rendezvous.h"
#include "store/state_store.h"

namespace cohort::head {

using NodeStatus = api::NodeStatus;
using TaskUsage = api::TaskUsage;
using JobFilter = core::JobFilter;
using LogLocation = core::LogLocation;
using ClusterMetrics = core::ClusterMetrics;

class Cluster {
 public:
  // Loads the state from `store` and reconciles what was running: every loaded node gets
  // a fresh failure timer, so agents have one timeout to report in before they are DOWN.
  // kInvalidArgument for a configuration out of range (unhealthy_zone_threshold).
  static Result<std::unique_ptr<Cluster>> Open(HeadConfig config,
                                               std::unique_ptr<store::StateStore> store);

  // Called (without `mu_`) after a change that agents should hear about now; the argument
  // is the agent URLs to wake. Set once before serving.
  void set_wake_agents(std::function<void(std::vector<std::string>)> fn) { wake_agents_ = std::move(fn); }

  // ---- users ----
  // Validates feasibility against the cluster's nodes and stores the job (PENDING).
  // kUnsatisfiable when no placement could ever satisfy it; kUnavailable if the store fails.
  Result<api::Job> Submit(api::JobSpec spec) EXCLUDES(mu_);
  // kNotFound for an unknown id; kFailedPrecondition if the job has already ended.
  Result<api::Job> Cancel(api::JobId id) EXCLUDES(mu_);
  Result<api::Job> GetJob(api::JobId id) const EXCLUDES(mu_);
  std::vector<api::Job> ListJobs(const JobFilter& filter) const EXCLUDES(mu_);
  // A job of a list as the API sends it: `json` is api::ToJson of the job as shown (with
  // its pending reason), serialized; the list adds gpu_seconds (as of the call) and, for a
  // RUNNING job, its tasks' usage. The text of an active job is kept until the job
  // changes, so listing the queue costs neither a copy of every job under the lock nor
  // serializing every job again.
  struct ListedJob {
    api::JobId id = 0;
    std::shared_ptr<const std::string> json;
    double gpu_seconds = 0;
    bool running = false;
  };
  // ListJobs' jobs (oldest first), serialized.
  std::vector<ListedJob> ListJobsSerialized(const JobFilter& filter, int64_t now_ms) const EXCLUDES(mu_);
  // Nodes by name: those after `after` (all when empty), at most `limit` (0: no limit).
  std::vector<NodeStatus> ListNodes(const std::string& after = "", size_t limit = 0) const EXCLUDES(mu_);
  size_t NodeCount() const EXCLUDES(mu_);
  Result<NodeStatus> GetNode(const std::string& name) const EXCLUDES(mu_);
  // Stops placing jobs on the node. With `now`, also moves the jobs running there
  // (core/drain.h). kNotFound for an unknown node; kUnavailable if the store fails.
  Result<NodeStatus> Drain(const std::string& name, std::string reason, bool now = false,
                           int64_t timeout_ms = 0) EXCLUDES(mu_);
  // A progress report from a task of `scope`'s attempt (POST COHORT_REPORT): stored, and
  // checked against a pending move. Returns true when the head wants this attempt to
  // checkpoint (the reply's "checkpoint").
  bool ReportProgress(const RendezvousScope& scope, ProgressPoint point) EXCLUDES(mu_);
  // Clears the drain mark and marks every GPU of the node healthy again (after the
  // operator's check); kNotFound for an unknown node.
  Result<NodeStatus> Resume(const std::string& name) EXCLUDES(mu_);
  // kNotFound for an unknown job or a rank/attempt it never had.
  Result<LogLocation> LocateLog(api::JobId id, int attempt, int rank) const EXCLUDES(mu_);

  // ---- agents ----
  // kAlreadyExists if a live agent with another incarnation holds the name. Returns the
  // timing for the agent (core/timing.h: scaled to the nodes, this one counted).
  Result<api::AgentTiming> Register(const api::Registration& reg) EXCLUDES(mu_);
  // kNotFound if the node is unknown and kFailedPrecondition if `hb.incarnation` is not the
  // registered one: the agent must register (again). kUnavailable if the exits it reports
  // cannot be stored (the agent repeats them).
  Result<api::HeartbeatReply> Heartbeat(const std::string& node, const api::Heartbeat& hb) EXCLUDES(mu_);

  // ---- control loop ----
  // Marks silent nodes DOWN (failing their gangs) unless the unhealthy zone holds,
  // enforces time limits, fails hung attempts and moves jobs past their move deadline
  // (core/liveness.h). Called every config().liveness_interval_ms: a longer time between
  // two calls with no heartbeat in between is time the head did not listen (stopped, or
  // a pass or a store write held the lock), and it is not counted against any node.
  void CheckLiveness() EXCLUDES(mu_);
  // Fails hung attempts as of `now_ms` (Unix ms; core/liveness.h). Tests pass a fake time.
  void CheckProgress(int64_t now_ms) EXCLUDES(mu_);
  // Runs one scheduling pass and starts what it places. Returns the number started.
  int Schedule() EXCLUDES(mu_);
  // True when an event since the last pass may let more jobs start.
  bool schedule_requested() const EXCLUDES(mu_);
  // Blocks up to `timeout` until a pass is requested.
  void WaitForWork(Millis timeout) EXCLUDES(mu_);
  // The control loop woke `lateness` after it planned to (for /metrics).
  void ObserveControlLoopLateness(Millis lateness);

  // ---- rendezvous (COHORT_RENDEZVOUS) ----
  // The scope of a task's token while its attempt runs; kNotFound for a bad token or an
  // attempt that has ended.
  Result<RendezvousScope> RendezvousFor(const std::string& token) const EXCLUDES(mu_);
  RendezvousStore& rendezvous() { return *rendezvous_; }
  // Progress reported at COHORT_REPORT (thread-safe on its own).
  ProgressLog& progress() { return progress_; }

  // ---- observability ----
  ClusterMetrics Metrics() const EXCLUDES(mu_);
  // Resource use of every task of RUNNING jobs, by job, from the agents' heartbeats.
  std::map<api::JobId, std::vector<TaskUsage>> RunningTaskUsage() const EXCLUDES(mu_);

  const HeadConfig& config() const { return config_; }
  // Latency of the last scheduling pass (for logs and benchmarks).
  Millis last_pass_duration() const EXCLUDES(mu_);

 private:
  Cluster(HeadConfig config, std::unique_ptr<store::StateStore> store);
  Result<void> Load() REQUIRES(mu_);

  // The event's time: wall clock and the monotonic clock the core measures ages on.
  static core::Now Now();
  // Agent URLs to wake, sent when it goes out of scope. Declared before the MutexLock of
  // a method, so the wake-ups (network calls) go out after the lock is released.
  class Wakes {
   public:
    explicit Wakes(const Cluster& c) : cluster_(c) {}
    ~Wakes();
    std::set<std::string> urls;

   private:
    const Cluster& cluster_;
  };

  // Performs `fx` under the lock: logs, drops rendezvous keys, requests a pass, observes
  // queue waits, adds the agents to wake to `wakes`, then writes every unstored record.
  // Returns the write's result (the records stay queued for the next write on failure).
  Result<void> Apply(core::Effects fx, Wakes& wakes) REQUIRES(mu_);
  // Writes the records queued by Apply; on failure keeps them and logs. Times the write.
  Result<void> Flush() REQUIRES(mu_);
  // Logs `what` when it took long enough to count as the head's lag (core::LagThresholdMs).
  void WarnIfLagging(std::string_view what, SteadyClock::duration took) const;

  const HeadConfig config_;
  std::function<void(std::vector<std::string>)> wake_agents_;  // set before serving
  ProgressLog progress_;                                       // thread-safe
  std::unique_ptr<RendezvousStore> rendezvous_;                // set by Load; thread-safe
  core::Context context_;                                      // set by Load; read-only after

  mutable Mutex mu_;
  CondVar work_cv_;                                       // signalled with mu_ when a pass is requested
  std::unique_ptr<store::StateStore> store_ GUARDED_BY(mu_);
  core::ClusterState state_ GUARDED_BY(mu_);
  std::set<api::JobId> unstored_jobs_ GUARDED_BY(mu_);    // changed, not yet written
  std::set<std::string> unstored_nodes_ GUARDED_BY(mu_);  // changed, not yet written
  // ListJobsSerialized's texts of active (PENDING or RUNNING) jobs, each valid while its
  // job's revision (bumped whenever Apply stores the job) and shown reason are the ones
  // it was made from. Terminal jobs are not kept (nor their revisions).
  struct SerializedJob {
    uint64_t revision = 0;
    std::string reason;
    std::shared_ptr<const std::string> json;
  };
  mutable std::unordered_map<api::JobId, SerializedJob> serialized_jobs_ GUARDED_BY(mu_);
  std::unordered_map<api::JobId, uint64_t> job_revisions_ GUARDED_BY(mu_);
  // The failure timeout granted to agents (core::kGrantedFailureTimeoutMeta) as stored; a
  // different current one is written with the next batch.
  int64_t stored_granted_failure_ms_ GUARDED_BY(mu_) = 0;
  bool schedule_requested_ GUARDED_BY(mu_) = true;
  Millis last_pass_ GUARDED_BY(mu_){0};
  prom::Histogram pass_seconds_{prom::ExponentialBuckets(0.0005, 2, 14)};      // thread-safe
  prom::Histogram queue_wait_seconds_{prom::ExponentialBuckets(0.1, 4, 10)};  // thread-safe
  // The head's own lag (thread-safe): how late the control loop woke, and how long the
  // store took to commit each batch of records.
  prom::Histogram loop_lateness_seconds_{prom::ExponentialBuckets(0.001, 4, 10)};
  prom::Histogram store_commit_seconds_{prom::ExponentialBuckets(0.0005, 2, 16)};
};

}  // namespace cohort::head
