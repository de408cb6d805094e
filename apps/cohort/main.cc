// cohort: parse the subcommand and dispatch (src/cli); the data-plane tools (src/comm
// benchmarks, src/engine training) join as external commands so that the CLI library
// never links the data plane.
#include "cli/cli.h"
#include "comm/bench/bench_command.h"
#include "common/tls_buffers.h"
#include "engine/trainer/tokenize_command.h"
#include "engine/trainer/train_command.h"

// OpenSSL's record buffers come from a pool (common/tls_buffers.h).
COHORT_TLS_RECORD_BUFFER_POOL_AT_START();

int main(int argc, char** argv) {
  const cohort::ExternalCommand external[] = {cohort::comm::BenchCommand(),
                                              cohort::engine::TrainCommand(),
                                              cohort::engine::TokenizeCommand()};
  return cohort::cli::RunCli(argc, argv, external);
}
