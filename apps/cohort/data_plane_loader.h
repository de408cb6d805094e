// Loads the data-plane module (data_plane_module.h) the first time one of its commands
// runs, from beside the binary (build trees) or from ../lib/cohort/ (installed), and runs
// the command in it.
//
// Threads: main thread only.
#pragma once

namespace cohort {

// Runs data-plane command `name` (argv as ExternalCommand::run). When the module cannot
// be loaded (not installed, or a library it needs is missing: CUDA on a machine without
// it), says so on stderr, naming the file and the loader's reason, and returns 1.
int RunDataPlaneCommand(const char* name, int argc, char** argv);

}  // namespace cohort
