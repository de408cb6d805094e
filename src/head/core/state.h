// ClusterState: the head's whole in-memory view of the cluster, as plain values.
//
// The head is a functional core inside a locked shell (docs/ARCHITECTURE.md). This file is
// the core's data: nodes and jobs (the durable records, as stored), the per-node runtime
// facts that are not stored (heartbeat times, reported tasks, assignment versions,
// stopping attempts, telemetry), and the indexes kept beside them. Transition functions
// (submit.h, agents.h, liveness.h, drain.h, schedule.h) take a ClusterState, an event and
// the time, change the state in place and return Effects (effects.h); queries (queries.h)
// read it. None of them reads a clock, takes a lock, or does I/O, so a test drives them
// with plain values. The shell (head::Cluster) owns one ClusterState under its mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/types.h"
#include "head/core/share_state.h"
#include "head/progress.h"

namespace cohort::head::core {

// The time of an event, read once by the shell: wall clock (stored and shown) and a
// monotonic clock (for heartbeat ages, so a wall-clock jump never fails a node).
struct Now {
  int64_t unix_ms = 0;
  int64_t mono_ms = 0;
};

// An ended attempt's tasks on a node that the agent has not yet confirmed stopped: the
// agent must have applied the assignment version that dropped them (`version`) and report
// none of them running. Until then their GPUs and CPUs stay busy and the job's next
// attempt is not placed anywhere (a job never runs twice, and a restart never lands on
// GPUs its previous attempt still holds). A node that goes DOWN or re-registers with a new
// agent drops its entries: its agent fenced those tasks (lease) or they died with it.
struct StoppingAttempt {
  api::JobId job = 0;
  int attempt = 0;
  std::vector<int> gpus;
  int cpus = 0;
  int64_t version = 0;
};

// What the head knows of a node beyond its stored record.
struct NodeRuntime {
  int64_t last_seen_mono_ms = 0;            // last heartbeat or registration (Now::mono_ms)
  std::vector<StoppingAttempt> stopping;
  std::vector<api::TaskReport> reported;    // tasks in the last heartbeat
  // False from a restart's load until the node's first heartbeat: until then the head
  // does not know which tasks of ended attempts still run there (their GPUs, never
  // stored, look free), so nothing is placed on the node.
  bool reported_since_load = true;
  std::vector<int> free_ports;              // for MASTER_PORT
  int64_t desired_version = 0;              // the assignment version the head wants applied
  int64_t applied_version = 0;              // the newest one the agent reports applied
  // GPU telemetry and health counters from the heartbeats (gpu_health.h).
  std::vector<std::optional<api::GpuTelemetry>> telemetry;  // by GPU index
  std::vector<int64_t> health_seen;  // each GPU's health-event counter last seen
  std::deque<api::UtilSample> gpu_util;  // mean utilization over time (util_history.h)
  // False until the counters are known: after a head restart the first heartbeat's
  // counters are adopted, not read as new events.
  bool health_baseline = false;
  // Liveness (liveness.h), reset by every heartbeat or registration (Heard):
  int64_t credited_ms = 0;  // the head's own gaps since the last heartbeat, not in its age
  bool unreachable = false;  // silent past the failure timeout while liveness was suspended
  // Until then (Now::mono_ms), a task of a gang on this node that ends badly was fenced
  // because the head could not hear the node: requeued without counting a restart.
  int64_t fence_excused_until_mono_ms = 0;
  // Adaptive timing (timing.h): the timing in the last reply to this node's agent (none
  // since the head started), and a longer failure timeout granted before it that still
  // binds until previous_until_mono_ms.
  std::optional<api::AgentTiming> granted;
  int64_t previous_failure_timeout_ms = 0;
  int64_t previous_until_mono_ms = 0;
};

// The head's view of its own listening and of the unhealthy zone (liveness.h).
struct LivenessState {
  // Unheard time before this is accounted for; 0 until the first liveness check.
  int64_t accounted_mono_ms = 0;
  int64_t resumed_unix_ms = 0;      // the end of the last credited gap (hung-attempt clocks restart)
  int64_t zone_since_mono_ms = 0;   // when the unhealthy zone began; 0 outside one
  bool suspended = false;           // in the zone and within its timeout: no node is marked DOWN
  int up = 0;                       // UP nodes at the last check
  int silent = 0;                   // of them, silent for more than half the failure timeout
};

// Counters for /metrics, kept with the state they count.
struct Counters {
  std::map<std::pair<std::string, std::string>, uint64_t> transitions;  // (from, to), lower case
  uint64_t heartbeats = 0;
  uint64_t gpu_health_events = 0;
  uint64_t unheard_ms = 0;  // the head's own gaps, credited to every node
};

// A job array's elements as the head knows them (arrays.h): every element made so far by
// index, those not yet ended, and how many are being created (staged, not yet stored).
struct ArrayRuntime {
  std::map<int64_t, api::JobId> elements;
  std::set<api::JobId> live;
  // Indices taken from array_left whose elements' commit is under way: each exists as a
  // job once its round has committed (AdoptArrayElement), or goes back (ReturnArrayElement).
  std::set<int64_t> creating;
  // A sweep with early_stop (arrays.h, OnSweepProgress): the loss each element reported at
  // each milestone it reached (memory only: a restarted head compares afresh).
  std::map<int64_t, std::map<api::JobId, double>> milestone_losses;
  // Why its next elements are not made although the throttle allows them: their user has
  // no room under the job limits (job_limits.h); "" otherwise. Its shown pending reason.
  std::string waits_for_room;
};

// Jobs open (accepted and not ended) per user and in all, for the job limits (job_limits.h).
struct OpenJobs {
  std::map<std::string, int64_t> by_user;  // users with at least one
  int64_t total = 0;
};

struct ClusterState {
  std::map<std::string, api::Node> nodes;
  std::map<std::string, NodeRuntime> runtime;           // one per node in `nodes`
  std::map<api::JobId, api::Job> jobs;
  std::set<api::JobId> pending;                          // PENDING jobs
  std::map<std::string, std::set<api::JobId>> node_jobs;  // RUNNING jobs per node
  std::map<api::JobId, std::string> pending_reasons;     // from the last scheduling pass
  std::vector<api::JobId> queue_order;  // the pending jobs that pass considered, in its order (fair share too)
  // How many nodes have each (GPUs, CPUs) shape: what feasibility at submit reads, kept
  // by LoadState and Register (NoteShape) so a submit does not walk every node.
  std::map<std::pair<int, int>, int> node_shapes;
  int64_t next_version = 0;  // assignment versions increase across restarts
  int64_t loaded_ms = 0;     // Unix ms the state was loaded: progress reports before it are lost
  Counters counters;
  LivenessState liveness;
  ShareState shares;  // teams, fair-share usage, preemptions (share_state.h)
  std::map<api::JobId, ArrayRuntime> arrays;  // every job array (arrays.h)
  std::set<api::JobId> open_arrays;           // those not ended
  OpenJobs open;                              // job_limits.h
};

// How many jobs may be open at once (job_limits.h): Slurm's MaxSubmitJobsPerUser and
// MaxJobCount.
struct JobLimits {
  int64_t per_user = 10'000;  // open jobs per user; 0: no limit
  int64_t total = 100'000;    // open jobs in the cluster; 0: no limit
};

// What transitions may read besides the state: the head's configuration and two lookups
// into parts of the head that live outside the core (both pure from the core's view).
struct Context {
  // The configured timing; agents get it scaled to the number of nodes (timing.h).
  api::AgentTiming base_timing;
  double heartbeat_rate_target = 1000;  // heartbeats per second (timing.h)
  std::string head_url;         // how tasks reach the head (COHORT_HEAD)
  std::string ca_pem;           // the authority tasks trust to reach it over TLS (COHORT_CA); "" without TLS
  std::string checkpoint_root;  // COHORT_CHECKPOINT_DIR is {checkpoint_root}/job-{id}
  int64_t liveness_interval_ms = 100;     // how often the shell checks liveness (CheckLiveness)
  double unhealthy_zone_threshold = 0.55;  // liveness.h
  // The rendezvous token of a job's attempt (RendezvousStore::Token).
  std::function<std::string(api::JobId, int attempt)> rendezvous_token;
  // The job token of a job's attempt (RendezvousStore::JobToken); null: tasks get none.
  std::function<std::string(api::JobId, int attempt)> job_token;
  // The newest progress report of a job's attempt, any rank (ProgressLog::LatestOfAttempt).
  std::function<std::optional<ProgressPoint>(api::JobId, int attempt)> latest_progress;
  // The highest checkpoint any attempt of a job reported (ProgressLog::NewestCheckpoint).
  std::function<std::optional<int64_t>(api::JobId)> newest_checkpoint;
  SharesConfig shares;  // fair share and preemption (share_state.h)
  JobLimits job_limits;  // open jobs per user and in all (job_limits.h)
};

// The one rule for "is this the job's current attempt": the job exists, is RUNNING, and
// `attempt` is its attempt. Returns the job, or null. Reports, exits, rendezvous tokens and
// task usage of any other attempt belong to the past.
const api::Job* CurrentAttempt(const ClusterState& s, api::JobId job, int attempt);
api::Job* CurrentAttempt(ClusterState& s, api::JobId job, int attempt);

// "pending", "running", ...: a job state as a metric label.
std::string JobStateLabel(api::JobState st);

// The ids of every RUNNING job (those placed on some node).
std::set<api::JobId> RunningJobIds(const ClusterState& s);

// Calls f(name, node, runtime) for every node in name order. Walks `nodes` and `runtime`
// (sorted by the same names) side by side, so a pass over 10,000 nodes costs no lookup
// per node; a node without a runtime entry gets a fresh one (as runtime[name] would).
template <typename F>
void ForEachNode(ClusterState& s, F&& f) {
  auto rt = s.runtime.begin();
  for (auto& [name, node] : s.nodes) {
    while (rt != s.runtime.end() && rt->first < name) ++rt;
    if (rt == s.runtime.end() || rt->first != name) rt = s.runtime.try_emplace(rt, name);
    f(name, node, rt->second);
    ++rt;
  }
}

// Milliseconds since the node last reported, at `now`, less the head's own gaps since
// (CreditUnheardTime): the silence the head could have heard.
int64_t HeartbeatAgeMs(const NodeRuntime& rt, Now now);

// The node reported (heartbeat or registration) at `now`: its silence starts over.
void Heard(NodeRuntime& rt, Now now);

// Time the head did not listen is not a node's silence: every node's heartbeat clock moves
// forward by `gap_ms`, at most to `now` (NodeRuntime::credited_ms records how much). The
// rule a restart follows too: LoadState, which knows nothing of the time the head was
// down, starts every clock at the load.
void CreditUnheardTime(ClusterState& s, Now now, int64_t gap_ms);

// Counts `node`'s shape in ClusterState::node_shapes (`delta` +1 when it joins or takes
// this shape, -1 when it leaves it).
void NoteShape(ClusterState& s, const api::Node& node, int delta);

// Builds the state from stored records: every node gets a fresh failure timer (one
// failure timeout for its agent to report in), RUNNING jobs are indexed on their nodes,
// and the version counter starts above the clock and anything stored.
ClusterState LoadState(std::vector<api::Node> nodes, std::vector<api::Job> jobs, Now now);

}  // namespace cohort::head::core
