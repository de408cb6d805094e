// A step of an allocation from the CLI (`cohort run` with COHORT_JOB_ID set inside `cohort
// alloc`, like srun inside salloc): the command runs on the allocation's tasks through the
// head (api/step.h), their output printed here as it comes, their exit codes folded into
// one.
#pragma once

#include "api/step.h"
#include "cli/cli.h"

namespace cohort::cli {

// Whether `cohort run` makes a step: COHORT_JOB_ID is set and this is not a task of a job
// (RANK unset: a task's `cohort run -n 4` stays local ranks). Returns the allocation's id
// text, or "" for local ranks.
std::string StepAllocationFromEnvironment();

// Runs `req` as a step of the allocation `allocation` names (COHORT_JOB_ID's text): prints
// each task's stdout and stderr on ours as it arrives, and returns the highest exit code of
// its tasks (0 when all succeeded). SIGINT or SIGTERM ends every task (exit 128 + signal).
// The head's refusals (not an allocation, not running, asking more than it holds, not the
// owner) print with exit code 1 (2 for a bad COHORT_JOB_ID), naming COHORT_JOB_ID. --json:
// {job, step, tasks: [{rank, node, exit_code, stdout, stderr}]} at the end.
int RunStep(const std::string& allocation, const api::StepRequest& req, const GlobalOptions& global);

}  // namespace cohort::cli
