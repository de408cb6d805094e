// The job contract's environment (DESIGN.md, "The job contract"): the variables every
// task of a job gets, built in one place for the head (tasks it sends to agents) and for
// `cohort run` (local ranks outside any cluster). Pure functions of plain values; any
// thread.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "api/types.h"

namespace cohort::api {

// Where a task reaches the cluster, and what a local run leaves out.
struct TaskEnvOptions {
  std::string head_url;        // COHORT_HEAD; empty: not set (a local run)
  std::string rendezvous_url;  // COHORT_RENDEZVOUS; empty: not set
  std::string report_url;      // COHORT_REPORT; empty: not set
  std::string checkpoint_dir;  // COHORT_CHECKPOINT_DIR; empty: not set
  std::string ca_pem;          // COHORT_CA: the head's authority (PEM), with TLS; empty: not set
  std::string job_token;       // COHORT_JOB_TOKEN: the attempt's bearer token for its own job; empty: not set
  // An array element's array (its `array` spec, "0-99:2%4"): COHORT_ARRAY_TASK_COUNT,
  // _MIN, _MAX and _STEP (and SLURM_ARRAY_TASK_*); empty: not set.
  std::string array;
  // CUDA_VISIBLE_DEVICES = the task's GPUs ("" for none, hiding every GPU); false: not
  // set, the task sees what its parent sees (`cohort run` without --gpus-per-rank).
  bool set_visible_devices = true;
};

// The options of a task the head launches: the head's URL, the attempt's rendezvous
// store and progress endpoint on it (`token` names the job's attempt,
// RendezvousStore::Token), and checkpoints under {checkpoint_root}/job-{job}.
TaskEnvOptions ClusterTaskEnvOptions(std::string_view head_url, std::string_view token,
                                     std::string_view checkpoint_root, JobId job, std::string_view ca_pem = {});

// The environment of `task` (placed on `node`, one part of job.allocation) of the job's
// current attempt: job.spec.env, then over it RANK, WORLD_SIZE (job.world_size()),
// LOCAL_RANK, LOCAL_WORLD_SIZE (tasks_per_node), NODE_RANK and GROUP_RANK,
// MASTER_ADDR/MASTER_PORT (the allocation's), COHORT_ATTEMPT and
// TORCHELASTIC_RESTART_COUNT, COHORT_NUM_NODES (the allocation's node count),
// CUDA_VISIBLE_DEVICES, the URLs of `options`, COHORT_CA (with a TLS head) and
// COHORT_JOB_TOKEN, and COHORT_UMASK (the spec's umask, when set; agent/task_umask.h).
// An array element gets COHORT_ARRAY_JOB_ID and COHORT_ARRAY_TASK_ID
// and, from options.array, COHORT_ARRAY_TASK_COUNT, _MIN, _MAX and _STEP (the indices'
// common step, 1 when they have none), each also as SLURM_ARRAY_*. A job with an id (> 0) also gets
// COHORT_JOB_ID and COHORT_JOB_NAME; a named node, COHORT_NODE; `cohort run` passes
// neither (id 0, node ""). An allocation's tasks (a batch script and the steps beside them)
// also get what `cohort alloc`'s shell has: COHORT_NODELIST, SLURM_JOB_NODELIST,
// SLURM_JOB_ID, SLURM_JOBID, SLURM_NNODES, SLURM_JOB_NAME and SLURM_SUBMIT_DIR (its workdir).
// The per-rank variables a batch script itself must not see are kRankVariables.
//
// The agent adds the CPU variables, which only it knows (agent/executor.h): for a task
// with cpus_per_task > 0, COHORT_CPUS_PER_TASK (Slurm's SLURM_CPUS_PER_TASK),
// COHORT_CPU_BIND (the CPUs it is bound to in the kernel's list format, "0-3"; only when
// bound: Slurm's SLURM_CPU_BIND_LIST; a rank of `cohort train` takes it to mean that its
// mask is its own share, engine/trainer/threads.h) and, only when bound, OMP_NUM_THREADS
// (the number of CPUs bound) unless job.spec.env sets it.
std::map<std::string, std::string> TaskEnvironment(const Job& job, const NodeAllocation& node,
                                                   const TaskPlacement& task, const TaskEnvOptions& options);

// An allocation's variables (`cohort alloc`'s shell, and in TaskEnvironment its tasks'):
// COHORT_JOB_ID, SLURM_JOB_ID, SLURM_JOBID, COHORT_NODELIST and SLURM_JOB_NODELIST (its
// nodes, comma separated), COHORT_NUM_NODES and SLURM_NNODES.
std::map<std::string, std::string> AllocationVariables(const Job& job);

// What a batch script's own environment (JobSpec::script) lacks of its task's: RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK and GROUP_RANK. The script is not one
// of the ranks (as sbatch's batch step is not an srun task): a program it starts directly
// must not join a process group as rank 0 of WORLD_SIZE, and `cohort run` in it must start
// a step (cli/step.h), not run locally. The steps beside its task keep them.
inline constexpr const char* kRankVariables[] = {"RANK",      "WORLD_SIZE", "LOCAL_RANK",
                                                 "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK"};

}  // namespace cohort::api
