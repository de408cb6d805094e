// cohort: parse the subcommand and dispatch (src/cli); data-plane tools (src/comm) join
// as external commands so that the CLI library never links the data plane.
#include "cli/cli.h"
#include "comm/bench/bench_command.h"

int main(int argc, char** argv) {
  const cohort::ExternalCommand external[] = {cohort::comm::BenchCommand()};
  return cohort::cli::RunCli(argc, argv, external);
}
