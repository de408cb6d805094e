// LaunchEnv: where this process stands in its job, from whichever launcher started it.
//
// Sources, first match wins:
//   cohort/torchrun  RANK, WORLD_SIZE (+ LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
//                    MASTER_ADDR, MASTER_PORT, COHORT_RENDEZVOUS)
//   slurm            SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//                    SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE, SLURM_NODELIST
//                    (rank 0 runs on its first host), SLURM_JOB_ID
//   openmpi          OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _NODE_RANK
//                    (MASTER_ADDR must name rank 0's host: Open MPI does not say it)
//   single           none of the above: rank 0 of 1
// The rendezvous store is COHORT_RENDEZVOUS when set (a Cohort job's head store, or the
// tcp:// store `cohort run` gives), else tcp://MASTER_ADDR:MASTER_PORT hosted by rank 0
// (for slurm without MASTER_PORT: a port derived from the job id). Pure function of the
// environment; thread-safe.
#pragma once

#include <functional>
#include <string>

#include "common/error.h"

namespace cohort::comm {

struct LaunchEnv {
  std::string source;  // "cohort", "slurm", "openmpi" or "single"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string store_url;  // empty for a single process
  bool hosts_store() const { return rank == 0 && store_url.starts_with("tcp://"); }
};

using EnvLookup = std::function<const char*(const char*)>;

// kInvalidArgument naming the variable for malformed or inconsistent values
// ("RANK=4 is not below WORLD_SIZE=4").
Result<LaunchEnv> DetectLaunchEnv(const EnvLookup& getenv);
Result<LaunchEnv> DetectLaunchEnv();  // from this process's environment

// The first host of a Slurm hostlist: "gpu[07-09,12],cpu1" → "gpu07".
Result<std::string> FirstSlurmHost(const std::string& nodelist);

}  // namespace cohort::comm
