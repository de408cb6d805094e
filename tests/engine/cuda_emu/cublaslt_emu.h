// Test controls of the emulated cuBLASLt (cublaslt_emu.cc), for tests compiled against the
// emulator (COHORT_CUDA_EMULATED): make its heuristic find no algorithm for an epilogue, as
// the real library does for combinations it does not support, so that the callers' fallback
// paths run in CI. Any thread; takes effect for the heuristic queries that follow.
#pragma once

#include <cstdint>

extern "C" {
// decline != 0: cublasLtMatmulAlgoGetHeuristic returns no algorithm (status success, 0
// results) for problems with this cublasLtEpilogue_t value; 0: back to normal.
void CohortEmuCublasLtDeclineEpilogue(uint32_t epilogue, int decline);
}
