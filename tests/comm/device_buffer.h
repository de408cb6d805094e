// Device memory for the nccl backend's tests: a commtest::TestBuffer whose data() is a
// cudaMalloc'd pointer on the current device, uploaded and downloaded with cudaMemcpy.
// Written against the CUDA runtime directly (not the library), so that the tests do not
// trust the code under test for their own memory. Without CUDA/NCCL in the build every
// function reports "no device". Buffers belong to the thread's current device; each
// test thread picks its device with UseDevice first.
#pragma once

#include <cstddef>
#include <memory>

#include "comm_test_util.h"

namespace cohort::comm::commtest {

// CUDA devices this process sees; 0 without CUDA/NCCL in the build or without a GPU.
int CudaDeviceCount();

// Makes `device` current on the calling thread; false (and a test failure) on error.
bool UseDevice(int device);

// `bytes` of device memory (zero bytes: data() is null). Failures are test failures
// and return null.
std::unique_ptr<TestBuffer> MakeDeviceBuffer(size_t bytes);

}  // namespace cohort::comm::commtest
