// Wire types shared by the head, the agents and the CLI (API version v1).
//
// Plain values: a JobSpec is what a user submits; a Job is the head's record of it
// (state, attempts, allocation, exits); a Node is one worker as the head sees it. Each
// type has ToJson and a strict FromJson that validates every field from outside and
// names the bad one in its error (codecs.cc). Values are copied freely between threads;
// none holds a lock or a handle.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

using JobId = int64_t;
using NodeId = std::string;

enum class Placement { kPack, kSpread };
// TIMEOUT: killed at its time limit (time_limit_s), as Slurm's TIMEOUT.
enum class JobState { kPending, kRunning, kSucceeded, kFailed, kCancelled, kTimeout };
enum class NodeState { kUp, kDown };
// How a job's GPUs must be connected (`topology:` in a spec; docs: README, "Fractional
// GPUs, MIG, GPU types and topology"). kPreferred: the best-connected GPUs inside a node
// and the fewest network switches across nodes that are free now, never waiting for
// better. kRequired: a node's GPUs in one NVLink island (or under one PCIe switch) and
// all nodes under one switch, waiting until such a set is free.
enum class Topology { kPreferred, kRequired };

std::string_view PlacementName(Placement p);
std::string_view JobStateName(JobState s);   // "PENDING", "RUNNING", ...
std::string_view NodeStateName(NodeState s);  // "UP", "DOWN"
std::string_view TopologyName(Topology t);     // "preferred", "required"
Result<JobState> ParseJobState(std::string_view s);  // case-insensitive
bool IsTerminal(JobState s);

// Limits on what a job may ask for; a request beyond them is rejected, not clamped.
inline constexpr int kMaxNodes = 4096;
inline constexpr int kMaxTasksPerNode = 1024;
inline constexpr int kMaxGpusPerNode = 1024;
inline constexpr int kMaxCpusPerTask = 4096;
inline constexpr int kMaxPriority = 1000;
inline constexpr int kMaxRestarts = 1000;
inline constexpr int64_t kMaxTimeLimitS = 366LL * 24 * 3600;
inline constexpr int64_t kMaxProgressTimeoutS = kMaxTimeLimitS;
// The latest begin time a job may name: the end of the year 9999 (Unix ms).
inline constexpr int64_t kMaxBeginMs = 253402300799999;
// The largest batch script (JobSpec::script) a job may carry: it is stored with the job and
// sent to its first node. (Slurm's default max_script_size is 4 MB; a script that size is
// better a program the script runs.)
inline constexpr size_t kMaxScriptBytes = 1 << 20;

// A job that runs in a container image (`container:` in a spec, `--container IMAGE`): the
// agent starts every task with `RUNTIME run ... IMAGE command...` (agent/container.h).
// Empty image: the tasks are bare processes.
struct ContainerSpec {
  std::string image;              // an OCI image reference: [registry/]name[:tag][@digest]
  std::string runtime = "podman";  // podman or docker (the same `run` syntax)
  bool enabled() const { return !image.empty(); }
};

// What a user submits (POST /v1/jobs, `cohort submit`).
struct JobSpec {
  std::string name;                        // [A-Za-z0-9._-], ≤ 128; default: basename of command[0]
  std::string user;                        // who submitted; default: "anonymous"
  std::vector<std::string> command;        // argv of every task; required
  std::map<std::string, std::string> env;  // extra variables; may not override the contract's
  std::string workdir;                     // absolute path; empty: the agent's work directory
  // Slurm's --output, --error and --open-mode (api/output_pattern.h): files the tasks'
  // stdout and stderr are also written to, beside the agent's log; patterns (%j, %A_%a,
  // %x, %u, %N, %t, %n, %%) expanded per task, relative paths relative to workdir. "":
  // the log only. Without `error`, stderr goes to `output` too. open_mode: "" (truncate on
  // the first attempt, append on requeues, as Slurm), "truncate" (the same) or "append".
  // On the wire only when set.
  std::string output;
  std::string error;
  std::string open_mode;
  // The file-mode creation mask of the job's processes (its tasks, the output files'
  // copier, exec sessions and steps), as Slurm's SLURM_UMASK: the submitter's umask, which
  // `cohort submit` sends (COHORT_UMASK in the tasks' environment). -1: not given (the
  // agent's own). On the wire as the octal text umask prints ("0027"), only when set.
  int umask = -1;
  int nodes = 1;                           // gang size in nodes
  // Elastic jobs: 1..nodes. When `nodes` cannot be placed, the gang may start (or restart
  // after a failure) on as few as min_nodes nodes; WORLD_SIZE and COHORT_NUM_NODES tell
  // the tasks the size they got. A smaller attempt grows back to `nodes` when the nodes
  // are free and nothing else waits, at its next reported checkpoint (a move). 0: not
  // elastic (always exactly `nodes`).
  int min_nodes = 0;
  int tasks_per_node = 1;                  // processes per node
  // Tasks that must share a node: ranks go to nodes in consecutive blocks of
  // tasks_per_node, so a tensor-parallel group of this many consecutive ranks (`cohort
  // train`'s parallel.tensor) stays inside one node when tasks_per_node is a multiple of it.
  // 0: nothing declared. A spec whose tasks_per_node cannot hold one is unsatisfiable (422).
  int tensor_group_size = 0;
  int gpus_per_node = 0;                   // split evenly among the node's tasks; 0: CPU-only
  int cpus_per_task = 1;                   // CPU cores reserved per task
  int priority = 0;                        // higher runs first; -1000..1000
  Placement placement = Placement::kPack;  // pack: fewest free GPUs that fit; spread: most free
  int max_restarts = 0;                    // gang restarts after a node or task failure
  int64_t time_limit_s = 0;                // 0: unlimited; otherwise killed after this long
  // 0: off. Otherwise a RUNNING attempt with no progress report (COHORT_REPORT) for this
  // long, counted from its start or its latest report, is hung: the gang fails (and is
  // requeued while max_restarts allows). Specs stored without it load as 0.
  int64_t progress_timeout_s = 0;
  // Signal sent to every task when the head asks the job to checkpoint (`cohort drain
  // --now`), as Slurm's --signal: "" (none: the request reaches the job only through the
  // reply to its progress reports), or SIGUSR1, SIGUSR2, SIGHUP, SIGINT, SIGTERM (written
  // with or without "SIG"). Stored as the canonical "USR1" etc.
  std::string checkpoint_signal;
  // Seconds before the time limit at which the head asks the job to checkpoint, as the
  // @TIME of Slurm's --signal=USR1@120: its checkpoint_signal once to every task, and
  // "checkpoint": true in the replies to its progress reports until it reports a checkpoint
  // written since that moment. The job keeps running until its limit (or requeues itself:
  // `cohort requeue $COHORT_JOB_ID`). 0: not asked. Needs time_limit_s. On the wire only
  // when set.
  int64_t checkpoint_before_limit_s = 0;
  // Not before this time (Unix ms), as Slurm's --begin: the job stays PENDING with the
  // reason BeginTime until then (`cohort submit --begin 16:00`, `now+1h`, a date). 0: no
  // such wait. It applies to every attempt, so a requeued job also waits for it (which
  // has passed by then unless `cohort update --begin` moved it). On the wire only when set.
  int64_t begin_ms = 0;
  // Run every task in this image; empty: bare processes. Specs stored without it load empty.
  ContainerSpec container;
  // The team the job's GPUs count against (api/team.h): quota, borrowing and fair share.
  // "" in a submission: the user's team, else "default"; the head fills it in. A job may
  // name only a team its user belongs to (admins: any existing team).
  std::string team;
  // A replica of an inference service (api/service.h; `cohort serve deploy`) when
  // `service` is set (on the wire: "kind": "service", "service", "service_model"). The
  // head keeps it running: whatever way it ends except a cancellation, it is requeued
  // (core/lifecycle.h), never SUCCEEDED or FAILED; its restarts are not counted against
  // max_restarts. The gateway routes requests for `service_model` to it.
  std::string service;        // the service's name; "" for a batch job
  std::string service_model;  // the model name requests use
  // An allocation (`cohort alloc`, Slurm's salloc; on the wire "kind": "allocation"): a job
  // that holds its nodes, GPUs and CPUs and runs no command of its own (`command` is empty,
  // but for a batch script's arguments; the agent's shim holds each task with a process
  // that only waits, in the job's account and working directory). Work runs in it as steps (`cohort run` with COHORT_JOB_ID set,
  // `cohort exec`: api/step.h), recorded in Job::steps. It ends when its holder ends it
  // (POST /v1/jobs/{id}/end: the shell's exit, or its batch script's end), is cancelled,
  // or reaches its time limit; it is never restarted, elastic, a service or in a container.
  bool allocation = false;
  // A batch script (`cohort sbatch`, Slurm's sbatch): its text, kept with the job, so an
  // edit of the file after submitting changes nothing (and nodes need no copy of it). Only
  // in an allocation: its first task (rank 0, on the first node) runs it, with `command`
  // as its arguments, while the other tasks hold the allocation for its steps (`cohort run`
  // in the script); the job ends when the script does, with its exit code. It starts with
  // "#!", has no NUL byte nor CR LF line ends, and is at most kMaxScriptBytes. An array
  // of batch scripts is allowed (sbatch --array). "": none. On the wire only when set;
  // another user sees it hidden (as the env values).
  std::string script;
  // A job array (api/job_array.h; `--array 0-999%16`): "" for a single job. Canonical text
  // (ArraySpec::ToString). Each element is a job of its own with this spec less `array`,
  // COHORT_ARRAY_TASK_ID in its environment (head/core/arrays.h).
  std::string array;
  // Node constraints (sched/constraints.h; Slurm's --nodelist, --exclude, --constraint and
  // --mem), checked by the head at submit. On the wire only when set; specs stored without
  // them load empty.
  std::string nodelist;         // host list ("node[1-4,7]"): every named node is a member
  std::string exclude;          // host list: never these nodes
  std::string constraint;       // node features: "a100&ib|h100"
  int64_t mem_per_node_mb = 0;  // MiB each node must have unreserved; 0: none asked

  // Dependencies (api/job_dependency.h; `--dependency afterok:12`): "" for none. Canonical
  // text (FormatDependency). With kill_on_invalid_dep, a job whose dependency can never be
  // satisfied is cancelled; without, it stays PENDING (DependencyNeverSatisfied), as Slurm.
  std::string dependency;
  bool kill_on_invalid_dep = false;
  // A sweep (api/sweep.h; `sweep:` in a spec): null for none, else its canonical section.
  // A sweep makes the job an array of its points (`array` is derived from it).
  json sweep;

  bool is_array() const { return !array.empty(); }
  // GPUs beyond a plain count (api/gpu_request.h). gpu_type: "" (any whole GPU), a model's
  // short name ("h100") or a MIG profile ("1g.10gb"): gpus_per_node devices of that type.
  std::string gpu_type;
  // A fraction of one GPU per task, in share units (1..kGpuShareUnits-1, `gpus_per_task:
  // 0.5` is 2); 0: whole GPUs. A sharing job has gpus_per_node 0: each task holds a part
  // of one GPU, with gpu_memory_mib of its memory (0: the share's part of the GPU's).
  int gpu_share = 0;
  int64_t gpu_memory_mib = 0;
  // What the agent does when a sharing task uses more GPU memory than its part: "report"
  // (a telemetry warning; the default) or "kill" (the task is stopped with that reason).
  std::string gpu_memory_enforce = "report";
  Topology topology = Topology::kPreferred;

  bool shares_gpu() const { return gpu_share > 0 || gpu_memory_mib > 0; }
  bool is_service() const { return !service.empty(); }
  bool is_allocation() const { return allocation; }
  bool is_batch_script() const { return allocation && !script.empty(); }
  int world_size() const { return nodes * tasks_per_node; }
  int gpus_per_task() const { return gpus_per_node / tasks_per_node; }
};

// One task of a placed job: its global and local rank and GPU indices on its node.
struct TaskPlacement {
  int rank = 0;
  int local_rank = 0;
  std::vector<int> gpus;
  // A task that shares its GPU (JobSpec::shares_gpu): its part, in share units of
  // kGpuShareUnits per GPU, and the GPU memory it may use (MiB). 0 for whole GPUs.
  int gpu_share = 0;
  int64_t gpu_memory_mib = 0;
  // MIG instances: their uuids, in the order of `gpus` (CUDA_VISIBLE_DEVICES names them);
  // empty for whole GPUs, which it names by index.
  std::vector<std::string> devices = {};
};

// The part of a job on one node.
struct NodeAllocation {
  NodeId node;
  std::string address;  // the node's address, for MASTER_ADDR when node_rank is 0
  int node_rank = 0;
  std::vector<int> gpus;
  int cpus = 0;
  std::vector<TaskPlacement> tasks;
  int64_t version = 0;  // the node's assignment version when this part was assigned
  // A sharing job: how its tasks share their GPUs on this node (Node::gpu_sharing when it
  // started), for `cohort show`. "" otherwise.
  std::string gpu_sharing = {};
};

struct Allocation {
  std::vector<NodeAllocation> nodes;  // in node-rank order
  std::string master_addr;
  int master_port = 0;
};

// The end of one task of the current attempt, as its agent reported it.
struct TaskExit {
  int rank = 0;
  NodeId node;
  int exit_code = 0;
  int signal = 0;
  std::string error;  // e.g. "cannot execute 'foo': No such file or directory"
  int64_t finished_ms = 0;
};

// One task of a step of an allocation (api/step.h): where it ran, its exec session on that
// node's agent, and its exit code once the head relayed it (nullopt: still running, or its
// client stopped reading before the end).
struct StepTask {
  int rank = 0;
  NodeId node;
  std::string session;
  std::optional<int> exit_code;
};

// A step: a command run on some of an allocation's tasks (`cohort run` inside `cohort
// alloc`, or one `cohort exec`), numbered from 1 within its allocation.
struct StepRecord {
  int id = 0;
  std::vector<std::string> command;
  int64_t start_ms = 0;
  int64_t end_ms = 0;  // when its last task's exit was recorded; 0 until then
  std::vector<StepTask> tasks;
};

// One finished (or current) attempt, kept for `show` and for logs of earlier attempts.
struct AttemptRecord {
  int attempt = 0;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  std::vector<NodeId> nodes;
  std::string end_reason;
  // GPUs the attempt held (all nodes), for usage accounting. Records stored before this
  // field existed load with -1, read as nodes x gpus_per_node of the job's spec.
  int gpus = -1;
  // A sharing job's parts of GPUs (all tasks), in share units (kGpuShareUnits per GPU):
  // usage counts them as fractions of a GPU. 0 otherwise.
  int64_t gpu_share_units = 0;
};

// The head asked the current attempt to checkpoint and move: `cohort drain --now` (it moves
// at the first checkpoint reported after the request, or at the deadline), or an elastic job
// growing back to its full size (it moves at its next checkpoint, with no deadline). Stored
// with the job, so a head restarted meanwhile still carries the move out. It belongs to the
// job's current attempt: ending the attempt clears it.
struct MoveRequest {
  NodeId node;            // the draining node that asked (empty for a grow)
  int64_t requested_ms = 0;
  int64_t deadline_ms = 0;  // Unix ms; 0: none (a grow)
  // A checkpoint counts once its step is above this: the newest step or checkpoint reported
  // before the request (-1: nothing reported).
  int64_t baseline_checkpoint = -1;
  bool grow = false;
  // A preemption (head/core/preempt.h): the job that needs the GPUs (0: not a
  // preemption), and why ("reclaim: ...", "priority: ...").
  JobId preempted_for = 0;
  std::string preempt_reason;
};

// One preemption of a job, kept with it for `cohort show` (head/core/preempt.h): when the
// head asked the attempt to checkpoint and give its GPUs to another job, why, and how it
// ended. The attempt is requeued as a move: it never counts against max_restarts.
struct PreemptionRecord {
  int64_t requested_ms = 0;
  int attempt = 0;      // the attempt that was preempted
  JobId by_job = 0;     // the job that needed the GPUs
  std::string by_team;
  std::string kind;     // "reclaim" (its team takes back its quota) or "priority"
  std::string reason;
  // Work at risk when asked: GPU-seconds since the attempt's last reported checkpoint
  // (or its start).
  double work_at_risk_gpu_s = 0;
  int64_t ended_ms = 0;  // when the attempt stopped (0: still checkpointing)
  std::string outcome;   // "checkpoint at step N", "no checkpoint within 5m0s", ...
};

// A job that preempted others waits for their GPUs (head/core/preempt.h): since when,
// and the nodes they are being freed on (held for it meanwhile).
struct Nomination {
  int64_t since_ms = 0;
  std::vector<std::string> nodes;
};

// The last new checkpoint an attempt reported, and when the head heard of it: the work
// a preemption would lose counts from there.
struct CheckpointMark {
  int attempt = 0;
  int64_t step = 0;
  int64_t reported_ms = 0;
};

struct Job {
  JobId id = 0;
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string reason;    // PENDING: why it waits; terminal: why it ended
  int attempt = 0;       // current (or last) attempt; COHORT_ATTEMPT
  // Attempts that ended because the job was moved (`cohort drain --now`), or fenced while
  // the head could not hear a node of it, not because it failed: they do not count
  // against max_restarts (restarts = attempt - moves).
  int moves = 0;
  int64_t submit_ms = 0;
  int64_t start_ms = 0;  // first start of the current attempt
  int64_t end_ms = 0;
  std::optional<int> exit_code;  // terminal: first failing rank's code, or 0
  Allocation allocation;         // RUNNING: current; terminal: last
  std::vector<TaskExit> exits;   // ranks of the current attempt that have ended
  std::vector<AttemptRecord> history;
  std::optional<MoveRequest> move;  // RUNNING: a move asked of the current attempt
  std::vector<PreemptionRecord> preemptions;  // oldest first
  // Kept in the job's record so that a head restart keeps them: PENDING, it preempted
  // jobs and waits for their GPUs; the last checkpoint of `attempt` (an older attempt's
  // mark means none).
  std::optional<Nomination> nomination;
  std::optional<CheckpointMark> last_checkpoint;
  // PENDING and held (`cohort hold`, Slurm's scontrol hold): the scheduler passes it over
  // until `cohort release`. `held_by` is the user who held it; a user may release only a
  // hold of their own, an admin any (head/core/job_control.h).
  bool held = false;
  std::string held_by;
  // Job arrays (head/core/arrays.h). An element: its array's id and its index (-1: not an
  // element). The array itself (spec.array set): the indices not yet started as elements
  // (ArrayIndexSet text, "" when none are left), and how many of them were cancelled
  // before they started.
  JobId array_job_id = 0;
  int64_t array_task_id = -1;
  std::string array_left;
  int64_t array_cancelled = 0;
  // An element of a sweep: its point (parameter → value), as COHORT_SWEEP_* in its tasks'
  // environment (api/sweep.h).
  std::map<std::string, std::string> sweep_values;
  // An allocation's steps, oldest first (at most kMaxSteps: the oldest go first).
  std::vector<StepRecord> steps;

  bool is_array_element() const { return array_job_id > 0; }

  bool HasExit(int rank) const;
  // Ranks of the current (or last) attempt: its allocation's nodes × tasks_per_node
  // (fewer than the spec's for an elastic job placed small), or the spec's when unplaced.
  int world_size() const;
};

// A GPU's latest readings, as its agent sampled them (NVML, or the simulated model).
// A reading the driver cannot give is std::nullopt ("unknown"; null on the wire).
struct GpuTelemetry {
  std::optional<double> utilization;          // ratio 0..1 of time a kernel ran
  std::optional<int64_t> memory_used_bytes;
  std::optional<int64_t> memory_total_bytes;
  std::optional<double> temperature_celsius;
  std::optional<double> power_watts;
  std::optional<double> sm_clock_hz;
  int64_t updated_ms = 0;                     // Unix ms of the sample (head's receive time)
};

struct Gpu {
  int index = 0;
  std::string name;
  std::string uuid;
  int64_t memory_bytes = 0;
  bool simulated = false;
  // A MIG instance (issue 18) is a device of its own: its profile ("1g.10gb"), the index
  // of the physical GPU it is carved from, and a "MIG-..." uuid that CUDA_VISIBLE_DEVICES
  // names. "" and -1 for a whole GPU. A GPU in MIG mode is reported as its instances only.
  std::string mig_profile;
  int mig_parent = -1;
  // Where the GPU sits: GPUs with the same NVLink island talk over NVLink, GPUs with the
  // same PCIe switch under one switch; -1 when unknown. Whole GPUs only.
  int nvlink_island = -1;
  int pcie_switch = -1;
  // Health, kept by the head: a GPU with a critical XID, uncorrectable ECC errors or a
  // failed health check is unhealthy until an operator runs `cohort resume NODE`. The
  // scheduler places nothing on an unhealthy GPU. Stored with the node.
  bool healthy = true;
  std::string health_reason;  // empty when healthy
  // Live readings (never stored); absent until the agent's first report.
  std::optional<GpuTelemetry> telemetry;
};

struct Node {
  NodeId name;
  std::string address;      // host other nodes and tasks reach it at
  std::string agent_url;    // the agent's own HTTP endpoint (logs, wake-ups)
  std::string incarnation;  // changes every time an agent process starts
  std::string version;      // cohort version of the agent
  std::vector<Gpu> gpus;
  int cpus = 0;
  // Topology labels the agent was started with (`--topology site=eu-west`): the gateway
  // prefers replicas on nodes whose `site` a request names. Replaced at each registration.
  std::map<std::string, std::string> labels;
  // Node constraints (sched/constraints.h): the agent's --features and its memory (bytes;
  // 0: unknown). Replaced at each registration.
  std::vector<std::string> features;
  int64_t memory_bytes = 0;
  // How tasks share a GPU here (issue 18): "mps" (the agent runs an MPS control daemon per
  // shared GPU) or "time-slicing"; "" from an agent that predates sharing.
  std::string gpu_sharing = {};
  NodeState state = NodeState::kUp;
  std::string reason;       // why DOWN
  bool drain = false;
  std::string drain_reason;
  int64_t registered_ms = 0;
  int64_t last_heartbeat_ms = 0;
};

// Agent → head: POST /v1/nodes/register.
struct Registration {
  NodeId name;
  std::string address;
  std::string agent_url;
  std::string incarnation;
  std::string version;
  std::vector<Gpu> gpus;
  int cpus = 0;
  std::map<std::string, std::string> labels;  // ValidateNodeLabels
  std::vector<std::string> features;          // ValidateNodeFeatures
  int64_t memory_bytes = 0;                   // host memory; 0: unknown
  std::string gpu_sharing = {};               // Node::gpu_sharing
  // Ports found free on the node as it registers, for MASTER_PORT (as Heartbeat's): a job
  // placed before the node's first heartbeat gets one of them, not a port derived from
  // its id that no node checked (the same on every head: job 1's of two heads collide).
  std::vector<int> free_ports = {};
  // A certificate request (PEM) for the node's key, to a head with TLS: the reply holds
  // the node's certificate. Not kept with the node.
  std::string csr;
};

// Timing the head imposes on its agents (in the registration and heartbeat replies).
struct AgentTiming {
  int64_t heartbeat_interval_ms = 1000;
  int64_t failure_timeout_ms = 3000;  // head marks a silent node DOWN after this
  int64_t fence_timeout_ms = 2000;    // agent kills its tasks after this without the head
  int64_t kill_grace_ms = 5000;       // SIGTERM → SIGKILL
};

// A task as its agent reports it in a heartbeat.
struct TaskReport {
  JobId job = 0;
  int attempt = 0;
  int rank = 0;
  bool running = true;
  int pid = 0;
  std::vector<int> gpus;
  int cpus = 0;
  int exit_code = 0;
  int signal = 0;
  std::string error;
  int64_t finished_ms = 0;
  // Resource use of a running task's whole process session (from /proc); 0 if unknown.
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
  // Device memory of its processes on all GPUs (NVML's compute processes; 0 if none or
  // unknown), and, once it used more than its part of a shared GPU, why (issue 18:
  // agent/gpu/task_memory.h); "" otherwise.
  int64_t gpu_memory_bytes = 0;
  std::string gpu_memory_warning;
  // The CPUs the task is bound to, in the kernel's list format ("0-3,8"; common/cpu_set.h);
  // "" when it is not bound (cpus 0, `cohort agent --cpu-bind none`, an older agent). On the
  // wire only when set.
  std::string cpu_list;
};

// One GPU in a heartbeat: its readings and its health-event counter. The counter counts
// health events (critical XIDs, new uncorrectable ECC errors, failed checks) since the
// agent started; the head marks the GPU unhealthy when it grows, with `health_event`
// (the latest event's text) as the reason. A counter, not a flag, so that repeated
// heartbeats do not repeat an event and `cohort resume` can clear the mark for good.
struct GpuReport {
  int index = 0;
  GpuTelemetry telemetry;  // updated_ms unused on the wire
  int64_t health_events = 0;
  std::string health_event;
};

// Agent → head: POST /v1/nodes/{name}/heartbeat.
struct Heartbeat {
  std::string incarnation;
  int64_t applied_version = 0;    // the newest assignment version the agent has acted on
  std::vector<TaskReport> tasks;  // running tasks and finished ones not yet acknowledged
  std::vector<int> free_ports;    // ports found free on this node, for MASTER_PORT
  std::vector<GpuReport> gpus;    // telemetry and health, one per GPU (may be empty)
};

// A task the head wants running on a node.
struct TaskLaunch {
  JobId job = 0;
  int attempt = 0;
  int rank = 0;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;  // the job contract's variables and the spec's env
  std::string workdir;
  // The job's output/error patterns and open_mode (JobSpec; api/output_pattern.h), which
  // the agent expands for the task. Sent with the launch details when set.
  std::string output;
  std::string error;
  std::string open_mode;
  std::vector<int> gpus;
  int cpus = 0;
  // The job's user: a root agent runs the task as this account (agent/task_user.h). Empty
  // from a head that predates it: the task runs as the agent.
  std::string user;
  // The head asks this attempt to checkpoint (`cohort drain --now`, a preemption, a time
  // limit near): the agent delivers `checkpoint_signal` (a signal number; 0: none) to the
  // task once per request, the first time it sees checkpoint_requested set with a
  // checkpoint_requested_ms it has not signalled. Level-triggered: every reply repeats both
  // while the request stands. checkpoint_requested_ms names the request (when the head made
  // it, Unix ms): two requests in a row (a time-limit request answered, then a drain's) can
  // reach an agent with no reply between them that asks for none, and only the changed
  // value tells it that the second is new. 0 from a head that predates it: the agent then
  // signals again only after a reply without a request.
  bool checkpoint_requested = false;
  int checkpoint_signal = 0;
  int64_t checkpoint_requested_ms = 0;
  ContainerSpec container;  // the job's image, if any (sent with the launch details)
  // An allocation's task (JobSpec::allocation): no command; the shim holds the task with a
  // waiting process (task_shim.h, --hold). Sent with the launch details.
  bool hold = false;
  // A batch script's task (JobSpec::script, rank 0): the script's text, which the agent runs
  // with `command` as its arguments. Sent with the launch details.
  std::string script;
  // Whether the launch carries its details (command or hold, env, ...): a task the agent
  // already runs goes without them (core::DesiredTasks).
  bool has_details() const { return !command.empty() || hold || !script.empty(); }
};

struct TaskRef {
  JobId job = 0;
  int attempt = 0;
  int rank = 0;
  auto operator<=>(const TaskRef&) const = default;
};

// Head → agent: the reply to a heartbeat. Level-triggered: `tasks` is the whole set the
// head wants on the node; the agent starts what is missing and stops everything else.
// The number of the checkpoint_signal ("USR1" → SIGUSR1), or 0 for "".
int CheckpointSignalNumber(const std::string& name);

struct HeartbeatReply {
  int64_t version = 0;
  std::vector<TaskLaunch> tasks;
  std::vector<TaskRef> acked;  // finished tasks whose exit the head has stored
  AgentTiming timing;
};

// JSON codecs. FromJson validates everything and names the bad field.
json ToJson(const JobSpec& s);
// A spec as submitted: its fields, ValidateJobSpec, and api::CheckSpecFitsNodes (what no
// node could start: exec's size limits, impossible working directories).
Result<JobSpec> JobSpecFromJson(const json& j);
// A job's or a token's user: 1-64 characters of letters, digits, '.', '_' or '-'.
bool ValidUserName(std::string_view name);
// Cross-field checks, also applied by JobSpecFromJson.
Result<void> ValidateJobSpec(const JobSpec& s);
// Node labels: at most 16, keys 1-63 characters of [a-z0-9._-] starting with a letter,
// values 1-63 characters of [A-Za-z0-9._-]; kInvalidArgument naming `field`.key.
Result<void> ValidateNodeLabels(const std::map<std::string, std::string>& labels, const std::string& field);
// Node features (`cohort agent --features a100,ib`): at most 64, each 1-63 characters of
// [A-Za-z0-9._:-]; kInvalidArgument naming `field`.
Result<void> ValidateNodeFeatures(const std::vector<std::string>& features, const std::string& field);

json ToJson(const Job& j);
// A stored or replied job; its spec is checked as JobSpecFromJson checks it, except for
// CheckSpecFitsNodes, so that jobs stored before a limit existed still load.
Result<Job> JobFromJson(const json& j);
json ToJson(const Gpu& g);
json ToJson(const GpuTelemetry& t);  // unknown readings are null
json ToJson(const Node& n);
Result<Node> NodeFromJson(const json& j);
json ToJson(const Registration& r);
Result<Registration> RegistrationFromJson(const json& j);
json ToJson(const AgentTiming& t);
Result<AgentTiming> AgentTimingFromJson(const json& j);
json ToJson(const Heartbeat& h);
Result<Heartbeat> HeartbeatFromJson(const json& j);
json ToJson(const HeartbeatReply& r);
Result<HeartbeatReply> HeartbeatReplyFromJson(const json& j);

// Environment variables every task gets from Cohort (DESIGN.md, the job contract); a
// spec's env may not set them.
bool IsReservedEnvName(std::string_view name);

}  // namespace cohort::api
