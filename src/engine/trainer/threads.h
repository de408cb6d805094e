// How many CPU threads a rank's kernels use. The kernels split work over OpenMP threads and
// call OpenBLAS single-threaded inside them, so the OpenMP count is the only one.
#pragma once

namespace cohort::engine {

// The CPUs this process may run on: its affinity mask (taskset, a cgroup cpuset, Slurm's or
// Kubernetes' CPU binding; common/cpu_set.h's AffinityCpus), or the machine's online CPUs
// when the mask cannot be read. At least 1.
int UsableCpus();

// Whether the launcher bound this rank to CPUs of its own, so that its affinity mask is its
// share alone: COHORT_CPU_BIND is set and not empty (the agent's --cpu-bind cores sets it
// to the CPUs it bound the task to; api/job_env.h). A mask smaller than the machine does
// not say so by itself: an agent started under taskset or in a cpuset, with --cpu-bind
// none, gives every local rank the same reduced mask, which they share.
bool RankIsBound();

// `requested` > 0 wins; else OMP_NUM_THREADS when set; else the usable CPUs (UsableCpus):
// all of them for a bound rank (RankIsBound: the mask is already its share), shared evenly
// among the `local_ranks` ranks on this machine for an unbound one (at least 1). Sets
// OpenMP's thread count and returns the number chosen. Call before any kernel runs.
int ConfigureThreads(int requested, int local_ranks);

}  // namespace cohort::engine
