// "Did you mean ...?" for the command line: the closest subcommand or flag to one typed
// wrong, worked out from the CLI11 definition itself, so a new command or flag is
// suggested with no list to keep.
//
// Pure functions of an App and argv (CLI11's App is read, never parsed again); any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace cohort::cli {

// Up to `max` of `candidates` closest to `typed`: those within an edit distance of a third
// of its length, rounded (at least 1, at most 3), or that `typed` is a prefix of; the closest
// first, ties in the candidates' order.
std::vector<std::string> ClosestNames(std::string_view typed, const std::vector<std::string>& candidates,
                                      size_t max = 3);

// The names a subcommand answers to (name and aliases), for each subcommand of `app`.
std::vector<std::string> SubcommandNames(CLI::App& app);

// The command `app` is, as typed: its name after its parents' ("cohort token create").
std::string CommandPath(const CLI::App& app);

// The flags `app` and its parents take ("--head", "-N"), each once, without positionals.
std::vector<std::string> FlagNames(const CLI::App& app);

// For argv that failed to parse: the first word argv names wrongly (an unknown
// subcommand, or a flag the command does not take) with the closest names, as
// "unknown command 'hlod'; did you mean: cohort hold 12" (an unknown command with none
// close: "unknown command 'frobnicate' (cohort --help lists them)"), or "" when every
// word is known (the error lies elsewhere: a missing value, a bad number) or no flag is
// close.
std::string DidYouMean(CLI::App& app, int argc, const char* const* argv);

// For a flag of Slurm's sbatch/salloc that cohort submit and alloc do not take ("--gres",
// "-o", "--partition"), what to use instead: "ask for GPUs with -G/--gpus ..."; "" for any
// other flag. `flag` is the name as typed, without "=value".
std::string SlurmFlagHint(std::string_view flag);

}  // namespace cohort::cli
