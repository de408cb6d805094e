// `cohort batch [flags] [SCRIPT [ARGS...]]` (also `cohort sbatch`): Slurm's sbatch.
//
// The script's text is submitted with the job (api::JobSpec::script), so an edit after
// submitting changes nothing and the nodes need no copy of the file. The job is an
// allocation of the nodes, GPUs and tasks its flags ask for; its first task runs the script
// once, on the first node, as the job's user (sbatch's batch step), and the script runs its
// parallel work as steps over the whole allocation with `cohort run` (srun). The job ends
// with the script's exit code.
//
// Flags come from the script's `#SBATCH` lines, read as sbatch reads them: from the line
// after `#!` down to the first line that is neither blank nor a comment, each line's words
// split as a shell splits them (quotes kept together) up to an unquoted word that starts
// with '#'. Every line is checked on its own, so an error names its line ("job.sh:4:
// #SBATCH --partition=gpu: ..."); a later line overrides an earlier one, and a flag on the
// command line overrides them all. The flags are `cohort submit`'s (Slurm's names among
// them: -J, -N, --ntasks-per-node, -c, -t, -o, -e, -D, -A, -a, -d, --mem, -w, -x, -C,
// --begin, -H, --parsable, --wait), so a cohort-only one (--gpus-per-task 0.5) works in a
// directive too, except that -n is sbatch's --ntasks (tasks in all, spread evenly over the
// job's final nodes; submit's -n counts per node) and --gres=gpu[:TYPE]:COUNT is -G. Without -o and -e, output goes to slurm-%j.out (slurm-%A_%a.out for an
// array) in the working directory, as sbatch's default; `cohort logs` shows it too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/types.h"
#include "cli/submit.h"
#include "common/error.h"

namespace cohort::cli {

// One #SBATCH line: its number (1-based), its text after "#SBATCH", and its words.
struct BatchDirective {
  int line = 0;
  std::string text;
  std::vector<std::string> words;
};

// The #SBATCH lines of `script`; kInvalidArgument naming the line for an unterminated quote.
Result<std::vector<BatchDirective>> ReadBatchDirectives(std::string_view script);

// What `cohort batch` submits: the spec, with the flags of the state that submits it
// (--hold, --parsable, --wait, --dry-run from the command line or a directive).
struct BatchSubmission {
  api::JobSpec spec;
  SubmitState state;
  bool user_named = false;  // --user given (the head otherwise takes the token's user)
};

// The submission of `script` (its text; `source` names it in messages: the file, or
// "<stdin>") with `args` as its arguments, under the command line's flags `cli` (its
// --wrap already made into the script). kInvalidArgument naming the line, the flag or the
// file for bad input.
Result<BatchSubmission> BuildBatchSubmission(const std::string& script, const std::string& source,
                                             const std::vector<std::string>& args, const SubmitState& cli);

}  // namespace cohort::cli
