// `cohort bench ...`: data-plane benchmarks as an external command of the cohort binary
// (common/external_command.h), so that the CLI library never links the data plane.
//
//   cohort bench allreduce [-n RANKS=2] [--backend gloo|nccl] [--min-bytes 4]
//       [--max-bytes 256M] [--factor 2] [--iters N] [--warmup N] [--dtype float32]
//       [--no-baseline] [--no-consistency-check] [--iface ADDR] [--timeout 300s]
//
// The launcher re-executes this binary as `cohort run -n RANKS -- cohort bench allreduce
// --worker ...` (the local launcher every job uses); each worker finds its peers with
// DetectLaunchEnv, so `--worker` also runs under torchrun, Slurm or a Cohort job. Rank 0
// prints the table (allreduce_bench.h). Exit codes as the CLI's: 0, 1 failure, 2 bad
// usage, 3 a peer or device unavailable / timed out. Runs on the main thread.
#pragma once

#include "common/external_command.h"

namespace cohort::comm {

ExternalCommand BenchCommand();

}  // namespace cohort::comm
