// How many CPU threads a rank's kernels use. The kernels split work over OpenMP threads and
// call OpenBLAS single-threaded inside them, so the OpenMP count is the only one.
#pragma once

namespace cohort::engine {

// The CPUs this process may run on: its affinity mask (taskset, a cgroup cpuset, Slurm's or
// Kubernetes' CPU binding), or the machine's online CPUs when the mask cannot be read.
// At least 1.
int UsableCpus();

// `requested` > 0 wins; else OMP_NUM_THREADS when set; else the usable CPUs (UsableCpus)
// shared evenly among the `local_ranks` ranks on this machine (at least 1). Sets OpenMP's
// thread count and returns the number chosen. Call before any kernel runs.
int ConfigureThreads(int requested, int local_ranks);

}  // namespace cohort::engine
