// What `cohort submit` and `cohort batch` (sbatch) share: their job flags and the
// submission of a built spec (submit.cc).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "api/types.h"
#include "cli/client.h"

namespace cohort::cli {

struct SubmitState {
  SubmitFlags flags;
  std::string spec_file;
  bool wait = false;
  bool dry_run = false;
  bool hold = false;      // -H/--hold: submitted held (cohort release starts it)
  bool parsable = false;  // --parsable: only the job id on stdout, as sbatch --parsable
  std::optional<std::string> wrap;  // --wrap: the command, run by /bin/sh -c
};

// The job flags of `submit` on `sub` (resources, output files, array, dependency, begin,
// --wrap, -H, --parsable, --wait, --dry-run), bound to `st`; not its positionals nor the
// client options. `slurm_tasks`: as AddResourceFlags's (cohort batch).
void AddSubmitFlags(CLI::App* sub, SubmitState& st, bool slurm_tasks = false);

// What this process submits with: its working directory, $USER and environment.
SubmitDefaults CurrentDefaults();

// Submits `spec` (built and checked) as `cohort submit` does: --dry-run prints it instead;
// then "Submitted WHAT N" (or the id alone with --parsable, the head's reply with --json),
// and with --wait polls until the job ends (exit 0 only if it SUCCEEDED).
int SubmitBuiltSpec(const api::JobSpec& spec, bool user_named, const SubmitState& st, const GlobalOptions& global,
                    std::string_view what);

}  // namespace cohort::cli
