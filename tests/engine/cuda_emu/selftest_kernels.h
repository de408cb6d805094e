// Launchers of the emulator self-test's kernels (selftest_kernels.cu, run on the CPU emulator
// only). All but BlockSum carry a deliberate bug, named by the launcher, that selftest.cc
// expects the emulator or AddressSanitizer to report; pointers are emulated device memory
// (cudaMalloc). Call from any host thread; each returns when its kernel has run.
#pragma once

#include <cuda_runtime.h>

namespace emu_selftest {

// out[b] = the sum of in[96 b, 96 b + 96) (n elements in all): correct, no hazard.
void BlockSum(float* out, const float* in, int n, cudaStream_t stream);
// 64 threads; out: 64 floats.
void MissingBarrierRaw(float* out);   // a read of another thread's write, no barrier between
void MissingBarrierWar(float* out);   // a write over another thread's read, no barrier between
void SameWordWrite(float* out);       // every thread writes one shared word
void UnwrittenRead(float* out);       // half the threads read shared words nothing wrote
void SharedOutOfRange(float* out);    // a static shared array indexed one past its end
void DivergentBarrier(float* out);    // __syncthreads reached by one warp of two
// 32 threads, one 16-byte cp.async each; out: 32 floats, in: 128 floats. With
// wait_before_read false the kernel reads the copied words before waiting.
void CpAsyncRead(float* out, const float* in, bool wait_before_read);
void CpAsyncNeverWaited(const float* in);  // commits and never waits
// n threads (n <= 1024); out holds n floats and the last thread writes out[n].
void GlobalOverrun(float* out, int n);
// 32 threads; out: 32 floats; thread 0 reads element `index` of an 8-float local array.
void LocalOverrun(float* out, int index);

}  // namespace emu_selftest
