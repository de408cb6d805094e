// Cluster: the head's locked shell around its functional core (src/head/core).
//
// The HTTP handlers and the head's control loop call into one Cluster. It owns the core's
// ClusterState under one mutex and does only what the core cannot: it reads the clock,
// calls the core's transition for the event, makes the records the transition changed
// durable through the StateStore before the call returns (so an acknowledged submission or
// transition survives kill -9), and performs the other effects (log lines, agent wake-ups,
// dropped rendezvous keys, a scheduling pass request, histogram observations). Agents are
// driven level-triggered: each heartbeat reply carries the whole set of tasks the head
// wants on that node.
//
// Group commit: a transition changes the state in memory and stages the records it changed
// (a sequence number counts stagings); before its call returns, everything staged up to
// then must be durable. One caller at a time commits (the leader): it takes every record
// staged so far, releases `mu_` for the write, and so every transition that happened
// meanwhile rides on the next commit: a burst of submissions or heartbeats costs a few
// store commits instead of one each, and the lock is never held across a write. A
// transition's reply (heartbeat tasks, a cancelled job) is sent only once what it shows is
// durable; plain reads see memory, up to one commit ahead of the disk. A new job
// enters the state only once stored, with the id the store gave it. Records a failed
// commit leaves unstored are kept and written with the next one; the callers it covered
// get its error.
//
// Threads: every public method may be called from any thread; each takes `mu_` (checked by
// Clang's thread-safety analysis). Agent wake-ups are sent after `mu_` is released.
#pragma once

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "api/job_array.h"
#include "api/team.h"
#include "api/types.h"
#include "api/views.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"
#include "common/prometheus.h"
#include "head/config.h"
#include "head/core/effects.h"
#include "head/core/job_control.h"
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

  // ---- meta values of other parts of the head (the token book) ----
  // Read and written straight through the store (not the job commit rounds): for rare
  // changes whose callers serialize their own writes of a key.
  Result<std::optional<std::string>> GetMeta(const std::string& key);
  Result<void> PutMeta(const std::string& key, const std::string& value);
  // The store itself, for parts of the head that keep records of their own in it (the
  // audit log, audit.h); thread-safe.
  store::StateStore& store() { return *store_; }

  // ---- users ----
  // Resolves the job's team (core/teams.h: `any_team` for admins, who may name any team),
  // validates feasibility against the cluster's nodes and stores the job (PENDING).
  // kNotFound or kPermissionDenied for its team; kUnsatisfiable when no placement could
  // ever satisfy it; kUnavailable if the store fails.
  // `hold_by` non-empty: the job is submitted held by that user (sbatch --hold).
  Result<api::Job> Submit(api::JobSpec spec, bool any_team = true, const std::string& hold_by = "") EXCLUDES(mu_);
  // kNotFound for an unknown id; kFailedPrecondition if the job has already ended.
  Result<api::Job> Cancel(api::JobId id) EXCLUDES(mu_);
  // Job arrays (core/arrays.h; cluster_arrays.cc). The job `ref` names: "12" is job 12,
  // "12_7" element 7 of array 12 (kNotFound, saying why, if it has not started or is not
  // one of the array's indices).
  Result<api::JobId> ResolveJob(const api::JobRef& ref) const EXCLUDES(mu_);
  // Cancels element `task` of array `array` (its job, or its index if it has not started);
  // returns the element's job, or the array's record for an index that never started.
  Result<api::Job> CancelArrayTask(api::JobId array, int64_t task) EXCLUDES(mu_);
  // An array's elements counted by state (core::ArraySummary); empty if `id` is no array.
  std::map<std::string, int64_t> ArraySummary(api::JobId id) const EXCLUDES(mu_);
  // The indices of an array's FAILED and TIMEOUT elements (core::FailedArrayIndices); ""
  // for none or if `id` is no array.
  std::string FailedArrayIndices(api::JobId id) const EXCLUDES(mu_);
  // Every element made so far of array `id`, by index; kNotFound if `id` is no array.
  Result<std::vector<api::Job>> ArrayElementJobs(api::JobId id) const EXCLUDES(mu_);
  // Job control of a PENDING job (core/job_control.h; cluster_job_control.cc): the job as
  // changed, durably. The core's errors; kUnavailable if the store fails.
  Result<api::Job> Hold(api::JobId id, const std::string& by) EXCLUDES(mu_);
  Result<api::Job> Release(api::JobId id) EXCLUDES(mu_);
  // Requeues a running or ended job (core::Requeue): `by` names who asked; `hold` holds it.
  Result<api::Job> Requeue(api::JobId id, const std::string& by, bool hold) EXCLUDES(mu_);
  Result<api::Job> Update(api::JobId id, const core::JobUpdate& update) EXCLUDES(mu_);
  // Allocations and their steps (core/steps.h; cluster_steps.cc), made durable. AddStep
  // returns the step as recorded (its id and start); RecordStepExit is a no-op for a
  // session that belongs to no step. The core's errors; kUnavailable if the store fails.
  Result<api::StepRecord> AddStep(api::JobId id, api::StepRecord step) EXCLUDES(mu_);
  Result<void> RecordStepExit(api::JobId id, const std::string& session, int exit_code) EXCLUDES(mu_);
  Result<api::Job> EndAllocation(api::JobId id, int exit_code, int signal) EXCLUDES(mu_);
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
    int attempt = 0;  // the current attempt (for a RUNNING job's progress_eta)
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
  // OK if RemoveNode(name, force) would remove the node now (core/remove_node.h):
  // kNotFound for an unknown node, kFailedPrecondition for one alive or holding work.
  Result<void> CheckRemovable(const std::string& name, bool force) const EXCLUDES(mu_);
  // Removes a node that has left (core/remove_node.h), durably: returns its status as it
  // was. CheckRemovable's errors; kUnavailable if the store fails (the node is gone from
  // memory and its deletion is retried with the next commit).
  Result<NodeStatus> RemoveNode(const std::string& name, bool force) EXCLUDES(mu_);
  // kNotFound for an unknown job or a rank/attempt it never had.
  Result<LogLocation> LocateLog(api::JobId id, int attempt, int rank) const EXCLUDES(mu_);

  // ---- teams and fair share (core/teams.h, core/shares.h) ----
  // Each change is durable before it returns; the errors are the core's, and kUnavailable
  // if the store fails (the change stays in memory and is written with the next commit).
  Result<api::Team> CreateTeam(api::Team team) EXCLUDES(mu_);
  Result<api::Team> UpdateTeam(const std::string& name, const api::TeamPatch& patch) EXCLUDES(mu_);
  Result<void> RemoveTeam(const std::string& name) EXCLUDES(mu_);
  std::vector<api::Team> ListTeams() const EXCLUDES(mu_);
  // kNotFound for a team never created ("default" included until it is).
  Result<api::Team> GetTeam(const std::string& name) const EXCLUDES(mu_);
  api::SharesReport Shares() const EXCLUDES(mu_);
  api::PriorityReport Priorities() const EXCLUDES(mu_);

  // ---- agents ----
  // kAlreadyExists if a live agent with another incarnation holds the name. Returns the
  // timing for the agent (core/timing.h: scaled to the nodes, this one counted).
  Result<api::AgentTiming> Register(const api::Registration& reg) EXCLUDES(mu_);
  // kNotFound if the node is unknown and kFailedPrecondition if `hb.incarnation` is not the
  // registered one: the agent must register (again). kUnavailable if the exits it reports
  // cannot be stored (the agent repeats them). `text` (optional) receives the reply's JSON
  // text as SendJson writes it: made here anyway (to compare with the last reply), so the
  // handler sends it rather than serialising the reply again.
  Result<api::HeartbeatReply> Heartbeat(const std::string& node, const api::Heartbeat& hb,
                                        std::string* text = nullptr) EXCLUDES(mu_);

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
  // The job a job token (COHORT_JOB_TOKEN) names, while its attempt runs: its scope and
  // owner. kUnauthenticated for a token that is not ours or whose attempt has ended (the
  // message says which).
  struct JobTokenScope {
    RendezvousScope scope;
    std::string owner;
  };
  Result<JobTokenScope> JobTokenOwner(std::string_view token) const EXCLUDES(mu_);
  RendezvousStore& rendezvous() { return *rendezvous_; }
  // Progress reported at COHORT_REPORT (thread-safe on its own).
  ProgressLog& progress() { return progress_; }

  // ---- observability ----
  ClusterMetrics Metrics() const EXCLUDES(mu_);
  // What the dashboard shows, read at one instant (separate reads could show a job both
  // queued and running): every node, the PENDING and RUNNING jobs, the `recent` newest
  // ended jobs and running tasks' resource use.
  struct Overview {
    std::vector<NodeStatus> nodes;
    std::vector<api::Job> pending, running, recent;
    std::map<api::JobId, std::vector<TaskUsage>> usage;
    std::vector<api::JobId> queue_order;  // the last scheduling pass's order of the pending jobs
  };
  Overview GetOverview(size_t recent) const EXCLUDES(mu_);
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

  // A submission waiting for the commit that creates its job.
  struct Creation {
    api::Job job;                             // validated, without an id
    std::optional<Result<api::Job>> result;  // set by the commit round that took it
  };

  // Settles the job arrays (core::SettleArrays): stages the elements to create with the
  // array records that gave up their indices, for the next commit round.
  void StageArrayElements(Wakes& wakes) REQUIRES(mu_);
  // After a commit round: forgets the element creations it took; on failure their indices
  // go back to their arrays.
  void SettleArrayCreations(Wakes& wakes) REQUIRES(mu_);
  // Performs `fx` under the lock: logs, drops rendezvous keys, requests a pass, observes
  // queue waits, adds the agents to wake to `wakes` and stages the changed records.
  void Stage(core::Effects fx, Wakes& wakes) REQUIRES(mu_);
  // Stage, then Durable(everything staged so far). Returns the commit's result (on failure
  // the records stay queued for the next commit).
  Result<void> Apply(core::Effects fx, Wakes& wakes) REQUIRES(mu_);
  // Returns once everything staged up to `seq` is durable: waits for the commit under way,
  // or leads the next one. The error of a failed commit that covered `seq`. `mu_` is
  // released while waiting and while writing.
  Result<void> Durable(uint64_t seq, Wakes& wakes) REQUIRES(mu_);
  // One group commit (the caller leads): writes every staged record and creation with
  // `mu_` released, then adds the created jobs to the state. Times the write.
  Result<void> CommitRound(Wakes& wakes) REQUIRES(mu_);
  // Logs `what` when it took long enough to count as the head's lag (core::LagThresholdMs).
  void WarnIfLagging(std::string_view what, SteadyClock::duration took, std::string_view consequence) const;

  const HeadConfig config_;
  std::function<void(std::vector<std::string>)> wake_agents_;  // set before serving
  ProgressLog progress_;                                       // thread-safe
  std::unique_ptr<RendezvousStore> rendezvous_;                // set by Load; thread-safe
  core::Context context_;                                      // set by Load; read-only after

  mutable Mutex mu_;
  CondVar work_cv_;                                       // signalled with mu_ when a pass is requested
  const std::unique_ptr<store::StateStore> store_;        // thread-safe; written by one leader at a time
  core::ClusterState state_ GUARDED_BY(mu_);
  std::set<api::JobId> unstored_jobs_ GUARDED_BY(mu_);    // changed, not yet written
  std::set<std::string> unstored_nodes_ GUARDED_BY(mu_);  // changed, not yet written
  std::set<std::string> removed_nodes_ GUARDED_BY(mu_);   // removed, not yet deleted from the store
  bool unstored_teams_ GUARDED_BY(mu_) = false;           // the teams changed, not yet written
  std::vector<Creation*> creations_ GUARDED_BY(mu_);      // submissions for the next commit
  // Array elements being created (core/arrays.h), owned here; each is also in creations_.
  std::list<Creation> array_creations_ GUARDED_BY(mu_);
  // Group commit: stagings counted, how far they are durable, the round under way.
  CondVar commit_cv_;                                     // signalled with mu_ when a round ends
  uint64_t staged_seq_ GUARDED_BY(mu_) = 0;
  uint64_t durable_seq_ GUARDED_BY(mu_) = 0;
  bool committing_ GUARDED_BY(mu_) = false;
  uint64_t rounds_ GUARDED_BY(mu_) = 0;                   // rounds ended
  uint64_t last_round_seq_ GUARDED_BY(mu_) = 0;           // what the last round covered
  std::optional<Error> last_round_error_ GUARDED_BY(mu_);  // its error, if it failed
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
  // The last heartbeat reply each node's agent was sent (its text), durable when sent: a
  // reply that repeats it waits for no commit but the heartbeat's own (Heartbeat).
  struct Told {
    std::string incarnation;
    std::string reply;
  };
  std::unordered_map<std::string, Told> told_ GUARDED_BY(mu_);
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
