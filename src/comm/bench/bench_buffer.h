// BenchBuffer: the memory a backend's collectives run on, for the benchmark: host memory
// for gloo, device memory on the current CUDA device for nccl (when built with it).
// UseLocalDevice picks this rank's GPU before the nccl communicator is created.
// A BenchBuffer is used by one thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "common/error.h"

namespace cohort::comm::bench {

class BenchBuffer {
 public:
  virtual ~BenchBuffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
  // Copies `n` bytes from host memory to the start of the buffer, and back.
  virtual Result<void> Upload(const void* host, size_t n) = 0;
  virtual Result<void> Download(void* host, size_t n) const = 0;
};

// kUnavailable for "nccl" in a binary built without it, or when allocation fails.
Result<std::unique_ptr<BenchBuffer>> AllocateBenchBuffer(std::string_view backend, size_t bytes);

// For "nccl": makes device local_rank % (visible devices) current on this thread (a job
// sees either one GPU per task or all of the node's). No-op for other backends.
Result<void> UseLocalDevice(std::string_view backend, int local_rank);

}  // namespace cohort::comm::bench
