// Steps of an allocation (`cohort alloc`, Slurm's salloc and srun): the wire types and the
// one rule for which of an allocation's tasks a step runs on.
//
// An allocation (JobSpec::allocation) holds nodes and GPUs without a command; a step runs
// a command on some of its tasks, each rank's part as an exec session beside the held
// task (api/exec.h), so it gets the task's environment, account, directory and GPUs:
//   POST /v1/jobs/{id}/steps   StepRequest → {"step": N, "attempt": A,
//                                             "sessions": [{"rank", "node", "session"}]}
// then each session's output and input as for `cohort exec`. The head records the step in
// Job::steps (api/types.h) and each task's exit code as it relays it. Pure functions; any
// thread may call them.
#pragma once

#include <string>
#include <vector>

#include "api/types.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

// The most steps an allocation keeps; past it the oldest go.
inline constexpr size_t kMaxSteps = 1000;

// What a step asks of its allocation; 0 takes what the allocation holds.
struct StepRequest {
  std::vector<std::string> command;  // argv, as ExecRequest::command
  int nodes = 0;                     // the first `nodes` nodes of the allocation
  int tasks = 0;                     // tasks in all, spread over those nodes as evenly as they go
  int gpus_per_node = 0;             // checked against the allocation; every task sees its own GPUs
};
json ToJson(const StepRequest& r);
// Strict: every field checked and named.
Result<StepRequest> StepRequestFromJson(const json& j);

// The ranks of `job`'s current attempt that a step of `req` runs on, in rank order. Errors
// name the field: kFailedPrecondition when `job` is not a RUNNING allocation ("job 12 is
// not an allocation (cohort alloc makes one)", "allocation 12 is PENDING"), kInvalidArgument
// when the step asks more than the allocation holds ("nodes: the step asks 3 nodes;
// allocation 12 holds 2").
Result<std::vector<int>> PlanStep(const Job& job, const StepRequest& req);

json ToJson(const StepRecord& s);
Result<StepRecord> StepRecordFromJson(const json& j);

}  // namespace cohort::api
