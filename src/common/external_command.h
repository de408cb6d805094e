// ExternalCommand: a `cohort` subcommand implemented outside the CLI library.
//
// The CLI (control plane) must not link the data plane, yet the one `cohort` binary
// offers data-plane tools (`cohort bench allreduce`). apps/cohort/main.cc hands such
// commands to cli::RunCli: when argv[1] is `name`, RunCli calls `run(argc - 1, argv + 1)`
// (so the command sees its own name as argv[0] and parses its own flags) and returns its
// exit code; `cohort --help` lists `name` with `description`. The exit codes follow the
// CLI's: 0 success, 1 failure, 2 bad usage, 3 a peer could not be reached. Plain value;
// `run` is called on the main thread.
#pragma once

#include <functional>
#include <string>

namespace cohort {

struct ExternalCommand {
  std::string name;         // "bench"
  std::string description;  // one line for `cohort --help`
  std::function<int(int argc, char** argv)> run;
};

}  // namespace cohort
