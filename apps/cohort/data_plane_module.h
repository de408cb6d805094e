// The data plane as a module: libcohort-data.so holds the collectives (src/comm), the
// training engine (src/engine) and their commands (`cohort bench`, `train`, `tokenize`),
// with everything they link: CUDA, cuBLAS, NCCL, Gloo, OpenBLAS. The `cohort` binary links
// only the control plane and loads the module when one of those commands runs, so the
// head, the agents, the task shim and every CLI call never map the GPU libraries (an idle
// CUDA-linked head held ~190 MB, most of it their relocations), and the binary starts on
// a machine that has no CUDA libraries at all.
//
// The module exports one C function, kDataPlaneEntry: run the command `name` (argv[0] is
// its name, the rest its own flags, as ExternalCommand::run) and return its exit code;
// 127 when the module has no such command.
//
// Threads: the entry is called on the main thread.
#pragma once

namespace cohort {

inline constexpr char kDataPlaneModule[] = "libcohort-data.so";
inline constexpr char kDataPlaneEntry[] = "cohort_data_plane_run";
using DataPlaneEntryFn = int (*)(const char* name, int argc, char** argv);

}  // namespace cohort
