// cohort: parse the subcommand and dispatch (src/cli).
#include "cli/cli.h"

int main(int argc, char** argv) { return cohort::cli::RunCli(argc, argv); }
