// cohort: parse the subcommand and dispatch (src/cli); the data-plane tools (src/comm
// benchmarks, src/engine training, src/serve inference) join as external commands so that the CLI library
// never links the data plane.
#include "cli/cli.h"
#include "comm/bench/bench_command.h"
#include "engine/trainer/tokenize_command.h"
#include "engine/trainer/train_command.h"
#include "serve/serve_command.h"

int main(int argc, char** argv) {
  const cohort::ExternalCommand external[] = {cohort::comm::BenchCommand(),
                                              cohort::engine::TrainCommand(),
                                              cohort::engine::TokenizeCommand(),
                                              cohort::serve::ServeCommand()};
  return cohort::cli::RunCli(argc, argv, external);
}
