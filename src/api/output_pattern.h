// Output files: the patterns of a job's `output` and `error` (Slurm's sbatch --output,
// --error and --open-mode), checked at submit and expanded for each task by the agent.
//
//   %j  job id              %A  array's job id (%j when not an array element)
//   %a  array index (4294967294 when not an array element, as Slurm's NO_VAL)
//   %x  job name            %u  user
//   %N  node name           %n  node index (NODE_RANK)       %t  task rank (RANK)
//   %%  a '%'
//
// A number between '%' and the letter zero-pads a numeric field to that width
// ("%4t" → 0003; Slurm's), at most 10; it is ignored for %x, %u and %N. Anything else
// after a '%' is an error. A relative path is relative to the job's working directory;
// the agent's task shim opens it as the job's user (agent/task_shim.h).
//
// Open mode: "append" appends every attempt; "truncate" (and "", Slurm's default)
// truncates the file when the job's first attempt opens it and appends on later attempts
// (a requeue or restart adds to what the earlier attempts wrote, as Slurm does). A file
// several tasks share is truncated by one of them only (OutputTruncates). Pure functions;
// any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace cohort::api {

// The values a pattern's fields stand for; a field whose value is nullopt stays as written
// (what `cohort show` cannot know: the node and the rank).
inline constexpr int64_t kNoArrayIndex = 4294967294;  // %a of a job that is not an array element

struct OutputPatternValues {
  int64_t job_id = 0;
  int64_t array_job_id = 0;  // 0: not an array element (%A is then job_id)
  std::optional<int64_t> array_task_id = kNoArrayIndex;
  std::string job_name;
  std::string user;
  std::optional<std::string> node;
  std::optional<int64_t> node_index;
  std::optional<int64_t> rank;
};

// Checks `pattern` as the value of `field` ("output", "error"): not empty, no NUL byte, at
// most 4096 bytes, not a directory ("logs/", "."), and only the fields above after '%'.
// kInvalidArgument naming the field, the pattern and what is wrong.
Result<void> CheckOutputPattern(std::string_view field, std::string_view pattern);
// "", "append" or "truncate"; kInvalidArgument naming "open_mode" otherwise.
Result<void> CheckOpenMode(std::string_view open_mode);

// `pattern` with its fields replaced. Expects a pattern CheckOutputPattern accepts (an
// unknown field is copied as written).
std::string ExpandOutputPattern(std::string_view pattern, const OutputPatternValues& values);

// Whether the task (rank, local_rank) of attempt `attempt` truncates the file `pattern`
// names when it opens it: never in "append" mode or after the first attempt; else the one
// task that opens the file first among those that share it: every task when the pattern has
// %t (a file per task), local rank 0 when it has %N or %n (a file per node), rank 0
// otherwise (one file for the job). The others append, so no task cuts another's lines.
bool OutputTruncates(std::string_view pattern, std::string_view open_mode, int attempt, int64_t rank,
                     int64_t local_rank);

// The rank of another task on this node (node index `node_index`) that truncates the file
// `pattern` names and that this task must let open it first, so that the truncation never
// cuts what this task wrote: its node's local rank 0 (rank - local_rank) when the file is
// shared and this task does not truncate it itself; -1 when there is none here to wait for
// (append mode, a later attempt, a file per task, or a job-wide file truncated by rank 0
// on another node: that case is a race this function cannot close).
int64_t OutputOpenedFirstBy(std::string_view pattern, std::string_view open_mode, int attempt, int64_t rank,
                            int64_t local_rank, int64_t node_index);

}  // namespace cohort::api
