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

// GPU share units per device (api::kGpuShareUnits): a fractional task holds some of them.
inline constexpr int kGpuShareUnits = 4;

// One device of a node in detail (issue 18), for requests that name a GPU type, share a
// GPU or need connected GPUs (gpu_fit.h). A MIG instance is a device of its own.
struct GpuView {
  int index = 0;
  std::string type;   // model short name ("h100") or MIG profile ("1g.10gb"); "" unknown
  bool mig = false;
  bool healthy = true;                // an unhealthy device is never placed on
  int64_t memory_mib = 0;             // the device's memory; 0 unknown
  int free_share = kGpuShareUnits;    // share units free; 0 once a whole-device job holds it
  int64_t free_memory_mib = 0;        // memory not promised to sharing tasks
  int nvlink_island = -1;             // devices with the same island talk over NVLink; -1 unknown
  int pcie_switch = -1;               // ... under the same PCIe switch; -1 unknown
};

struct NodeView {
  std::string id;
  std::string unavailable;     // "" if schedulable; else why not: "down", "draining"
  int total_gpus = 0;          // healthy GPUs on the node
  std::vector<int> free_gpus;  // sorted indices free now
  int total_cpus = 0;
  int free_cpus = 0;
  // Node constraints (constraints.h): the agent's --features, its memory in MiB (0:
  // unknown) and the MiB not reserved by the jobs running there (their --mem).
  std::vector<std::string> features;
  int64_t memory_mb = 0;
  int64_t free_memory_mb = 0;
  // Issue 18: every device in detail; empty when only free_gpus is known (whole, untyped
  // GPUs). `free_gpus` lists the whole, non-MIG GPUs that no task holds any share of.
  std::vector<GpuView> gpus = {};
  std::string network_switch = {};  // the node's switch (its `switch` topology label); "" unknown
};

// A part of one GPU that one task of a sharing job holds.
struct GpuSlice {
  int gpu = 0;
  int share = 0;            // share units
  int64_t memory_mib = 0;
};

// What a running job holds on one node: `gpus` is a count of whole GPUs.
struct Usage {
  std::string node;
  int gpus = 0;
  int cpus = 0;
  // In detail, for preemption of typed, sharing and topology-bound jobs (preempt.h): the
  // device indices it holds whole, the slices its tasks hold (a sharing job), and the
  // memory its --mem reserves on the node (MiB). Empty / 0 when unknown: the planner then
  // counts `gpus` alone.
  std::vector<int> devices = {};
  std::vector<GpuSlice> slices = {};
  int64_t memory_mb = 0;
};

struct RunningJob {
  int64_t id = 0;
  int64_t end_ms = kNever;  // expected end; kNever when the job has no time limit
  std::vector<Usage> usage;
  // For fair share, quotas and preemption (Snapshot::shares; ignored without it):
  std::string team;
  int priority = 0;           // the job's own priority (JobSpec::priority)
  int64_t start_ms = 0;       // when the current attempt started
  int64_t checkpoint_ms = 0;  // its last reported checkpoint (or start_ms): work since is lost
  // False while the head is already moving or preempting the job (its GPUs are being
  // given back): it is no candidate for another preemption.
  bool preemptible = true;
  int64_t preempting_for = 0;  // the job it is being preempted for, 0 if none
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
  // For fair share, quotas and preemption (Snapshot::shares; ignored without it):
  std::string team;
  // Victims are being preempted for this job: it is considered first, and preempts no
  // more until they are gone (or the head gives up waiting on them).
  bool nominated = false;
  // The nodes its victims are being freed on (Preemption::nodes): while it is nominated,
  // no other job starts there or preempts there, so what its victims give back waits
  // for it. Empty: none known (it then waits like any job).
  std::vector<std::string> nominated_nodes = {};
  std::vector<int64_t> preempted_by;  // jobs that preempted this one: never its victims
  // Node constraints (constraints.h); empty / 0: none.
  std::string nodelist;        // Slurm host list: every named node is a member
  std::string exclude;         // Slurm host list: never these nodes
  std::string constraint;      // feature expression: "a100&ib|h100"
  int64_t mem_per_node_mb = 0;  // unreserved memory each member node needs
  // Issue 18 (gpu_fit.h): a device type ("h100", "1g.10gb"; "" any whole GPU); a share of
  // one GPU per task (gpu_share units and/or gpu_memory_mib; gpus_per_node is then 0); and
  // whether connected GPUs and one switch are required (else preferred).
  std::string gpu_type;
  int gpu_share = 0;
  int64_t gpu_memory_mib = 0;
  bool topology_required = false;
};

// A team as the scheduler sees it (api/team.h): its quota, borrow limit, fair-share
// weight and decayed usage.
struct TeamView {
  std::string name;
  int64_t weight = 1;
  int64_t quota_gpus = 0;          // nominal quota, guaranteed
  int64_t borrow_limit_gpus = -1;  // more it may use while others leave GPUs idle; -1: no limit
  double usage_gpu_s = 0;          // decayed GPU-seconds (fair_share.h)
};

// Multifactor priority (Slurm's priority/multifactor): each factor is in [0, 1] and counts
// its weight in points; the queue runs in descending points. Defaults: one step of a job's
// own priority (-1000..1000) is worth 20,000 points, more than fair share (10,000 at
// most, for a team that used nothing) and age (1,000 once a job waited max_age_ms)
// together, so that a job's explicit priority still orders the queue and fair share
// orders the jobs of equal priority across teams.
struct PriorityWeights {
  double fair_share = 10'000;
  double age = 1'000;
  double size = 0;  // factor: the job's GPUs over the cluster's
  double job = 40'000'000;
  int64_t max_age_ms = 7LL * 24 * 3600 * 1000;
};

// When the scheduler may take GPUs back from running jobs (preempt.h).
struct PreemptionPolicy {
  bool enabled = true;
  int64_t min_runtime_ms = 10LL * 60 * 1000;  // a job that started more recently is never a victim
  int max_preemptors = 8;                     // jobs that may start preemptions in one pass
};

struct SharePolicy {
  std::vector<TeamView> teams;  // teams a job names but this list lacks are "default"-like
  PriorityWeights weights;
  PreemptionPolicy preemption;
};

struct Snapshot {
  int64_t now_ms = 0;
  std::vector<NodeView> nodes;
  std::vector<RunningJob> running;
  std::vector<JobRequest> pending;
  // Fair share, quotas with borrowing and preemption. Absent: the queue runs by priority
  // and submit order alone (priority.h), with no quotas and no preemption.
  std::optional<SharePolicy> shares;
};

// One gang member: the node, the GPU indices it gets there (sorted), and its CPU count.
struct NodeAssignment {
  std::string node;
  std::vector<int> gpus;
  int cpus = 0;
  // A sharing job: one slice per task, in local-rank order (`gpus` then lists their GPUs).
  std::vector<GpuSlice> slices = {};
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

enum class PreemptKind {
  kReclaim,   // the victim's team borrows; the preemptor's team takes back its quota
  kPriority,  // the victim is of the preemptor's team and of lower priority
};

// One running job to checkpoint and requeue so that `preemptor` can start.
struct Preemption {
  int64_t victim = 0;
  int64_t preemptor = 0;
  PreemptKind kind = PreemptKind::kReclaim;
  std::string reason;           // "reclaim: team ml needs 8 GPUs of its quota of 16; team cv borrows 8"
  double work_at_risk_gpu_s = 0;  // GPU-seconds since the victim's last checkpoint
  // The nodes the preemptor's gang will take once its victims are gone (the same for
  // every victim of one preemptor): held for it while it is nominated.
  std::vector<std::string> nodes = {};
};

struct Decision {
  std::vector<JobPlacement> start;                 // in queue order
  std::map<int64_t, std::string> pending_reasons;  // every pending job not started
  std::optional<Reservation> reservation;
  std::vector<Preemption> preempt;                 // with Snapshot::shares only
  std::vector<int64_t> order;  // every pending job's id, in the order the pass considered them
};

// A node's full size, regardless of state or usage (for CheckFeasible).
struct NodeCapacity {
  std::string id;
  int gpus = 0;
  int cpus = 0;
  std::vector<std::string> features;  // for CheckConstraintsFeasible (constraints.h)
  int64_t memory_mb = 0;
};

// A node's devices in full (every one free), for typed and sharing jobs (gpu_fit.h).
struct NodeDevices {
  std::string id;
  int cpus = 0;
  std::vector<GpuView> devices;
  std::string network_switch = {};  // its `switch` topology label (NodeView's); "" unknown
};

}  // namespace cohort::sched
