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
// several tasks share, on one node or on many, is emptied once, by whichever of them opens
// it first, before any of them writes (agent/output_file.h, by OutputTruncationMarker).
// Pure functions; any thread.
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

// Whether the tasks of attempt `attempt` ask to empty their output files: in "truncate"
// mode (and "") on the job's first attempt, every task; never in "append" mode or on a
// later attempt. Which of the tasks that share a file empties it is settled when they open
// it: the first (agent/output_file.h).
bool OutputTruncates(std::string_view open_mode, int attempt);

// The mark an attempt leaves on the output files it has emptied, the same on every node:
// "<hash>:<job>:<attempt>", where <hash> is 16 hex digits of the SHA-256 of the attempt's
// rendezvous token (the last segment of its COHORT_RENDEZVOUS URL, which the head derives
// from a secret of its own, the job and the attempt), so that job 12 of another cluster,
// or of a head started afresh, never passes for this one, and the file's readers do not
// learn the token. "local:<job>:<attempt>" without a URL.
std::string OutputTruncationMarker(std::string_view rendezvous_url, int64_t job, int attempt);

}  // namespace cohort::api
