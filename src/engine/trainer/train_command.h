// `cohort train --config FILE`: trains a GPT-2-style model (Trainer) as one rank of a job.
//
// It finds its place from the launcher's environment (comm::DetectLaunchEnv: a Cohort job,
// `cohort run`, torchrun, Slurm or Open MPI; a plain process is rank 0 of 1) and the job
// contract's COHORT_JOB_ID, COHORT_ATTEMPT, COHORT_REPORT and COHORT_CHECKPOINT_DIR.
// `-n N` re-executes itself under `cohort run -n N` to train on N local ranks. Flags
// override the config file (--steps, --checkpoint-dir, ...). Exit codes as the CLI's:
// 0 done, 1 failure, 2 bad usage or config, 3 a peer or store unreachable / timed out.
// Runs on the main thread.
#pragma once

#include "common/external_command.h"

namespace cohort::engine {

ExternalCommand TrainCommand();

}  // namespace cohort::engine
